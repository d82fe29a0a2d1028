# SPDX-License-Identifier: Apache-2.0
"""Binds that survive an agent that does not answer and a conductor that
dies (issue #19): the prepare is asked again until the bind's deadline,
and a live conductor takes over the binds of one that stopped
heartbeating, reusing the handle it had claimed.
"""

import datetime
import logging
import uuid

from kombu import exceptions as kombu_exc
from oslo_db import exception as db_exc
import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import nova
from cyborg.conductor import binder as conductor_binder
from cyborg.conductor import outage
from cyborg import context as cyborg_context
from cyborg.db import api as db_api
from cyborg.db import bindings
from cyborg.db import conductors
from cyborg.db import models
from cyborg import drivers
from tests.conductor import test_binding

nova_server = test_binding.nova_server
ARQ = models.ExtendedAcceleratorRequest.__table__
GPU = '0000:1b:00.0'


@pytest.fixture
def stack(sqlite_database, placement_service, nova_server):
    s = test_binding.Stack(placement_service, nova_server)
    s.profile('gpu', [{'resources:PGPU': '1'}])
    s.profile('fpga', [{'resources:FPGA': '1'}])
    s.stop_conductor()
    yield s
    s.stop()


class QuietAgent:
    """The agent RPC API, whose prepare() gets no answer (a messaging
    timeout: the agent restarting, or gone) the first `silent` times.
    """

    def __init__(self, silent, on_silence=None):
        self.real = agent_rpcapi.AgentAPI()
        self.silent = silent
        self.calls = 0
        self.on_silence = on_silence

    def prepare(self, *args, **kwargs):
        self.calls += 1
        if self.calls <= self.silent:
            if self.on_silence is not None:
                self.on_silence()
            raise messaging.MessagingTimeout(
                'Timed out waiting for a reply to message ID 1')
        return self.real.prepare(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.real, name)


def _binder(agent_api=None, **kwargs):
    return conductor_binder.Binder(
        agent_api or agent_rpcapi.AgentAPI(),
        nova.NovaNotifier(give_up_after=30), retry_max_delay=0.05,
        **kwargs)


def _bind_started(stack, profile='gpu', address=GPU):
    [arq] = stack.create_arqs(profile)
    instance = str(uuid.uuid4())
    assert stack.bind([arq], instance,
                      [stack.rp(address)]).status_int == 202
    return arq['uuid'], instance


def _row(uuid_):
    with db_api.reader() as session:
        return session.execute(sa.select(ARQ).where(
            ARQ.c.uuid == uuid_)).mappings().one()


def test_an_agent_that_does_not_answer_is_asked_again(stack):
    arq, instance = _bind_started(stack)
    seen = []
    agent = QuietAgent(2, on_silence=lambda: seen.append(
        _row(arq)['state']))
    binder = _binder(agent)
    try:
        binder.bind(cyborg_context.get_admin_context(), [arq])
        assert binder.notify_pending() == 1
    finally:
        binder.stop()
    # BindStarted while the agent was silent, not BindFailed at once.
    assert seen == ['BindStarted', 'BindStarted']
    assert agent.calls == 3
    [bound] = stack.arqs(instance)
    assert bound['state'] == 'Bound'
    assert stack.driver.prepared == [bound['attach_handle_uuid']]
    assert stack.wait_events(1)[0]['status'] == 'completed'


def test_past_the_deadline_the_bind_fails_with_the_reason(stack):
    arq, instance = _bind_started(stack)
    agent = QuietAgent(10 ** 6)
    binder = _binder(agent, bind_timeout=0.3)
    try:
        binder.bind(cyborg_context.get_admin_context(), [arq])
    finally:
        binder.stop()
    row = _row(arq)
    assert row['state'] == 'BindFailed'
    assert row['bind_failure'].startswith(
        'Preparing the device failed: the agent on %s did not answer '
        'within 0.3 s (MessagingTimeout: Timed out' % stack.host)
    assert agent.calls >= 2
    assert row['attach_handle_id'] is None
    with db_api.reader() as session:
        in_use = session.execute(sa.select(sa.func.count()).where(
            models.AttachHandle.__table__.c.in_use == sa.true())).scalar()
    assert in_use == 0


def test_an_agent_error_still_fails_at_once(stack):
    arq, instance = _bind_started(stack)
    stack.driver.fail_with = 'GPU fell off the bus'
    binder = _binder()
    try:
        binder.bind(cyborg_context.get_admin_context(), [arq])
    finally:
        binder.stop()
    row = _row(arq)
    assert row['state'] == 'BindFailed'
    assert 'GPU fell off the bus' in row['bind_failure']


