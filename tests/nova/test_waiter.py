# SPDX-License-Identifier: Apache-2.0
"""Waiting for accelerator-request-bound: one deadline, the early poll,
timeouts, failed events, BindFailed refusal, and clean-up."""

import threading
import time
import urllib.parse

import pytest

from nova_cyborg_client import compute
from nova_cyborg_client import context as nova_context
from nova_cyborg_client import events
from nova_cyborg_client import exception
from nova_cyborg_client import scheduler

EVENT = events.EVENT_NAME
CTX = nova_context.RequestContext()
INSTANCE = '6a0b0c1d-0000-4000-8000-00000000000a'
A1 = 'a1000000-0000-4000-8000-000000000000'
A2 = 'a2000000-0000-4000-8000-000000000000'


def _instance():
    return compute.Instance(INSTANCE, scheduler.Flavor(
        extra_specs={'accel:device_profile': 'dp'}))


def _arq(uuid, state):
    bound = state == 'Bound'
    return {'uuid': uuid, 'state': state, 'device_profile_name': 'dp',
            'device_profile_group_id': 0, 'instance_uuid': INSTANCE,
            'hostname': 'node1', 'device_rp_uuid': 'rp',
            'attach_handle_type': 'PCI' if bound else '',
            'attach_handle_uuid': 'ah' if bound else None,
            'attach_handle_info': {'domain': '0000', 'bus': '1b',
                                   'device': '00', 'function': '0'}
            if bound else {}}


class FakeService:
    """The stub's ARQ list for the instance, changed by the test; DELETEs
    are recorded.
    """

    def __init__(self, stub, states):
        self.states = dict(states)
        self.gets = 0
        stub.routes[('GET', '/accelerator_requests')] = self.get
        stub.routes[('DELETE', '/accelerator_requests')] = (204, None)
        self.stub = stub

    def get(self, request):
        self.gets += 1
        return 200, {'arqs': [_arq(u, s) for u, s in self.states.items()]}

    def deletes(self):
        return [urllib.parse.parse_qs(r['query'])
                for r in self.stub.requests if r['method'] == 'DELETE']


def _send_later(instance_events, delay, *tags_status):
    def send():
        time.sleep(delay)
        for tag, status in tags_status:
            waiter = instance_events.pop_instance_event(INSTANCE, EVENT, tag)
            if waiter:
                waiter.set({'name': EVENT, 'tag': tag, 'status': status})
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_one_deadline_for_all_events():
    instance_events = events.InstanceEvents()
    wanted = [(EVENT, 'a'), (EVENT, 'b')]
    _send_later(instance_events, 0.3, ('a', 'completed'))
    start = time.monotonic()
    with pytest.raises(exception.InstanceEventTimeout, match='b: not'):
        with events.wait_for_instance_event(instance_events, INSTANCE,
                                            wanted, deadline=0.6):
            pass
    elapsed = time.monotonic() - start
    # 'b' got what was left of the deadline, not a deadline of its own.
    assert 0.55 < elapsed < 0.85, elapsed
    assert instance_events.clear_events_for_instance(INSTANCE) == {}


def test_events_arriving_in_time():
    instance_events = events.InstanceEvents()
    _send_later(instance_events, 0.1, ('a', 'completed'), ('b', 'completed'))
    with events.wait_for_instance_event(instance_events, INSTANCE,
                                        [(EVENT, 'a'), (EVENT, 'b')],
                                        deadline=5):
        pass


def test_failed_event_raises():
    instance_events = events.InstanceEvents()
    _send_later(instance_events, 0.05, ('a', 'failed'))
    with pytest.raises(exception.InstanceEventFailed) as e:
        with events.wait_for_instance_event(instance_events, INSTANCE,
                                            [(EVENT, 'a')], deadline=5):
            pass
    assert str(e.value) == 'Instance event failed'
    assert e.value.event_name == '%s-a' % EVENT


def test_exit_early_skips_those_events():
    instance_events = events.InstanceEvents()
    start = time.monotonic()
    with events.wait_for_instance_event(instance_events, INSTANCE,
                                        [(EVENT, 'a')], deadline=5):
        events.exit_wait_early([(EVENT, 'a')])
    assert time.monotonic() - start < 1
    assert instance_events.clear_events_for_instance(INSTANCE) == {}


def test_bound_before_the_wait_exits_early(stub):
    service = FakeService(stub, {A1: 'Bound', A2: 'Bound'})
    start = time.monotonic()
    arqs = compute.get_bound_arq_resources(
        CTX, _instance(), [A1, A2], events.InstanceEvents(), timeout=10)
    assert time.monotonic() - start < 2
    assert [a['uuid'] for a in arqs] == [A1, A2]
    assert service.gets == 1  # the poll; its ARQs are all we need


