# SPDX-License-Identifier: Apache-2.0
"""The agent's prepare_batch endpoint and its client (agent RPC 1.2):
one outcome per ARQ, a failure kept to its ARQ, prepares still running
answered pending and joined (not run again) by a later prepare of that
ARQ; the [upgrade_levels] agent cap turning batches into per-ARQ
prepares.
"""

import threading
import uuid

import oslo_messaging as messaging
import pytest

from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conf import CONF
from cyborg import context as cyborg_context
from cyborg.drivers import base
from cyborg.drivers import fake
from cyborg import rpc


class ScriptedDriver(fake.FakeDriver):
    """The fake driver whose prepare() of a deployable can wait for an
    event or fail; counts the prepares it ran per handle.
    """

    def __init__(self):
        super().__init__(fake.default_host_spec())
        self.hold = {}        # deployable name: Event to wait for
        self.fail = {}        # deployable name: exception to raise
        self.runs = []        # handle uuids, one per prepare run

    def prepare(self, deployable_name, handle):
        self.runs.append(handle['uuid'])
        if deployable_name in self.hold:
            assert self.hold[deployable_name].wait(30)
        if deployable_name in self.fail:
            raise self.fail[deployable_name]
        return {'prepared': handle['uuid']}


@pytest.fixture
def driver():
    return ScriptedDriver()


@pytest.fixture
def agent(driver):
    manager = agent_manager.AgentManager(None, None, drivers=[driver],
                                         host='batch-host')
    yield manager
    manager.stop()


def _item(name, driver_name='fake'):
    return {'arq_uuid': str(uuid.uuid4()), 'deployable_name': name,
            'driver_name': driver_name,
            'handle': {'uuid': str(uuid.uuid4()), 'deployable_name': name}}


def _ctx():
    return cyborg_context.get_admin_context()


def test_a_batch_answers_one_outcome_per_arq(agent, driver):
    ok, broken, gone, held = (_item('a'), _item('b'), _item('c', 'nope'),
                              _item('d'))
    driver.fail['b'] = base.PrepareError('no such function b')
    driver.hold['d'] = threading.Event()
    try:
        results = agent.prepare_batch(_ctx(), [ok, broken, gone, held],
                                      wait=0.2)
    finally:
        driver.hold['d'].set()
    assert results == {
        ok['arq_uuid']: {'info': {'prepared': ok['handle']['uuid']}},
        broken['arq_uuid']: {'error': 'no such function b'},
        gone['arq_uuid']: {
            'error': "No enabled driver 'nope' on host batch-host"},
        held['arq_uuid']: {'pending': True}}


def test_a_pending_prepare_is_joined_not_run_again(agent, driver):
    held = _item('d')
    driver.hold['d'] = threading.Event()
    assert agent.prepare_batch(_ctx(), [held], wait=0) == {
        held['arq_uuid']: {'pending': True}}
    answer = []
    joiner = threading.Thread(target=lambda: answer.append(agent.prepare(
        _ctx(), 'd', 'fake', held['handle'], arq_uuid=held['arq_uuid'])))
    joiner.start()
    driver.hold['d'].set()
    joiner.join(30)
    assert answer == [{'prepared': held['handle']['uuid']}]
    # Asked again (the reply was lost, or a peer took the bind over):
    # the kept outcome, still one prepare.
    assert agent.prepare(_ctx(), 'd', 'fake', held['handle'],
                         arq_uuid=held['arq_uuid']) == answer[0]
    assert driver.runs == [held['handle']['uuid']]


def test_a_pending_prepare_that_fails_raises_for_the_joiner(agent, driver):
    held = _item('d')
    driver.hold['d'] = threading.Event()
    driver.fail['d'] = base.PrepareError('MIG layout full')
    assert agent.prepare_batch(_ctx(), [held], wait=0) == {
        held['arq_uuid']: {'pending': True}}
    driver.hold['d'].set()
    # (The endpoint marks the driver's error as expected, for the RPC
    # server to send it back without a traceback in the log.)
    with pytest.raises(messaging.ExpectedException) as raised:
        agent.prepare(_ctx(), 'd', 'fake', held['handle'],
                      arq_uuid=held['arq_uuid'])
    assert str(raised.value.exc_info[1]) == 'MIG layout full'
    assert driver.runs == [held['handle']['uuid']]


