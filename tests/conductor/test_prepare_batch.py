# SPDX-License-Identifier: Apache-2.0
"""The binder's batched prepares (agent RPC 1.2): the ARQs of one agent
claimed together cost one prepare_batch call; a slow prepare still holds
back only its own ARQ; a failure stays with its ARQ; an agent that does
not answer the batch, or one capped below 1.2, gets per-ARQ prepares.
"""

import threading
import uuid

import oslo_messaging as messaging
import pytest

from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import nova
from cyborg.conductor import binder as conductor_binder
from cyborg.conf import CONF
from cyborg import context as cyborg_context
from tests.conductor import test_binding

nova_server = test_binding.nova_server
GPUS = ('0000:1b:00.0', '0000:43:00.0')


class Driver(test_binding.RecordingDriver):
    """RecordingDriver failing for the deployables named in `broken`."""

    def __init__(self):
        super().__init__()
        self.broken = set()

    def prepare(self, deployable_name, handle):
        if deployable_name in self.broken:
            if deployable_name in self.hold:
                self.hold[deployable_name].wait(30)
            raise RuntimeError('%s fell off the bus' % deployable_name)
        return super().prepare(deployable_name, handle)


@pytest.fixture
def stack(sqlite_database, placement_service, nova_server):
    s = test_binding.Stack(placement_service, nova_server, driver=Driver())
    s.profile('gpu', [{'resources:PGPU': '1'}])
    s.stop_conductor()
    yield s
    s.stop()


class CountingAgent:
    """The agent RPC API, counting the calls the binder makes; the first
    `silent` batches get no answer (a messaging timeout).
    """

    def __init__(self, silent=0, refuse=False):
        self.real = agent_rpcapi.AgentAPI()
        self.batches, self.prepares = [], []
        self.silent = silent
        self.refuse = refuse

    def prepare_batch(self, context, host, items, wait):
        self.batches.append(sorted(i['arq_uuid'] for i in items))
        if len(self.batches) <= self.silent:
            raise messaging.MessagingTimeout('no reply to the batch')
        if self.refuse:
            # What an agent older than 1.2 answers, with no cap set.
            raise messaging.RemoteError(
                'UnsupportedVersion', 'Endpoint does not support RPC '
                'version 1.2. Attempted method: prepare_batch')
        return self.real.prepare_batch(context, host, items, wait)

    def prepare(self, *args, **kwargs):
        self.prepares.append(kwargs.get('arq_uuid'))
        return self.real.prepare(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.real, name)


def _bind_started(stack, addresses):
    """One ARQ per address, each of its own instance, in BindStarted."""
    arqs = {}
    for address in addresses:
        [arq] = stack.create_arqs('gpu')
        instance = str(uuid.uuid4())
        assert stack.bind([arq], instance,
                          [stack.rp(address)]).status_int == 202
        arqs[address] = (arq['uuid'], instance)
    return arqs


def _binder(agent, wait=0.5):
    return conductor_binder.Binder(
        agent, nova.NovaNotifier(give_up_after=30), retry_max_delay=0.05,
        prepare_batch_wait=wait)


def _bind_all(agent, arqs):
    """A binder over `agent` binds every ARQ of `arqs` and stops; the
    binder, for what it has left to send.
    """
    binder = _binder(agent)
    try:
        binder.bind(cyborg_context.get_admin_context(),
                    [u for u, _ in arqs.values()])
    finally:
        binder.stop()
    return binder


def _state(stack, instance):
    return stack.arqs(instance)[0]['state']


def test_one_agent_call_per_batch(stack):
    arqs = _bind_started(stack, GPUS)
    agent = CountingAgent()
    _bind_all(agent, arqs)
    assert agent.batches == [sorted(u for u, _ in arqs.values())]
    assert agent.prepares == []
    for _, instance in arqs.values():
        [bound] = stack.arqs(instance)
        assert bound['state'] == 'Bound'
        assert bound['attach_handle_info']['prepared_by'] == 'test'
    assert len(stack.driver.prepared) == 2


def test_a_failure_in_a_batch_is_its_arqs_alone(stack):
    arqs = _bind_started(stack, GPUS)
    stack.driver.broken.add(GPUS[0])
    binder = _bind_all(CountingAgent(), arqs)
    assert _state(stack, arqs[GPUS[0]][1]) == 'BindFailed'
    assert _state(stack, arqs[GPUS[1]][1]) == 'Bound'
    assert binder.notify_pending() == 2
    assert sorted(e['status'] for e in stack.wait_events(2)) == [
        'completed', 'failed']


