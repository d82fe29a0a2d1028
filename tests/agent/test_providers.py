# SPDX-License-Identifier: Apache-2.0
"""Provider sync against the real Placement service (in-process)."""

import threading
import uuid

import pytest

from cyborg.agent import manager
from cyborg.agent import providers
from cyborg.drivers import fake
from cyborg.placement import client as placement


class CountingAdapter:
    """Records every call the client makes."""

    def __init__(self, adapter):
        self.adapter = adapter
        self.calls = []

    def request(self, url, method, **kwargs):
        self.calls.append((method, url))
        return self.adapter.request(url, method, **kwargs)

    def writes(self):
        return [c for c in self.calls if c[0] != 'GET']


@pytest.fixture
def host(placement_service):
    """A fresh compute node (as nova-compute would create it) and clients."""
    adapter = placement_service.adapter()
    nodename = 'node-%s' % uuid.uuid4().hex[:8]
    root = str(uuid.uuid4())
    r = adapter.post('/resource_providers', microversion='1.26',
                     json={'uuid': root, 'name': nodename})
    assert r.status_code == 200, r.text
    counting = CountingAdapter(adapter)
    return {'nodename': nodename, 'root': root, 'raw': adapter,
            'adapter': counting,
            'client': placement.PlacementClient(counting, max_delay=0.01)}


def _devices(nodename):
    return manager.annotate(
        fake.FakeDriver(fake.default_host_spec()).discover(), nodename)


def _children(host):
    return {rp['name']: rp for rp in host['client'].tree(host['root'])
            if rp['uuid'] != host['root']}


def test_first_sync_builds_the_tree(host):
    sync = providers.ProviderSync(host['client'], host['nodename'])
    devices = _devices(host['nodename'])
    assert sync.sync(providers.wanted_providers(host['nodename'], devices)) > 0
    children = _children(host)
    assert sorted(children) == sorted(
        '%s_%s' % (host['nodename'], a)
        for a in ('0000:1b:00.0', '0000:43:00.0', '0000:0c:00.0'))
    gpu = children['%s_0000:1b:00.0' % host['nodename']]
    assert gpu['parent_provider_uuid'] == host['root']
    assert gpu['uuid'] == providers.provider_uuid(host['nodename'],
                                                  '0000:1b:00.0')
    _, traits = host['client'].traits(gpu['uuid'])
    assert {'OWNER_CYBORG', 'CUSTOM_NVIDIA_2335', 'CUSTOM_GPU_NVIDIA',
            'CUSTOM_GPU_PRODUCT_ID_2335'} <= traits
    _, inv = host['client'].inventories(gpu['uuid'])
    assert inv['PGPU']['total'] == 1 and inv['PGPU']['reserved'] == 0
    fpga = children['%s_0000:0c:00.0' % host['nodename']]
    _, inv = host['client'].inventories(fpga['uuid'])
    assert (inv['FPGA']['total'], inv['FPGA']['max_unit']) == (4, 4)
    _, traits = host['client'].traits(fpga['uuid'])
    assert 'CUSTOM_FAKE_DEVICE' in traits


def test_unchanged_report_makes_no_placement_call(host):
    sync = providers.ProviderSync(host['client'], host['nodename'])
    wanted = providers.wanted_providers(host['nodename'],
                                        _devices(host['nodename']))
    sync.sync(wanted)
    host['adapter'].calls.clear()
    assert sync.sync(providers.wanted_providers(
        host['nodename'], _devices(host['nodename']))) == 0
    assert host['adapter'].calls == []
    # A full resync re-reads but writes nothing either.
    assert sync.sync(wanted, full=True) == 0
    assert host['adapter'].writes() == []


