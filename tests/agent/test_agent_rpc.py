# SPDX-License-Identifier: Apache-2.0
"""Agent → conductor over oslo.messaging (in-process fake:// transport),
then Placement; and device disable/enable through the API fencing the
device's provider via the agent."""

import time
import uuid

import pytest
import webob

from cyborg.agent import manager as agent_manager
from cyborg.agent import providers
from cyborg.api import app as api_app
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.conf import CONF
from cyborg.db import devices as devices_db
from cyborg.placement import client as placement
from cyborg import rpc


@pytest.fixture
def stack(sqlite_database, placement_service):
    adapter = placement_service.adapter()
    host = 'agent-%s' % uuid.uuid4().hex[:8]
    root = adapter.post('/resource_providers', microversion='1.26',
                        json={'name': host}).json()['uuid']
    CONF.set_override('report_interval', 1, group='agent')
    conductor = rpc.get_server(rpc.CONDUCTOR_TOPIC,
                               [conductor_manager.ConductorManager()],
                               server='conductor')
    agent = agent_manager.AgentManager(
        conductor_rpcapi.ConductorAPI(timeout=10),
        placement.PlacementClient(adapter), host=host)
    agent_server = rpc.get_server(rpc.AGENT_TOPIC, [agent], server=host)
    conductor.start()
    agent_server.start()
    yield {'agent': agent, 'host': host, 'root': root,
           'client': placement.PlacementClient(adapter)}
    agent.stop()
    for server in (agent_server, conductor):
        server.stop()
        server.wait()


def _api(method, path):
    request = webob.Request.blank(path, method=method)
    return request.get_response(api_app.setup_app())


def test_report_reaches_db_and_placement(stack):
    db_writes, placement_writes = stack['agent'].report_once(full=True)
    assert db_writes > 0 and placement_writes > 0
    devices = devices_db.list_(hostname=stack['host'])
    assert len(devices) == 3
    assert stack['agent'].report_once() == (0, 0)
    tree = stack['client'].tree(stack['root'])
    assert len(tree) == 4
    deployables = _api('GET', '/v2/deployables').json['deployables']
    assert {d['rp_uuid'] for d in deployables} == \
        {rp['uuid'] for rp in tree} - {stack['root']}


def _wait_for(predicate, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_disable_and_enable_fence_the_provider(stack):
    stack['agent'].report_once(full=True)
    stack['agent'].start()
    fpga = next(d for d in devices_db.list_(hostname=stack['host'])
                if d['type'] == 'FPGA')
    rp = providers.provider_uuid(stack['host'], '0000:0c:00.0')

    def reserved():
        return stack['client'].inventories(rp)[1]['FPGA']['reserved']

    r = _api('POST', '/v2/devices/%s/disable' % fpga['uuid'])
    assert r.status_int == 200 and r.body == b''
    assert _wait_for(lambda: reserved() == 4)
    r = _api('POST', '/v2/devices/%s/enable' % fpga['uuid'])
    assert r.status_int == 200
    assert _wait_for(lambda: reserved() == 0)