def test_a_hung_prepare_in_a_batch_holds_back_only_its_own_arq(stack):
    """The agent answers the batch after the bounded wait with the slow
    ARQ pending; its own prepare call joins the prepare under way (the
    driver's prepare runs once), while the other ARQ is Bound and Nova
    told.
    """
    arqs = _bind_started(stack, GPUS)
    slow, fast = arqs[GPUS[0]], arqs[GPUS[1]]
    stack.driver.hold[GPUS[0]] = threading.Event()
    agent = CountingAgent()
    binder = _binder(agent, wait=0.1)
    binder.start()
    binding = threading.Thread(target=binder.bind, args=(
        cyborg_context.get_admin_context(), [slow[0], fast[0]]))
    binding.start()
    try:
        assert stack.wait_resolved(fast[1])[0]['state'] == 'Bound'
        assert [e['tag'] for e in stack.wait_events(1)] == [fast[0]]
        assert _state(stack, slow[1]) == 'BindStarted'
        assert binding.is_alive()       # bind() waits for both outcomes
        binder.recover(wait=False)      # left to the prepare under way
    finally:
        stack.driver.hold[GPUS[0]].set()
        binding.join(30)
        binder.stop()
    assert not binding.is_alive()
    [bound] = stack.arqs(slow[1])
    assert bound['state'] == 'Bound'
    assert stack.driver.prepared.count(bound['attach_handle_uuid']) == 1
    assert agent.batches == [sorted([slow[0], fast[0]])]
    assert agent.prepares == [slow[0]]


def test_a_hung_prepare_that_fails_fails_its_arq_alone(stack):
    arqs = _bind_started(stack, GPUS)
    slow, fast = arqs[GPUS[0]], arqs[GPUS[1]]
    stack.driver.broken.add(GPUS[0])
    stack.driver.hold[GPUS[0]] = threading.Event()
    binder = _binder(CountingAgent(), wait=0.1)
    binding = threading.Thread(target=binder.bind, args=(
        cyborg_context.get_admin_context(), [slow[0], fast[0]]))
    binding.start()
    try:
        assert stack.wait_resolved(fast[1])[0]['state'] == 'Bound'
    finally:
        stack.driver.hold[GPUS[0]].set()
        binding.join(30)
        binder.stop()
    assert _state(stack, slow[1]) == 'BindFailed'


def test_an_unanswered_batch_is_asked_again_per_arq(stack):
    arqs = _bind_started(stack, GPUS)
    agent = CountingAgent(silent=1)
    _bind_all(agent, arqs)
    assert len(agent.batches) == 1
    assert sorted(agent.prepares) == sorted(u for u, _ in arqs.values())
    assert [_state(stack, i) for _, i in arqs.values()] == ['Bound'] * 2
    assert len(stack.driver.prepared) == 2


def test_capped_below_1_2_each_arq_is_prepared_alone(stack, monkeypatch):
    CONF.set_override('agent', '1.1', group='upgrade_levels')
    sent = []
    real = agent_manager.AgentManager.prepare_batch
    monkeypatch.setattr(
        agent_manager.AgentManager, 'prepare_batch',
        lambda self, *a, **kw: sent.append(a) or real(self, *a, **kw))
    arqs = _bind_started(stack, GPUS)
    agent = CountingAgent()
    _bind_all(agent, arqs)
    assert sent == []
    assert sorted(agent.prepares) == sorted(u for u, _ in arqs.values())
    assert [_state(stack, i) for _, i in arqs.values()] == ['Bound'] * 2


def test_a_batch_the_agent_refuses_is_prepared_per_arq(stack):
    """An agent older than 1.2 and no [upgrade_levels] cap: the batch is
    refused, each ARQ is prepared alone, the 1.1 way (no arq_uuid).
    """
    arqs = _bind_started(stack, GPUS)
    agent = CountingAgent(refuse=True)
    _bind_all(agent, arqs)
    assert len(agent.batches) == 1
    assert agent.prepares == [None, None]
    assert [_state(stack, i) for _, i in arqs.values()] == ['Bound'] * 2