def test_some_early_some_by_event(stub):
    service = FakeService(stub, {A1: 'Bound', A2: 'BindStarted'})
    instance_events = events.InstanceEvents()

    def bind_a2():
        time.sleep(0.2)
        service.states[A2] = 'Bound'
        instance_events.pop_instance_event(INSTANCE, EVENT, A2).set(
            {'name': EVENT, 'tag': A2, 'status': 'completed'})
    threading.Thread(target=bind_a2, daemon=True).start()
    arqs = compute.get_bound_arq_resources(CTX, _instance(), [A1, A2],
                                           instance_events, timeout=10)
    assert {a['uuid']: a['state'] for a in arqs} == {A1: 'Bound',
                                                     A2: 'Bound'}
    assert service.gets == 2  # poll, then all of them again


def test_uuids_looked_up_when_none(stub):
    FakeService(stub, {A1: 'Bound'})
    arqs = compute.get_bound_arq_resources(CTX, _instance(), None,
                                           events.InstanceEvents(), timeout=5)
    assert [a['uuid'] for a in arqs] == [A1]


def test_bind_failed_in_the_poll_is_refused_at_once(stub):
    FakeService(stub, {A1: 'BindFailed', A2: 'BindStarted'})
    instance_events = events.InstanceEvents()
    start = time.monotonic()
    with pytest.raises(exception.AcceleratorRequestBindingFailed) as e:
        compute.get_bound_arq_resources(CTX, _instance(), [A1, A2],
                                        instance_events, timeout=10)
    assert time.monotonic() - start < 2
    assert e.value.arqs == [A1]
    assert 'BindFailed' in str(e.value)
    assert instance_events.clear_events_for_instance(INSTANCE) == {}


def test_completed_event_but_arq_not_bound_is_refused(stub):
    service = FakeService(stub, {A1: 'BindStarted'})
    instance_events = events.InstanceEvents()

    def lie():
        time.sleep(0.1)
        service.states[A1] = 'Deleting'
        instance_events.pop_instance_event(INSTANCE, EVENT, A1).set(
            {'name': EVENT, 'tag': A1, 'status': 'completed'})
    threading.Thread(target=lie, daemon=True).start()
    with pytest.raises(exception.AcceleratorRequestBindingFailed,
                       match='Deleting'):
        compute.get_bound_arq_resources(CTX, _instance(), [A1],
                                        instance_events, timeout=10)


def test_timeout_aborts_the_build_and_deletes_arqs(stub, conf):
    service = FakeService(stub, {A1: 'BindStarted', A2: 'BindStarted'})
    conf.set_override('arq_binding_timeout', 1)
    start = time.monotonic()
    with pytest.raises(exception.BuildAbortException) as e:
        compute.build_accel_info(CTX, _instance(), [A1, A2],
                                 events.InstanceEvents())
    assert 0.9 < time.monotonic() - start < 3
    assert str(e.value) == ('Build of instance %s aborted: Failure getting '
                            'accelerator requests.' % INSTANCE)
    assert isinstance(e.value.__cause__, exception.InstanceEventTimeout)
    # By instance (the flavor has a profile), then by uuid, as Nova.
    assert service.deletes() == [{'instance': [INSTANCE]},
                                 {'arqs': ['%s,%s' % (A1, A2)]}]


def test_failed_event_aborts_the_build(stub):
    service = FakeService(stub, {A1: 'BindStarted'})
    instance_events = events.InstanceEvents()
    _send_later(instance_events, 0.1, (A1, 'failed'))
    with pytest.raises(exception.BuildAbortException) as e:
        compute.build_accel_info(CTX, _instance(), [A1], instance_events,
                                 timeout=10)
    assert isinstance(e.value.__cause__, exception.InstanceEventFailed)
    assert len(service.deletes()) == 2


def test_no_accel_uuids_means_nothing_to_wait_for(stub):
    assert compute.build_accel_info(CTX, _instance(), [],
                                    events.InstanceEvents()) == []
    assert stub.requests == []


def test_delete_arqs_if_needed_without_profile(stub):
    FakeService(stub, {})
    instance = compute.Instance(INSTANCE, scheduler.Flavor())
    compute.delete_arqs_if_needed(CTX, instance)
    assert stub.requests == []
    compute.delete_arqs_if_needed(CTX, instance, [A1])
    assert [r['query'] for r in stub.requests] == ['arqs=' + A1]