def test_custom_resource_class_is_created(host):
    devices = _devices(host['nodename'])
    devices[0].deployables[0].resource_class = 'CUSTOM_GPU_TEST_RC'
    sync = providers.ProviderSync(host['client'], host['nodename'])
    sync.sync(providers.wanted_providers(host['nodename'], devices))
    r = host['raw'].get('/resource_classes/CUSTOM_GPU_TEST_RC',
                        microversion='1.26')
    assert r.status_code == 200


def test_vanished_device_provider_is_deleted(host):
    sync = providers.ProviderSync(host['client'], host['nodename'])
    devices = _devices(host['nodename'])
    sync.sync(providers.wanted_providers(host['nodename'], devices))
    sync.sync(providers.wanted_providers(host['nodename'], devices[1:]))
    assert len(_children(host)) == 2


def test_vanished_device_with_allocations_is_fenced(host):
    sync = providers.ProviderSync(host['client'], host['nodename'])
    devices = _devices(host['nodename'])
    sync.sync(providers.wanted_providers(host['nodename'], devices))
    gpu = providers.provider_uuid(host['nodename'], '0000:1b:00.0')
    consumer = str(uuid.uuid4())
    r = host['raw'].put('/allocations/%s' % consumer, microversion='1.28',
                        json={'allocations': {gpu: {'resources': {'PGPU': 1}}},
                              'project_id': str(uuid.uuid4()),
                              'user_id': str(uuid.uuid4()),
                              'consumer_generation': None})
    assert r.status_code == 204, r.text
    sync.sync(providers.wanted_providers(host['nodename'], devices[1:]))
    assert gpu in {rp['uuid'] for rp in _children(host).values()}
    _, inv = host['client'].inventories(gpu)
    # Fenced: capacity is what the allocation uses (nothing more fits),
    # never below it (Placement would log the provider over capacity).
    assert inv['PGPU']['total'] == 1
    assert inv['PGPU']['reserved'] == 0
    assert host['client'].usages(gpu) == {'PGPU': 1}


def _allocate(host, rp, resources):
    body = {'allocations': {rp: {'resources': resources}},
            'project_id': str(uuid.uuid4()), 'user_id': str(uuid.uuid4()),
            'consumer_generation': None}
    return host['raw'].put('/allocations/%s' % uuid.uuid4(),
                           microversion='1.28', raise_exc=False, json=body)


def test_fence_over_allocations_reserves_only_what_is_free(host):
    """A fenced device with allocations (a GPU passed through, a pool in
    maintenance): reserved = total - used, so nothing more fits and the
    usage never exceeds capacity; unfenced, the full capacity is back.
    """
    sync = providers.ProviderSync(host['client'], host['nodename'])
    devices = _devices(host['nodename'])
    nodename = host['nodename']
    sync.sync(providers.wanted_providers(nodename, devices))
    fpga = providers.provider_uuid(nodename, '0000:0c:00.0')
    assert _allocate(host, fpga, {'FPGA': 3}).status_code == 204
    fenced = {devices[2].cpid_key}
    sync.sync(providers.wanted_providers(nodename, devices, fenced))
    _, inv = host['client'].inventories(fpga)
    assert (inv['FPGA']['total'], inv['FPGA']['reserved']) == (4, 1)
    assert _allocate(host, fpga, {'FPGA': 1}).status_code == 409
    # A pass with nothing changed writes nothing (the fitted fence is what
    # Placement holds), even a full one.
    assert sync.sync(providers.wanted_providers(nodename, devices, fenced),
                     full=True) == 0
    sync.sync(providers.wanted_providers(nodename, devices))
    _, inv = host['client'].inventories(fpga)
    assert inv['FPGA']['reserved'] == 0
    assert _allocate(host, fpga, {'FPGA': 1}).status_code == 204


