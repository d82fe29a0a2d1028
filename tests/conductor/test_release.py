# SPDX-License-Identifier: Apache-2.0
"""Unbind and delete release handles through the conductor, as bind
prepares them: API (DB frees the handles, answers at once) → conductor
(release_handles, RPC 1.3) → each handle's agent → driver release().
"""

import time
import uuid

import pytest
import sqlalchemy as sa

from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import models
from tests.conductor import test_binding

nova_server = test_binding.nova_server
NOVA_HEADERS = test_binding.NOVA_HEADERS
GPU, OTHER_GPU = '0000:1b:00.0', '0000:43:00.0'
UNBIND = [{'op': 'remove', 'path': p}
          for p in ('/hostname', '/device_rp_uuid', '/instance_uuid')]


@pytest.fixture
def stack(sqlite_database, placement_service, nova_server):
    s = test_binding.Stack(placement_service, nova_server)
    yield s
    s.stop()


@pytest.fixture
def conductor_calls(monkeypatch):
    """The handles each release_handles the conductor served was given."""
    calls = []
    real = conductor_manager.ConductorManager.release_handles

    def release_handles(self, context, handles):
        calls.append([h['uuid'] for h in handles])
        return real(self, context, handles)

    monkeypatch.setattr(conductor_manager.ConductorManager,
                        'release_handles', release_handles)
    return calls


def _bound(stack, address=GPU):
    """A GPU ARQ bound to a new instance: (arq, instance, handle uuid)."""
    [arq] = stack.create_arqs('gpu')
    instance = str(uuid.uuid4())
    assert stack.bind([arq], instance,
                      [stack.rp(address)]).status_int == 202
    [bound] = stack.wait_resolved(instance)
    assert bound['state'] == 'Bound'
    return arq, instance, bound['attach_handle_uuid']


def _in_use(handle_uuid):
    table = models.AttachHandle.__table__
    with db_api.reader() as session:
        return session.execute(sa.select(table.c.in_use).where(
            table.c.uuid == handle_uuid)).scalar()


def _wait_released(stack, count, timeout=15):
    deadline = time.time() + timeout
    while len(stack.driver.released) < count and time.time() < deadline:
        time.sleep(0.05)
    return stack.driver.released


def _unbind(stack, arq):
    return stack.api('PATCH', '/v2/accelerator_requests',
                     {arq['uuid']: UNBIND}, NOVA_HEADERS)


def test_unbind_and_delete_release_through_the_conductor(stack,
                                                         conductor_calls):
    stack.profile('gpu', [{'resources:PGPU': '1'}])
    arq, instance, handle = _bound(stack)
    r = _unbind(stack, arq)
    assert (r.status_int, r.body) == (202, b'')
    assert _in_use(handle) is False          # freed before the answer
    assert _wait_released(stack, 1) == [handle]
    assert conductor_calls == [[handle]]
    assert stack.arqs(instance) == []

    arq, instance, handle = _bound(stack)
    r = stack.api('DELETE', '/v2/accelerator_requests?instance=%s'
                  % instance, headers=NOVA_HEADERS)
    assert (r.status_int, r.body) == (204, b'')
    assert _wait_released(stack, 2)[1] == handle
    assert conductor_calls == [stack.driver.released[:1], [handle]]


def test_unbinding_an_unbound_arq_sends_nothing(stack, conductor_calls,
                                                monkeypatch):
    """Nothing freed, nothing to release: no message at all."""
    sent = []
    monkeypatch.setattr(conductor_rpcapi.ConductorAPI, 'release_handles',
                        lambda self, context, handles: sent.append(handles))
    stack.profile('gpu', [{'resources:PGPU': '1'}])
    [arq] = stack.create_arqs('gpu')
    assert _unbind(stack, arq).status_int == 202
    assert sent == []


def test_conductor_down_unbind_answers_and_release_waits_for_it(
        stack, conductor_calls):
    """With no conductor running the API answers as always and the DB has
    freed the handles; the release waits in the conductor's queue and
    reaches the agent once a conductor is back.
    """
    stack.profile('gpu', [{'resources:PGPU': '1'}])
    unbound, _, unbound_handle = _bound(stack)
    deleted, _, deleted_handle = _bound(stack, OTHER_GPU)
    stack.stop_conductor()
    r = _unbind(stack, unbound)
    assert (r.status_int, r.body) == (202, b'')
    r = stack.api('DELETE', '/v2/accelerator_requests?arqs=%s'
                  % deleted['uuid'], headers=dict(NOVA_HEADERS,
                                                  **{'X-Roles': 'admin'}))
    assert (r.status_int, r.body) == (204, b'')
    assert _in_use(unbound_handle) is False
    assert _in_use(deleted_handle) is False
    # Only a conductor asks an agent to release: none has yet.
    assert stack.driver.released == []
    assert conductor_calls == []

    stack.start_conductor()
    assert sorted(_wait_released(stack, 2)) == sorted(
        [unbound_handle, deleted_handle])
    assert conductor_calls == [[unbound_handle], [deleted_handle]]


def test_capped_below_1_3_the_api_asks_the_agents_itself(stack,
                                                         conductor_calls):
    """[upgrade_levels] conductor = 1.2 (conductors not upgraded yet):
    release_handles is not sent to them; the agents are asked directly,
    as before 1.3, even with no conductor running.
    """
    CONF.set_override('conductor', '1.2', group='upgrade_levels')
    stack.profile('gpu', [{'resources:PGPU': '1'}])
    arq, _, handle = _bound(stack)
    stack.stop_conductor()
    assert _unbind(stack, arq).status_int == 202
    assert _wait_released(stack, 1) == [handle]
    assert conductor_calls == []


def test_broker_down_unbind_still_answers(stack, monkeypatch):
    """The cast to the conductor cannot be sent (the broker is down after
    its retries): the unbind is recorded and answered all the same; a
    reconciling driver undoes the missed release on its next report.
    """
    tried = []

    def cast_fails(client, context, method, **kwargs):
        tried.append(method)
        return False

    stack.profile('gpu', [{'resources:PGPU': '1'}])
    arq, instance, handle = _bound(stack)
    monkeypatch.setattr(conductor_rpcapi.rpc, 'best_effort_cast', cast_fails)
    r = _unbind(stack, arq)
    assert (r.status_int, r.body) == (202, b'')
    assert tried == ['release_handles']
    assert _in_use(handle) is False
    assert stack.arqs(instance) == []
