# SPDX-License-Identifier: Apache-2.0
"""The nvidia driver end to end over the fake NVML and sysfs: discovery,
the Placement view, whole-GPU passthrough gates, MIG on demand, orphans,
restarts and reboots."""

import json
import logging
import os

import hypothesis
from hypothesis import strategies as st
import pytest

from cyborg.conf import CONF
from cyborg import data
from cyborg.drivers import base
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import driver as nvidia
from cyborg.drivers.nvidia import resources
from cyborg.objects import device as records
from tests.drivers.nvidia import conftest
from tests.drivers.nvidia import geometry

GPU1 = '0000:1b:00.0'
GPU2 = '0000:43:00.0'
VF1 = '0000:1b:00.4'        # the first VF of GPU1 (vGPU-Manager hosts)
FIXTURE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                       'fixtures', 'nvml', 'h200-real-580.159.04.json')


def spec(model='h200', gpu2=True, **gpu1):
    """A data-center-driver host: no SR-IOV VFs (only the vGPU Manager
    enables them, contract gpu-to-vm.md §1).
    """
    gpus = [dict({'model': model, 'pci_address': GPU1, 'numa_node': 0,
                  'driver': 'nvidia', 'mig_mode': 0}, **gpu1)]
    if gpu2:
        gpus.append({'model': model, 'pci_address': GPU2, 'numa_node': 1,
                     'driver': 'nvidia', 'mig_mode': 1})
    return {'nvidia': {'iommu': True, 'gpus': gpus}}


def vgpu_host_spec(layout='vfio', gpu2=True, vfs=4):
    """A vGPU-Manager host: every GPU's VFs enabled (sriov-manage -e)
    and carrying the vGPU types (contract gpu-to-vm.md §1-§2).
    """
    host = spec(gpu2=gpu2)
    for gpu in host['nvidia']['gpus']:
        gpu.update(sriov_vfs=vfs, vgpu_manager={'layout': layout})
    return host


@pytest.fixture
def make_host(install_host):
    def make(host_spec=None, name='sys'):
        return install_host(host_spec or spec(), name)
    return make


new_driver = conftest.new_driver


def group(profile_name):
    return data.profile(profile_name)[0]['groups'][0]


def by_address(devices):
    return {d.deployables[0].name: d for d in devices}


def handle(address, request, info=None):
    return {'uuid': 'h-1', 'attach_type': 'PCI',
            'attach_info': json.dumps(info or records.pci_info(address)),
            'request_group': request}


def live_uuid(host, address):
    return next(g['uuid'] for g in host.nvml.gpu_info()
                if g['pci_address'] == address)


def live(host, address):
    uuid = next(g['uuid'] for g in host.nvml.gpu_info()
                if g['pci_address'] == address)
    backend = nvml.PynvmlBackend()
    backend.open()
    return backend.instances(uuid)


# Discovery ---------------------------------------------------------------

def test_backend_reads_what_the_real_h200_reported(make_host):
    with open(FIXTURE) as f:
        real = json.load(f)['devices'][0]
    host = make_host({'nvidia': {'gpus': [{
        'model': 'h200', 'uuid': real['uuid'],
        'pci_address': real['pci']['busIdLegacy']}]}})
    backend = nvml.PynvmlBackend()
    backend.open()
    [gpu] = backend.gpus()
    assert gpu.uuid == real['uuid']
    assert gpu.name == 'NVIDIA H200'
    assert gpu.address == '0000:00:06.0'
    assert gpu.product_id == '2335'
    assert gpu.memory_total == real['memory_v2']['total']
    assert gpu.memory_reserved == real['memory_v2']['reserved']
    assert gpu.compute_capability == (9, 0)
    assert gpu.numa_node is None            # NotSupported on that VM
    assert (gpu.mig_current, gpu.mig_pending) == tuple(real['mig_mode'])
    assert set(gpu.profiles) == set(geometry.profiles('h200'))
    assert host.nvml.gpu_info()[0]['uuid'] == real['uuid']