def test_fit_fences():
    inventories = {'A': {'total': 4, 'reserved': 4},
                   'B': {'total': 8, 'reserved': 8},
                   'C': {'total': 2, 'reserved': 0}}
    assert placement.fit_fences(
        inventories, {'A': 3, 'C': 1, 'D': 5}) == {
        'A': {'total': 4, 'reserved': 1},
        'B': {'total': 8, 'reserved': 8},     # nothing used: all reserved
        'C': {'total': 2, 'reserved': 0}}     # not fenced
    # Usage above total (someone else's doing) leaves nothing free.
    assert placement.fit_fences(
        {'A': {'total': 4, 'reserved': 4}}, {'A': 6}) == {
        'A': {'total': 4, 'reserved': 0}}
    assert inventories['A']['reserved'] == 4     # input left alone


def test_fencing_keeps_other_inventory_fields(host):
    sync = providers.ProviderSync(host['client'], host['nodename'])
    devices = _devices(host['nodename'])
    sync.sync(providers.wanted_providers(host['nodename'], devices))
    fpga = providers.provider_uuid(host['nodename'], '0000:0c:00.0')
    generation, inv = host['client'].inventories(fpga)
    inv['FPGA']['allocation_ratio'] = 2.0        # an operator's choice
    host['client'].put_inventories(fpga, generation, inv)
    fenced = {devices[2].cpid_key}
    sync.sync(providers.wanted_providers(host['nodename'], devices, fenced))
    _, inv = host['client'].inventories(fpga)
    assert inv['FPGA']['reserved'] == 4
    assert inv['FPGA']['allocation_ratio'] == 2.0
    sync.sync(providers.wanted_providers(host['nodename'], devices))
    _, inv = host['client'].inventories(fpga)
    assert inv['FPGA']['reserved'] == 0
    assert inv['FPGA']['allocation_ratio'] == 2.0


def test_generation_conflict_is_reread_and_retried(host):
    sync = providers.ProviderSync(host['client'], host['nodename'])
    devices = _devices(host['nodename'])
    sync.sync(providers.wanted_providers(host['nodename'], devices))
    fpga = providers.provider_uuid(host['nodename'], '0000:0c:00.0')

    def bump():
        # Someone else (an operator) changes the provider between our read
        # and our write: its generation moves on.
        raw = host['raw']
        raw.put('/traits/CUSTOM_OPERATOR', microversion='1.26')
        body = raw.get('/resource_providers/%s/traits' % fpga,
                       microversion='1.26').json()
        r = raw.put('/resource_providers/%s/traits' % fpga,
                    microversion='1.26',
                    json={'resource_provider_generation':
                          body['resource_provider_generation'],
                          'traits': body['traits'] + ['CUSTOM_OPERATOR']})
        assert r.status_code == 200, r.text

    calls = host['adapter'].calls
    calls.clear()
    original = host['client'].put_inventories

    def put_with_race(uuid_, generation, inventories):
        if not getattr(put_with_race, 'raced', False):
            put_with_race.raced = True
            bump()
        return original(uuid_, generation, inventories)

    host['client'].put_inventories = put_with_race
    fenced = {devices[2].cpid_key}
    sync.sync(providers.wanted_providers(host['nodename'], devices, fenced))
    _, inv = host['client'].inventories(fpga)
    assert inv['FPGA']['reserved'] == 4
    assert host['client'].traits(fpga)[1] == {
        'OWNER_CYBORG', 'CUSTOM_OPERATOR', 'CUSTOM_ABCD_ABCD',
        'CUSTOM_FPGA_ABCD', 'CUSTOM_FPGA_PRODUCT_ID_ABCD',
        'CUSTOM_FAKE_DEVICE'}
    puts = [c for c in calls if c[0] == 'PUT' and c[1].endswith(
        '%s/inventories' % fpga)]
    assert len(puts) == 2          # the conflicting write, then the retry