def test_a_dead_conductors_bind_is_taken_over_with_its_handle(stack):
    """Conductor `dead` claimed a handle and died before the prepare
    ended; a live one's heartbeat takes the bind over and binds it with
    that same handle. A bind held by a conductor that still heartbeats
    is left alone, and cannot be claimed by another.
    """
    dead_arq, dead_instance = _bind_started(stack)
    live_arq, _ = _bind_started(stack, address='0000:43:00.0')
    conductors.heartbeat('dead:1:aaaaaa')
    conductors.heartbeat('live:2:bbbbbb')
    held = bindings.claim_handle(dead_arq, drivers.handle_picker,
                                 owner='dead:1:aaaaaa')['handle']
    bindings.claim_handle(live_arq, drivers.handle_picker,
                          owner='live:2:bbbbbb')
    with db_api.writer() as session:
        session.execute(models.Conductor.__table__.update().where(
            models.Conductor.__table__.c.name == 'dead:1:aaaaaa').values(
            heartbeat_at=models.utcnow() - datetime.timedelta(seconds=60)))
    binder = _binder(name='peer:3:cccccc', heartbeat_timeout=30)
    try:
        # A cast of the live peer's ARQ reaching this conductor: not its.
        binder.bind(cyborg_context.get_admin_context(), [live_arq])
        assert _row(live_arq)['state'] == 'BindStarted'
        assert binder.heartbeat() == 1
        binder.bind(cyborg_context.get_admin_context(), [dead_arq])
    finally:
        binder.stop()
    [bound] = stack.arqs(dead_instance)
    assert bound['state'] == 'Bound'
    assert bound['attach_handle_uuid'] == held['uuid']
    assert _row(dead_arq)['bind_owner'] == 'peer:3:cccccc'
    live = _row(live_arq)
    assert (live['state'], live['bind_owner']) == ('BindStarted',
                                                   'live:2:bbbbbb')
    # Stopping removed the peer's row; the live one's is there.
    assert conductors.live(3600) == ['dead:1:aaaaaa', 'live:2:bbbbbb']


def test_a_bind_taken_over_is_not_taken_again_from_a_live_holder(stack):
    arqs = [_bind_started(stack, 'fpga', '0000:0c:00.0')[0]
            for _ in range(3)]
    for arq in arqs:
        bindings.claim_handle(arq, drivers.handle_picker, owner='gone:1:a')
    conductors.heartbeat('one:2:b')
    conductors.heartbeat('two:3:c')
    first = conductors.take_over('one:2:b', 5)
    second = conductors.take_over('two:3:c', 5)
    assert sorted(first['gone:1:a']) == sorted(arqs)
    assert second == {}
    assert sorted(conductors.held_by('one:2:b')) == sorted(arqs)


def test_a_database_outage_is_logged_once_each_way(caplog):
    db = outage.DatabaseOutage()
    lost = db_exc.DBConnectionError('(pymysql.err.OperationalError) (2003, '
                                    '"Can\'t connect to MySQL server")')
    with caplog.at_level(logging.INFO, logger=outage.__name__):
        assert db.failed(lost, 'heartbeating')
        assert db.failed(lost, 'claiming handles')
        assert not db.failed(ValueError('a bug'), 'claiming handles')
        db.ok()
        db.ok()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0][0] == 'WARNING'
    assert lines[0][1].startswith(
        'The database is unreachable (DBConnectionError while heartbeating')
    assert lines[1][0] == 'INFO'
    assert lines[1][1].startswith('The database is reachable again')


def test_a_report_during_an_outage_is_answered_without_a_traceback(
        monkeypatch, caplog):
    from cyborg.conductor import manager
    from cyborg.db import host_inventory

    def unreachable(hostname, devices):
        raise db_exc.DBConnectionError('(2013, "Lost connection to server '
                                       'during query")')

    monkeypatch.setattr(host_inventory, 'apply_report', unreachable)
    monkeypatch.setattr(outage, 'DATABASE', outage.DatabaseOutage())
    endpoint = manager.ConductorManager()
    context = cyborg_context.get_admin_context()
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            # Declared expected: oslo.messaging's server logs it without a
            # traceback and the agent gets the message.
            with pytest.raises(messaging.ExpectedException) as raised:
                endpoint.report_data(context, 'compute-1', [])
            assert isinstance(raised.value.exc_info[1],
                              manager.DatabaseUnavailable)
    outage_lines = [r for r in caplog.records
                    if r.getMessage().startswith('The database is')]
    assert len(outage_lines) == 1
    assert 'while handling report_data' in outage_lines[0].getMessage()


@pytest.mark.parametrize('exc, again', [
    (messaging.MessagingTimeout('no reply'), True),
    (messaging.MessageDeliveryFailure('broker gone'), True),
    # What the rabbit driver raises while the broker refuses connections
    # (seen in the fault suite's RabbitMQ restart).
    (kombu_exc.OperationalError('[Errno 111] Connection refused'), True),
    (ConnectionRefusedError(111, 'Connection refused'), True),
    (messaging.RemoteError('PrepareError', 'no such MIG profile'), False),
    (RuntimeError('a bug'), False),
])
def test_which_failures_are_asked_again(exc, again):
    assert conductor_binder.unreachable(exc) is again