def test_discovery_reports_pfs_with_slice_inventories(make_host):
    host = make_host()
    devices = by_address(new_driver(host).discover())
    assert sorted(devices) == [GPU1, GPU2]
    dep = devices[GPU1].deployables[0]
    assert dep.inventories[resources.MEM_SLICE]['total'] == 8
    assert dep.inventories[resources.COMPUTE_SLICE]['total'] == 7
    assert dep.inventories[resources.NVDEC]['total'] == 7
    assert dep.inventories[resources.OFA]['total'] == 1
    assert dep.num_accelerators == 8
    assert {'CUSTOM_GPU_MODEL_H200', 'CUSTOM_GPU_CC_9_0',
            'CUSTOM_GPU_MIG_CAPABLE', 'CUSTOM_GPU_NUMA_0',
            'CUSTOM_GPU_VENDOR_NVIDIA', 'CUSTOM_MIG_FIT_3G_71GB',
            'CUSTOM_MIG_FIT_1G_18GB_ME'} <= set(dep.traits)
    # Passthrough needs the nvidia→vfio-pci rebind, which is off here.
    assert 'CUSTOM_GPU_PASSTHROUGH_CAPABLE' not in dep.traits
    board = devices[GPU1].std_board_info
    assert board['driver'] == 'nvidia' and board['mode'] == 'Compute'
    assert board['compute_capability'] == '9.0'
    # The PF + 7 MIG handles for non-VM use (Nova ignores MIG); GPU 2
    # (MIG on) the same.
    types = [h.attach_type for h in dep.attach_handles]
    assert types == ['PCI'] + ['MIG'] * 7
    gpu2 = devices[GPU2].deployables[0]
    assert [h.attach_type for h in gpu2.attach_handles] == \
        ['PCI'] + ['MIG'] * 7
    assert {'CUSTOM_GPU_HOST_DATACENTER', 'CUSTOM_GPU_MIG_NON_VM'} <= \
        set(dep.traits) & set(gpu2.traits)


@pytest.mark.parametrize('setup,capable', [
    ('rebind', {GPU1, GPU2}),
    ('iommu-off', set()),
    ('on-vfio', {GPU1}),            # no rebind: only a GPU already there
    ('vgpu-manager', set()),        # VFs enabled, vGPUs only
])
def test_passthrough_trait_needs_iommu_no_vfs_and_a_way_to_vfio(
        make_host, setup, capable):
    CONF.set_override('rebind_for_passthrough', setup != 'on-vfio',
                      group='nvidia')
    host_spec = {'vgpu-manager': vgpu_host_spec,
                 'on-vfio': lambda: spec(driver='vfio-pci')}.get(
                     setup, spec)()
    if setup == 'iommu-off':
        host_spec['nvidia']['iommu'] = False
    host = make_host(host_spec)
    devices = by_address(new_driver(host).discover())
    assert sorted(devices) == [GPU1, GPU2]      # no VF became a GPU
    assert {a for a, d in devices.items()
            if 'CUSTOM_GPU_PASSTHROUGH_CAPABLE' in
            d.deployables[0].traits} == capable


@pytest.mark.parametrize('code,words', [
    (12, 'libnvidia-ml.so.1 was not found'),
    (9, 'kernel driver is not loaded'),
    (18, 'different versions'),
    (4, 'no permission')])
def test_nvml_failure_keeps_gpus_failed_and_says_why_once(make_host,
                                                          caplog, code,
                                                          words):
    """The GPUs stay listed (Failed, occupancy unknown: fenced) with the
    reason in their DriverReady condition; the log says it once.
    """
    host = make_host()
    host.nvml.init_error = code
    drv = new_driver(host)
    caplog.set_level(logging.ERROR)
    for _ in range(2):
        devices = drv.discover()
        assert [(d.phase, d.observations['occupancy_known'])
                for d in devices] == [('Failed', False)] * 2
        assert all(words in c['message'] for d in devices
                   for c in d.observations['conditions']
                   if c['type'] == 'DriverReady')
    said = [r for r in caplog.records if words in r.getMessage()]
    assert len(said) == 1


# MIG on demand -----------------------------------------------------------

def test_mig_bind_creates_instance_with_packing_and_release_destroys(
        make_host):
    host = make_host()
    drv = new_driver(host)
    drv.discover()
    info = drv.prepare(GPU1, handle(GPU1, group('h200-mig-3g-71gb')))
    assert info['mig_profile'] == '3g.71gb'
    assert info['mig_start'] == 4          # keeps 0-3 for a 4g
    assert info['mig_uuid'].startswith('MIG-')
    [gi] = live(host, GPU1)
    assert (gi.start, gi.size) == (4, 4)
    # MIG mode was off and the H200 idle: turned on at once (Hopper).
    [dev] = [d for d in drv.discover() if d.deployables[0].name == GPU1]
    dep = dev.deployables[0]
    assert dep.inventories[resources.MEM_SLICE]['max_unit'] == 4
    assert 'CUSTOM_MIG_FIT_4G_71GB' in dep.traits
    assert 'CUSTOM_MIG_FIT_7G_141GB' not in dep.traits
    drv.release(GPU1, handle(GPU1, {}, dict(records.pci_info(GPU1), **info)))
    assert live(host, GPU1) == []