def test_provider_owned_by_another_service_is_left_alone(host):
    nodename = host['nodename']
    foreign = providers.provider_uuid(nodename, '0000:1b:00.0')
    r = host['raw'].post('/resource_providers', microversion='1.26', json={
        'uuid': foreign, 'name': '%s_0000:1b:00.0' % nodename,
        'parent_provider_uuid': host['root']})
    assert r.status_code == 200
    r = host['raw'].put('/resource_providers/%s/traits' % foreign,
                        microversion='1.26',
                        json={'resource_provider_generation': 0,
                              'traits': ['OWNER_NOVA']})
    assert r.status_code == 200
    sync = providers.ProviderSync(host['client'], nodename)
    sync.sync(providers.wanted_providers(nodename, _devices(nodename)))
    touched = [c for c in host['adapter'].writes() if foreign in c[1]]
    assert touched == []
    _, traits = host['client'].traits(foreign)
    assert traits == {'OWNER_NOVA'}
    # ...and it is not retired either when our device list no longer has it.
    sync.sync(providers.wanted_providers(nodename, []))
    assert host['client'].provider(foreign) is not None


def test_missing_compute_node_is_waited_for(placement_service):
    adapter = placement_service.adapter()
    client = placement.PlacementClient(adapter, max_delay=0.01)
    nodename = 'late-%s' % uuid.uuid4().hex[:8]
    sync = providers.ProviderSync(client, nodename)
    with pytest.raises(providers.ComputeNodeNotFound, match=nodename):
        sync.find_compute_node()
    delays = []

    def sleep(delay):
        delays.append(delay)
        if len(delays) == 3:
            adapter.post('/resource_providers', microversion='1.26',
                         json={'name': nodename})

    root = sync.wait_for_compute_node(max_delay=3, sleep=sleep)
    assert root == client.provider_by_name(nodename)['uuid']
    assert delays == [1.0, 2.0, 3.0]


def test_waiting_stops_when_asked(placement_service):
    client = placement.PlacementClient(placement_service.adapter())
    sync = providers.ProviderSync(client, 'never-%s' % uuid.uuid4().hex[:8])
    stop = threading.Event()
    stop.set()
    with pytest.raises(providers.ComputeNodeNotFound):
        sync.wait_for_compute_node(stop=stop, sleep=lambda d: None)


def test_half_created_provider_is_completed(host):
    """A pass that dies after creating a provider but before tagging it
    (Placement error, agent restart): the next pass adopts and finishes
    it instead of leaving it stranded as someone else's.
    """
    client = host['client']
    original = client.put_traits
    failures = []

    def put_traits_fails_once(*args):
        if not failures:
            failures.append(args)
            raise placement.PlacementError('PUT', 'traits', 500, 'boom')
        return original(*args)

    client.put_traits = put_traits_fails_once
    sync = providers.ProviderSync(client, host['nodename'])
    wanted = providers.wanted_providers(host['nodename'],
                                        _devices(host['nodename']))
    with pytest.raises(placement.PlacementError):
        sync.sync(wanted, full=True)
    half = failures[0][0]
    assert client.traits(half)[1] == set()
    sync.sync(wanted)
    assert 'OWNER_CYBORG' in client.traits(half)[1]
    assert client.inventories(half)[1] != {}
    assert sync.sync(wanted) == 0


def test_foreign_provider_is_looked_at_again_next_pass(host):
    nodename = host['nodename']
    foreign = providers.provider_uuid(nodename, '0000:1b:00.0')
    host['raw'].post('/resource_providers', microversion='1.26', json={
        'uuid': foreign, 'name': '%s_0000:1b:00.0' % nodename,
        'parent_provider_uuid': host['root']})
    host['raw'].put('/resource_providers/%s/traits' % foreign,
                    microversion='1.26',
                    json={'resource_provider_generation': 0,
                          'traits': ['OWNER_NOVA']})
    sync = providers.ProviderSync(host['client'], nodename)
    wanted = providers.wanted_providers(nodename, _devices(nodename))
    sync.sync(wanted)
    host['adapter'].calls.clear()
    sync.sync(wanted)
    assert host['adapter'].calls != []      # not cached as done
    assert host['client'].traits(foreign)[1] == {'OWNER_NOVA'}
