# SPDX-License-Identifier: Apache-2.0
"""The driver contract (cyborg.drivers.base): the defaults do what their
docstrings say, every hook the agent calls is declared there, and an
agent runs a driver that writes nothing but discover().
"""

import ast
import inspect
import uuid
import wsgiref.util as wsgi_util

from prometheus_client import parser
import pytest

from cyborg.agent import manager as agent_manager
from cyborg.agent import metrics
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.conf import CONF
from cyborg import context as cyborg_context
from cyborg.db import devices as devices_db
from cyborg import drivers
from cyborg.drivers import base
from cyborg.objects import device as records
from cyborg.placement import client as placement
from cyborg import rpc

ADDRESS = '0000:5e:00.0'


class MinimalDriver(base.Driver):
    """Only what the contract requires."""

    name = 'minimal'

    def discover(self):
        handle = records.AttachHandle('PCI', records.pci_info(ADDRESS))
        return [records.Device(
            type='FPGA', vendor='abcd', model='minimal', product_id='0001',
            controlpath_id={'cpid_type': 'PCI',
                            'cpid_info': records.pci_info(ADDRESS)},
            deployables=[records.Deployable(
                name=ADDRESS, num_accelerators=1, resource_class='FPGA',
                traits=[], attach_handles=[handle],
                driver_name=self.name)],
            std_board_info={'product_id': '0001', 'numa_node': 0},
            vendor_board_info='minimal')]


def test_discover_is_the_only_hook_a_driver_must_write():
    class Nothing(base.Driver):
        name = 'nothing'

    with pytest.raises(TypeError, match='discover'):
        Nothing()
    MinimalDriver()


def test_defaults_do_what_they_say():
    drv = MinimalDriver()
    handle = {'uuid': str(uuid.uuid4()), 'attach_type': 'PCI',
              'attach_info': '{}'}
    assert drv.prepare(ADDRESS, handle) is None
    assert drv.release(ADDRESS, handle) is None
    assert drv.set_share_modes({ADDRESS: {'mode': 'mps', 'slots': 4}}) \
        is False
    assert drv.reconcile({ADDRESS: [handle]}) == (False, {})
    with pytest.raises(base.Unsupported,
                       match='^driver minimal cannot reclaim devices$'):
        drv.reclaim(ADDRESS)
    # Unsupported is a PrepareError: callers that expect the one also
    # expect the other.
    assert issubclass(base.Unsupported, base.PrepareError)
    assert drv.start() is None
    assert drv.stop() is None
    assert drv.telemetry(ADDRESS) is None
    assert drv.health is None
    assert drv.inventory_follows_bindings is False
    handles = [{'uuid': 'a'}, {'uuid': 'b'}]
    assert MinimalDriver.pick_handles({'name': ADDRESS}, {}, handles) \
        == handles


def test_unknown_driver_gets_the_defaults():
    """The conductor asks the class (it has no devices); a driver that is
    no longer installed behaves as the base class.
    """
    handles = [{'uuid': 'a'}]
    assert drivers.handle_picker('no-such-driver')(
        {'name': ADDRESS}, {}, handles) == handles
    assert drivers.follows_bindings('no-such-driver') is False
    assert drivers.follows_bindings('nvidia') is True
    assert drivers.follows_bindings('fake') is False


def _driver_hooks_called(module):
    """Attribute names the module reads off a driver: `drv.X` and
    `self._driver(...).X`.
    """
    tree = ast.parse(inspect.getsource(module))
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id == 'drv':
            names.add(node.attr)
        elif (isinstance(value, ast.Call)
              and isinstance(value.func, ast.Attribute)
              and value.func.attr == '_driver'):
            names.add(node.attr)
    return names


def test_every_hook_the_agent_calls_is_declared_on_the_base():
    called = _driver_hooks_called(agent_manager)
    # The agent really goes through its drivers (the scan finds calls).
    assert {'discover', 'prepare', 'release', 'reconcile', 'reclaim',
            'set_share_modes', 'start', 'stop'} <= called
    assert called <= set(dir(base.Driver))
    source = inspect.getsource(agent_manager)
    assert 'hasattr(' not in source
    assert "getattr(drv" not in source


@pytest.fixture
def agent(sqlite_database, placement_service):
    adapter = placement_service.adapter()
    host = 'minimal-%s' % uuid.uuid4().hex[:8]
    adapter.post('/resource_providers', microversion='1.26',
                 json={'name': host})
    conductor = rpc.get_server(rpc.CONDUCTOR_TOPIC,
                               [conductor_manager.ConductorManager()],
                               server='conductor')
    conductor.start()
    CONF.set_override('report_interval', 3600, group='agent')
    agent = agent_manager.AgentManager(
        conductor_rpcapi.ConductorAPI(timeout=10),
        placement.PlacementClient(adapter), drivers=[MinimalDriver()],
        host=host)
    yield agent
    agent.stop()
    conductor.stop()
    conductor.wait()


def _scrape(app):
    environ = {}
    wsgi_util.setup_testing_defaults(environ)
    environ['PATH_INFO'] = '/metrics'
    body = b''.join(app(environ, lambda status, headers, exc=None: None))
    return {f.name: f for f in
            parser.text_string_to_metric_families(body.decode())}


def test_agent_runs_a_driver_with_only_discover(agent):
    context = cyborg_context.get_admin_context()
    db_writes, placement_writes = agent.report_once(full=True)
    assert db_writes > 0 and placement_writes > 0
    [device] = devices_db.list_(hostname=agent.host)
    assert device['model'] == 'minimal'
    handle = {'uuid': str(uuid.uuid4()), 'attach_type': 'PCI',
              'attach_info': records.canonical_json(
                  records.pci_info(ADDRESS)),
              'driver_name': 'minimal', 'deployable_name': ADDRESS}
    assert agent.prepare(context, ADDRESS, 'minimal', handle) is None
    agent.release(context, [handle])
    # Nothing changed, so the next pass writes nothing.
    assert agent.report_once() == (0, 0)
    agent.start()
    # A scrape shows the device and no telemetry of it.
    families = _scrape(metrics.make_app(agent))
    assert families['cyborg_agent_devices'].samples[0].value == 1
    assert not families['cyborg_gpu_memory_total_bytes'].samples


def test_agent_refuses_a_reclaim_the_driver_does_not_offer(agent):
    agent.report_once(full=True)
    [device] = agent.discover()
    device.management_state = 'Orphaned'
    device.conditions = []
    assert agent._try_reclaim(device) == (
        'False', 'Refused', 'driver minimal cannot reclaim devices')