def test_rebind_of_mig_is_idempotent(make_host):
    host = make_host()
    drv = new_driver(host)
    drv.discover()
    info = drv.prepare(GPU2, handle(GPU2, group('h200-mig-2g-35gb')))
    again = drv.prepare(GPU2, handle(GPU2, group('h200-mig-2g-35gb'),
                                     dict(records.pci_info(GPU2), **info)))
    assert again == info
    assert len(live(host, GPU2)) == 1


def test_mig_uuid_changes_when_re_created_and_ids_are_reused(make_host):
    host = make_host()
    drv = new_driver(host)
    drv.discover()
    first = drv.prepare(GPU2, handle(GPU2, group('h200-mig-1g-18gb')))
    drv.release(GPU2, handle(GPU2, {}, first))
    second = drv.prepare(GPU2, handle(GPU2, group('h200-mig-1g-18gb')))
    assert second['mig_gi'] == first['mig_gi']
    assert second['mig_uuid'] != first['mig_uuid']


def test_no_legal_placement_fails_with_reason(make_host):
    host = make_host()
    drv = new_driver(host)
    drv.discover()
    drv.prepare(GPU2, handle(GPU2, group('h200-mig-3g-71gb')))
    drv.prepare(GPU2, handle(GPU2, group('h200-mig-3g-71gb')))
    with pytest.raises(base.PrepareError, match='No free placement for '
                       'MIG 1g.18gb on GPU 0000:43:00.0'):
        drv.prepare(GPU2, handle(GPU2, group('h200-mig-1g-18gb')))


def test_unknown_mig_shape_is_refused(make_host):
    host = make_host()
    drv = new_driver(host)
    drv.discover()
    with pytest.raises(base.PrepareError, match='No MIG profile'):
        drv.prepare(GPU2, handle(GPU2, {'resources:CUSTOM_GPU_MEM_SLICE':
                                        '3'}))


def test_ampere_mig_enable_waits_for_a_reset_in_a_vm(make_host):
    """activationStatus ResetRequired (pass-through VM): refused, and the
    device is Reconfiguring until a reset applies the mode.
    """
    host = make_host(spec('a100-80gb', gpu2=False, virtualization_mode=1))
    drv = new_driver(host)
    drv.discover()
    with pytest.raises(base.PrepareError, match='pending a GPU reset'):
        drv.prepare(GPU1, handle(GPU1, group('a100-80gb-mig-1g-10gb')))
    [device] = drv.discover()
    assert device.phase == 'Reconfiguring'


def test_ampere_mig_enable_names_who_holds_the_gpu(make_host):
    """activationStatus InUse: the refusal says the GPU is held and by
    whom (persistence mode here); once let go, a new bind applies it.
    """
    host = make_host(spec('a100-80gb', gpu2=False, virtualization_mode=0))
    uuid = host.nvml.gpu_info()[0]['uuid']
    host.nvml.hold(uuid, 'dcgm')
    drv = new_driver(host)
    drv.discover()
    with pytest.raises(base.PrepareError,
                       match='in use by other clients') as e:
        drv.prepare(GPU1, handle(GPU1, group('a100-80gb-mig-1g-10gb')))
    assert 'persistence mode' in str(e.value)
    host.nvml.let_go(uuid, 'dcgm')
    info = drv.prepare(GPU1, handle(GPU1, group('a100-80gb-mig-1g-10gb')))
    assert info['mig_profile'] == '1g.10gb'


def test_ampere_bare_metal_mig_enable_applies_at_once(make_host):
    host = make_host(spec('a100-80gb', gpu2=False, virtualization_mode=0))
    drv = new_driver(host)
    drv.discover()
    info = drv.prepare(GPU1, handle(GPU1, group('a100-80gb-mig-1g-10gb')))
    assert info['mig_gi'] == 13        # the slot's id: 1g at 6


def test_mig_enable_without_root_says_so(make_host):
    host = make_host(spec(gpu2=False))
    host.nvml.set_privileged(False)
    drv = new_driver(host)
    drv.discover()
    with pytest.raises(base.PrepareError, match='NoPermission|need root'):
        drv.prepare(GPU1, handle(GPU1, group('h200-mig-1g-18gb')))