def test_a_released_handle_is_prepared_afresh(agent, driver):
    item = _item('a')
    agent.prepare_batch(_ctx(), [item], wait=5)
    agent.release(_ctx(), [dict(item['handle'], driver_name='fake')])
    agent.prepare(_ctx(), 'a', 'fake', item['handle'],
                  arq_uuid=item['arq_uuid'])
    assert driver.runs == [item['handle']['uuid']] * 2


def test_without_an_arq_nothing_is_kept(agent, driver):
    """A conductor before 1.2 sends no arq_uuid: each prepare runs."""
    item = _item('a')
    for _ in range(2):
        agent.prepare(_ctx(), 'a', 'fake', item['handle'])
    assert driver.runs == [item['handle']['uuid']] * 2


# The client, over the in-process fake:// transport ------------------------

@pytest.fixture
def served(agent):
    server = rpc.get_server(rpc.AGENT_TOPIC, [agent], server=agent.host)
    server.start()
    yield agent
    server.stop()
    server.wait()


class Spy:
    """Records the version and method of every message an AgentAPI's
    client sends, passing it on.
    """

    def __init__(self, api, monkeypatch):
        self.sent = []
        real = api.client.prepare

        def prepare(**kwargs):
            prepared = real(**kwargs)
            call = prepared.call

            def record(context, method, **args):
                self.sent.append((kwargs.get('version'), method,
                                  sorted(args)))
                return call(context, method, **args)
            monkeypatch.setattr(prepared, 'call', record)
            return prepared
        monkeypatch.setattr(api.client, 'prepare', prepare)


def test_the_client_sends_one_batch(served, driver, monkeypatch):
    api = agent_rpcapi.AgentAPI()
    spy = Spy(api, monkeypatch)
    items = [_item('a'), _item('b')]
    assert api.can_prepare_batch()
    results = api.prepare_batch(_ctx(), served.host, items, 5)
    assert results == {i['arq_uuid']: {'info': {
        'prepared': i['handle']['uuid']}} for i in items}
    assert spy.sent == [('1.2', 'prepare_batch', ['items', 'wait'])]


def test_capped_below_1_2_batches_are_per_arq_prepares(served, driver,
                                                       monkeypatch):
    CONF.set_override('agent', '1.1', group='upgrade_levels')
    api = agent_rpcapi.AgentAPI()
    spy = Spy(api, monkeypatch)
    items = [_item('a'), _item('b')]
    assert not api.can_prepare_batch()
    # Nothing sent: every ARQ pending, for the caller to prepare alone.
    assert api.prepare_batch(_ctx(), served.host, items, 5) == {
        i['arq_uuid']: {'pending': True} for i in items}
    assert spy.sent == []
    item = items[0]
    assert api.prepare(_ctx(), served.host, 'a', 'fake', item['handle'],
                       arq_uuid=item['arq_uuid']) == {
        'prepared': item['handle']['uuid']}
    # 1.1 has no arq_uuid: an older agent would refuse the call.
    assert spy.sent == [('1.1', 'prepare', [
        'deployable_name', 'driver_name', 'handle'])]


def test_uncapped_prepare_carries_the_arq(served, driver, monkeypatch):
    api = agent_rpcapi.AgentAPI()
    spy = Spy(api, monkeypatch)
    item = _item('a')
    api.prepare(_ctx(), served.host, 'a', 'fake', item['handle'],
                arq_uuid=item['arq_uuid'])
    assert spy.sent == [('1.2', 'prepare', [
        'arq_uuid', 'deployable_name', 'driver_name', 'handle'])]