def test_orphans_are_reserved_and_never_handed_out(make_host):
    host = make_host()
    uuid2 = host.nvml.gpu_info()[1]['uuid']
    three = next(p for p in geometry.profiles('h200')
                 if p.name == '3g.71gb')
    host.nvml.create_gi(uuid2, three.id, 4)       # nobody's
    drv = new_driver(host)
    drv.reconcile({})
    dep = by_address(drv.discover())[GPU2].deployables[0]
    assert dep.attributes['mig_orphans'] == '3g.71gb@4'
    assert dep.inventories[resources.MEM_SLICE]['reserved'] == 4
    info = drv.prepare(GPU2, handle(GPU2, group('h200-mig-3g-71gb')))
    assert info['mig_start'] == 0
    # Once an ARQ is known to hold it, it is no orphan.
    drv.reconcile({GPU2: [{'uuid': 'h-9', 'attach_info': json.dumps(
        dict(records.pci_info(GPU2), mig_profile='3g.71gb', mig_start=4))}]})
    dep = by_address(drv.discover())[GPU2].deployables[0]
    assert 'mig_orphans' not in dep.attributes


def test_reboot_loses_instances_and_reconcile_recreates_them(make_host):
    host = make_host()
    drv = new_driver(host)
    drv.discover()
    info = drv.prepare(GPU1, handle(GPU1, group('h200-mig-2g-35gb')))
    host.nvml.reboot()         # GIs gone; Hopper also forgets MIG mode
    assert live(host, GPU1) == []
    fresh = new_driver(host)
    fresh.discover()
    changed, updates = fresh.reconcile({GPU1: [{'uuid': 'h-1', 'attach_info':
                                       json.dumps(dict(records.pci_info(GPU1),
                                                       **info))}]})
    assert changed
    assert updates['h-1']['mig_start'] == info['mig_start']
    assert updates['h-1']['mig_uuid'] != info['mig_uuid']
    [gi] = live(host, GPU1)
    assert gi.start == info['mig_start']


# Whole GPU ---------------------------------------------------------------

def test_whole_gpu_on_nvidia_is_refused_without_rebind(make_host):
    host = make_host()
    drv = new_driver(host)
    drv.discover()
    with pytest.raises(base.PrepareError, match='bound to nvidia, not '
                       'vfio-pci; bind it to vfio-pci or set'):
        drv.prepare(GPU1, handle(GPU1, group('h200-whole')))


def test_whole_gpu_rebinds_behind_gates_and_restores(make_host):
    CONF.set_override('rebind_for_passthrough', True, group='nvidia')
    host = make_host()
    drv = new_driver(host)
    drv.discover()
    info = drv.prepare(GPU1, handle(GPU1, group('h200-whole')))
    # The captured H200 runs with persistence mode on: off for the move,
    # on again at release.
    assert info == {'restore_driver': 'nvidia', 'restore_group': {},
                    'restore_persistence': True}
    assert host.sysfs.driver(GPU1) == 'vfio-pci'
    # Invisible to NVML now, still reported from the remembered geometry,
    # and nothing more fits on it.
    dep = by_address(drv.discover())[GPU1].deployables[0]
    assert dep.inventories[resources.MEM_SLICE]['total'] == 8
    assert not [t for t in dep.traits if t.startswith('CUSTOM_MIG_FIT')]
    drv.release(GPU1, handle(GPU1, {}, dict(records.pci_info(GPU1), **info)))
    assert host.sysfs.driver(GPU1) == 'nvidia'
    assert drv.backend.persistence_mode(live_uuid(host, GPU1)) is True


@pytest.mark.parametrize('setup,reason', [
    ('vgpu-manager', 'run by the NVIDIA vGPU Manager: it serves vGPUs for '
     'VMs only'),
    ('process', '1 processes use it'),
    ('mig', 'it has MIG instances'),
    ('iommu', 'the IOMMU is off')])
def test_whole_gpu_rebind_gates(make_host, setup, reason):
    CONF.set_override('rebind_for_passthrough', True, group='nvidia')
    host_spec = vgpu_host_spec() if setup == 'vgpu-manager' else spec()
    if setup == 'iommu':
        host_spec['nvidia']['iommu'] = False
    host = make_host(host_spec)
    uuid1 = host.nvml.gpu_info()[0]['uuid']
    if setup == 'process':
        host.nvml.add_process(uuid1, 4242, 1 << 30)
    drv = new_driver(host)
    if setup == 'mig':
        drv.discover()
        drv.prepare(GPU1, handle(GPU1, group('h200-mig-1g-18gb')))
    drv.discover()
    with pytest.raises(base.PrepareError, match=reason):
        drv.prepare(GPU1, handle(GPU1, group('h200-whole')))
    assert host.sysfs.driver(GPU1) == 'nvidia'


def test_rebind_gate_names_enabled_vfs(make_host):
    """Behind the host-kind check, the rebind gate itself refuses a GPU
    whose VFs are enabled (a vGPU-Manager GPU: the VFs would go with it).
    """
    CONF.set_override('rebind_for_passthrough', True, group='nvidia')
    host = make_host(vgpu_host_spec(gpu2=False, vfs=16))
    drv = new_driver(host)
    drv.discover()
    gpu = drv.state.geometry.get(GPU1)
    assert '16 SR-IOV VFs are enabled' in \
        drv.passthrough.rebind_blockers(gpu)
    assert host.sysfs.driver(GPU1) == 'nvidia'


def test_pick_handles_splits_whole_from_mig():
    dep = {'name': GPU1, 'num_accelerators': 8}
    pf = {'id': 1, 'attach_type': 'PCI',
          'attach_info': records.canonical_json(records.pci_info(GPU1))}
    vf = {'id': 2, 'attach_type': 'PCI',
          'attach_info': records.canonical_json(
              records.pci_info('0000:1b:00.4'))}
    pick = nvidia.NvidiaDriver.pick_handles
    assert pick(dep, group('h200-whole'), [pf, vf]) == [pf]
    assert pick(dep, group('h200-mig-1g-18gb'), [pf, vf]) == [vf]


# Placement never grants what cannot be placed ------------------------------

@hypothesis.settings(max_examples=15, deadline=None,
                     suppress_health_check=[
                         hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 40)),
                               max_size=25))
def test_driver_publishes_only_placeable_offers(make_host, ops):
    """Random claims/releases through the real driver over the fake NVML:
    a claim the published inventory and fit traits allow always places.
    """
    host = make_host(spec(gpu2=False), name='h%d' % len(ops))
    drv = new_driver(host)
    profiles = geometry.profiles('h200')
    held = []
    for claim, n in ops:
        dep = by_address(drv.discover())[GPU1].deployables[0]
        if not claim and held:
            info = held.pop(n % len(held))
            drv.release(GPU1, handle(GPU1, {}, info))
            continue
        profile = profiles[n % len(profiles)]
        vector = resources.profile_vector(profile)
        used = {rc: 0 for rc in dep.inventories}
        for info in held:
            p = next(q for q in profiles if q.name == info['mig_profile'])
            for rc, amount in resources.profile_vector(p).items():
                used[rc] += amount
        granted = resources.fit_trait(profile) in dep.traits and all(
            amount <= inv['max_unit'] and used[rc] + amount
            <= inv['total'] - inv['reserved']
            for rc, inv in dep.inventories.items()
            for amount in [vector.get(rc, 0)] if amount)
        if profile.slices == 8 or not granted:
            continue
        info = drv.prepare(GPU1, handle(GPU1, {
            'resources:' + rc: str(a) for rc, a in vector.items()}))
        held.append(info)
    host.uninstall()


def test_gpus_managed_elsewhere_are_not_offered_twice(make_host, caplog):
    """On a vGPU-Manager host (mdev layout), a GPU whose VF holds an
    mdev Nova's own vGPU support made and a GPU in Nova's [pci]
    device_spec are left alone, with the reason said once. (vGPU types
    and mdevs are on the VFs, never on the PF: contract gpu-to-vm.md §2.)
    """
    CONF.set_override('nova_device_spec', [json.dumps(
        {'vendor_id': '10de', 'address': GPU2})], group='pci_driver')
    host = make_host(vgpu_host_spec(layout='mdev'))
    # GPU1's MIG mode is off: a time-sliced type (NVIDIA H200X-70C).
    assert host.create_mdev(VF1, 'nvidia-1427',
                            'a6f1c0de-0000-4000-8000-000000000001')
    drv = new_driver(host)
    drv.reconcile({})               # no binding of ours holds a VF
    caplog.set_level(logging.WARNING)
    assert drv.discover() == []
    assert drv.discover() == []
    said = [r.getMessage() for r in caplog.records
            if r.getMessage().startswith('Not reporting GPU')]
    assert said == [
        'Not reporting GPU 0000:1b:00.0: VF(s) 0000:1b:00.4 hold vGPUs '
        "that no binding of ours holds (Nova's vGPUs?)",
        "Not reporting GPU 0000:43:00.0: Nova's [pci] device_spec claims it"]
