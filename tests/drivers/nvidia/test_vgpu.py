# SPDX-License-Identifier: Apache-2.0
"""The nvidia driver on both kinds of host over the fake NVML and sysfs:
the host kind read from NVML, vGPU types on the VFs of a vGPU-Manager
GPU (vfio and mdev layouts), what Placement is told, vGPU bind/unbind,
and GPUs Nova's own vGPU or PCI configuration keeps."""

import json
import os
import time

import pytest

from cyborg.conf import CONF
from cyborg import data
from cyborg.drivers import base
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import driver as nvidia
from cyborg.drivers.nvidia import resources
from cyborg.drivers.nvidia import vgpu
from cyborg.objects import device as records
from cyborg_emulators.nvidia import fake_mdev
from cyborg_emulators.nvidia import fake_sysfs
from cyborg_emulators.nvidia import fake_vgpu
from cyborg_emulators.nvidia import sysfs_files
from tests.drivers.nvidia import conftest

from nova_cyborg_client import exception as nova_exception
from nova_cyborg_client import mdev as nova_mdev
import yaml

GPU1 = '0000:1b:00.0'
GPU2 = '0000:43:00.0'
VF1 = '0000:1b:00.4'        # the first VF of GPU1
MEM = resources.MEM_SLICE


def shipped(name):
    with open(data.fake_host(name)) as f:
        return yaml.safe_load(f)


def vgpu_spec(layout='vfio', model='h200', vfs=16, heterogeneous=False):
    return {'nvidia': {'iommu': True, 'gpus': [{
        'model': model, 'pci_address': GPU1, 'numa_node': 0,
        'mig_mode': 1, 'sriov_vfs': vfs,
        'vgpu_manager': {'layout': layout,
                         'heterogeneous': heterogeneous}}]}}


@pytest.fixture
def make_host(install_host):
    return install_host


new_driver = conftest.new_driver


def profile_group(name):
    return data.profile(name)[0]['groups'][0]


def type_group(trait, vector):
    group = {'resources:%s' % rc: str(n) for rc, n in vector.items()}
    group['trait:' + trait] = 'required'
    return group


def by_address(devices):
    return {d.deployables[0].name: d.deployables[0] for d in devices}


def vf_handle(vf, uuid='h-1', attach_type='PCI', group=None):
    return {'uuid': uuid, 'attach_type': attach_type,
            'attach_info': json.dumps(records.pci_info(vf)),
            'request_group': group}


def gpu_state(host, index=0):
    return list(host.to_state()['gpus'].values())[index]


def read_vf(host, vf, *parts):
    with open(os.path.join(host.root, 'bus', 'pci', 'devices', vf,
                           *parts)) as f:
        return f.read()


def bind(driver, vf, group, uuid='h-1', attach_type='PCI'):
    handle = vf_handle(vf, uuid, attach_type, group)
    info = dict(records.pci_info(vf), **(driver.prepare(GPU1, handle) or {}))
    return dict(handle, attach_info=json.dumps(info)), info


# Host kind -------------------------------------------------------------------

def test_vgpu_host_offers_vgpus_on_vfs_only(make_host):
    host = make_host(shipped('h200-vgpu'))
    deps = by_address(new_driver(host).discover())
    assert set(deps) == {GPU1, GPU2}
    dep = deps[GPU1]
    assert dep.inventories[vgpu.VGPU]['total'] == 16
    assert dep.inventories[MEM]['total'] == 8
    # Every handle is a VF (vfio layout: PCI); no PF: no whole GPU.
    assert [h.attach_type for h in dep.attach_handles] == ['PCI'] * 16
    assert records.pci_info(GPU1) not in [h.attach_info
                                          for h in dep.attach_handles]
    traits = set(dep.traits)
    assert {'CUSTOM_GPU_HOST_VGPU', 'CUSTOM_VGPU_H200X_1_18C',
            'CUSTOM_VGPU_H200X_3_71C', 'CUSTOM_VGPU_H200X_70C'} <= traits
    assert not traits & {'CUSTOM_GPU_MIG_NON_VM',
                         'CUSTOM_GPU_PASSTHROUGH_CAPABLE',
                         'CUSTOM_GPU_HOST_DATACENTER'}


def test_datacenter_host_has_no_vgpu(make_host):
    CONF.set_override('rebind_for_passthrough', True, group='nvidia')
    host = make_host(shipped('h200-dc'))
    backend = nvml.PynvmlBackend()
    backend.open()
    assert {g.host_vgpu for g in backend.gpus()} == {False}
    for dep in by_address(new_driver(host).discover()).values():
        assert vgpu.VGPU not in dep.inventories
        assert not [t for t in dep.traits if t.startswith('CUSTOM_VGPU_')]
        assert {'CUSTOM_GPU_HOST_DATACENTER', 'CUSTOM_GPU_MIG_NON_VM',
                'CUSTOM_GPU_PASSTHROUGH_CAPABLE'} <= set(dep.traits)
        assert [h.attach_type for h in dep.attach_handles] == \
            ['PCI'] + ['MIG'] * 7


def test_nvml_says_host_vgpu_and_lists_the_catalog(make_host):
    make_host(vgpu_spec())
    backend = nvml.PynvmlBackend()
    backend.open()
    [gpu] = backend.gpus()
    assert gpu.host_vgpu and gpu.virtualization_mode == 3
    by_name = {t.name: t for t in gpu.vgpu_types}
    assert by_name['NVIDIA H200X-1-18C'].id == 1414
    assert by_name['NVIDIA H200X-1-18C'].gi_profile_id == 19
    assert by_name['NVIDIA H200X-141C'].id == 1428
    assert not by_name['NVIDIA H200X-141C'].mig_backed
    assert by_name['NVIDIA H200X-70C'].max_instances == 2


# Fake vGPU Manager -----------------------------------------------------------

def test_fake_vfio_layout_lists_creatable_types_and_refuses_others(
        make_host):
    host = make_host(vgpu_spec())
    text = read_vf(host, VF1, 'nvidia', 'creatable_vgpu_types')
    lines = text.splitlines()
    assert lines[0] == fake_vgpu.CREATABLE_HEADER
    # MIG mode is on and no GPU instance exists: nothing MIG-backed yet,
    # and time-sliced types need MIG off.
    assert lines[1:] == []
    host.nvml.create_gi(host.nvml.gpu_info()[0]['uuid'], 19, 6,
                        compute_instance=False)
    view = host.sysfs.vf_vgpu(VF1)
    assert view['layout'] == 'vfio' and view['current'] == 0
    assert set(view['types']) == {1414}
    with pytest.raises(Exception, match='refused'):
        host.sysfs.set_vgpu_type(VF1, 1418)     # no 3g instance
    host.sysfs.set_vgpu_type(VF1, 1414)
    assert host.sysfs.vf_vgpu(VF1)['types'] == {}
    # The only 1g instance is taken: no other VF can have 1414 now.
    assert 1414 not in host.sysfs.vf_vgpu('0000:1b:00.5')['types']


# vGPU binding, vfio layout ---------------------------------------------------

def test_mig_backed_vgpu_bind_configures_vf_and_gi_then_unbind_undoes(
        make_host):
    host = make_host(vgpu_spec())
    driver = new_driver(host)
    driver.discover()
    handle, info = bind(driver, VF1, profile_group('h200-vgpu-1g-18gb'))
    assert info['managed'] == 'no' and info['vgpu_type'] == '1414'
    assert info['mig_profile'] == '1g.18gb' and info['mig_start'] == 6
    assert 'mig_uuid' not in info      # no compute instance on the host
    assert read_vf(host, VF1, 'nvidia', 'current_vgpu_type').strip() == \
        '1414'
    [gi] = gpu_state(host)['gpu_instances']
    assert (gi['profile_id'], gi['start'], gi['compute_instances']) == \
        (19, 6, [])
    # The DB learns it; the GPU is still ours, one VF fewer is free.
    driver.reconcile({GPU1: [{'uuid': 'h-1', 'attach_info':
                              handle['attach_info']}]})
    [dep] = driver.discover()[0].deployables
    assert dep.inventories[vgpu.VGPU]['reserved'] == 0
    assert 'CUSTOM_VGPU_H200X_1_18C' in dep.traits
    # Time-sliced types cannot join MIG-backed vGPUs.
    assert 'CUSTOM_VGPU_H200X_70C' not in dep.traits
    driver.release(GPU1, handle)
    assert read_vf(host, VF1, 'nvidia', 'current_vgpu_type').strip() == '0'
    assert gpu_state(host)['gpu_instances'] == []


def test_seven_1g_vgpus_then_no_more(make_host):
    host = make_host(vgpu_spec())
    driver = new_driver(host)
    driver.discover()
    group = profile_group('h200-vgpu-1g-18gb')
    vfs = [fake_sysfs.vf_address(GPU1, i) for i in range(8)]
    handles = [bind(driver, vf, group, uuid='h-%d' % i)[0]
               for i, vf in enumerate(vfs[:7])]
    driver.reconcile({GPU1: [{'uuid': h['uuid'],
                              'attach_info': h['attach_info']}
                             for h in handles]})
    [dep] = driver.discover()[0].deployables
    assert 'CUSTOM_VGPU_H200X_1_18C' not in dep.traits
    assert dep.inventories[MEM]['reserved'] == 8   # slot 7 unusable
    with pytest.raises(base.PrepareError, match='cannot be placed'):
        bind(driver, vfs[7], group, uuid='h-7')
    assert read_vf(host, vfs[7], 'nvidia', 'current_vgpu_type').strip() \
        == '0'
    assert len(gpu_state(host)['gpu_instances']) == 7


def test_reboot_then_reconcile_configures_the_vfs_again(make_host):
    """A host reboot leaves no GPU instance and no VF configured (vfio
    layout); the agent's reconcile re-creates the instance and writes the
    VF's type again, on that VF only.
    """
    host = make_host(vgpu_spec())
    driver = new_driver(host)
    driver.discover()
    handle, info = bind(driver, VF1, profile_group('h200-vgpu-1g-18gb'))
    vf2 = fake_sysfs.vf_address(GPU1, 1)
    prepared = {GPU1: [{'uuid': 'h-1', 'attach_info': handle['attach_info']}]}
    driver.reconcile(prepared)
    host.reboot()
    assert read_vf(host, VF1, 'nvidia', 'current_vgpu_type').strip() == '0'
    assert gpu_state(host)['gpu_instances'] == []
    fresh = new_driver(host)
    fresh.discover()
    changed, updates = fresh.reconcile(prepared)
    assert changed
    assert updates['h-1']['mig_start'] == info['mig_start']
    assert read_vf(host, VF1, 'nvidia', 'current_vgpu_type').strip() == \
        '1414'
    [gi] = gpu_state(host)['gpu_instances']
    assert (gi['profile_id'], gi['start'], gi['compute_instances']) == \
        (19, info['mig_start'], [])
    # Nothing more to do on the next pass.
    prepared[GPU1][0]['attach_info'] = json.dumps(dict(info, **updates['h-1']))
    assert fresh.reconcile(prepared) == (False, {})
    assert vf2 != VF1
    assert read_vf(host, vf2, 'nvidia', 'current_vgpu_type').strip() == '0'


def test_time_sliced_vgpus_one_type_at_a_time(make_host):
    host = make_host(vgpu_spec())
    driver = new_driver(host)
    driver.discover()
    group = profile_group('h200-vgpu-70c')
    first, info = bind(driver, VF1, group)
    assert info['vgpu_type'] == '1427' and 'mig_start' not in info
    # MIG mode went off for the time-sliced vGPU (no GPU instance held).
    assert gpu_state(host)['mig_mode'] == [0, 0]
    driver.reconcile({GPU1: [{'uuid': 'h-1',
                              'attach_info': first['attach_info']}]})
    [dep] = driver.discover()[0].deployables
    assert 'CUSTOM_VGPU_H200X_70C' in dep.traits
    # Equal-size mode: no other time-sliced size, no MIG-backed type.
    assert not {'CUSTOM_VGPU_H200X_35C', 'CUSTOM_VGPU_H200X_1_18C'} & \
        set(dep.traits)
    second, _ = bind(driver, '0000:1b:00.5', group, uuid='h-2')
    driver.reconcile({GPU1: [{'uuid': h['uuid'],
                              'attach_info': h['attach_info']}
                             for h in (first, second)]})
    [dep] = driver.discover()[0].deployables
    assert 'CUSTOM_VGPU_H200X_70C' not in dep.traits
    assert dep.inventories[MEM]['reserved'] == 8
    small = type_group('CUSTOM_VGPU_H200X_35C', {
        vgpu.VGPU: 1, MEM: 2, resources.COMPUTE_SLICE: 1})
    with pytest.raises(base.PrepareError, match='cannot be placed'):
        bind(driver, '0000:1b:00.6', small, uuid='h-3')


def test_heterogeneous_mode_mixes_time_sliced_sizes(make_host):
    host = make_host(vgpu_spec(heterogeneous=True))
    driver = new_driver(host)
    driver.discover()
    first, _ = bind(driver, VF1, profile_group('h200-vgpu-70c'))
    driver.reconcile({GPU1: [{'uuid': 'h-1',
                              'attach_info': first['attach_info']}]})
    [dep] = driver.discover()[0].deployables
    assert {'CUSTOM_VGPU_H200X_70C', 'CUSTOM_VGPU_H200X_35C'} <= \
        set(dep.traits)
    assert 'CUSTOM_VGPU_H200X_141C' not in dep.traits   # 4 + 8 > 8


def test_refused_type_write_leaves_nothing_configured(make_host):
    host = make_host(vgpu_spec())
    driver = new_driver(host)
    driver.discover()
    # Someone else's vGPU Manager state changed under us: every type write
    # is refused (the file goes back), so the GPU instance made for it
    # must go too.
    host.sysfs.vgpu_managers[0].configure = lambda vf, type_id: False
    with pytest.raises(base.PrepareError, match='refused'):
        bind(driver, VF1, profile_group('h200-vgpu-1g-18gb'))
    assert gpu_state(host)['gpu_instances'] == []
    assert read_vf(host, VF1, 'nvidia', 'current_vgpu_type').strip() == '0'


def test_vgpu_bind_fails_with_reason_when_vfs_vanished(make_host):
    host = make_host(vgpu_spec(vfs=2))
    driver = new_driver(host)
    driver.discover()
    gone = fake_sysfs.vf_address(GPU1, 5)
    with pytest.raises(base.PrepareError, match='sriov-manage'):
        bind(driver, gone, profile_group('h200-vgpu-1g-18gb'))
    assert gpu_state(host)['gpu_instances'] == []


def test_vgpu_request_names_exactly_one_known_type(make_host):
    host = make_host(vgpu_spec())
    driver = new_driver(host)
    driver.discover()
    with pytest.raises(base.PrepareError) as e:
        bind(driver, VF1, {'resources:VGPU': '1'})
    assert 'CUSTOM_VGPU_H200X_1_18C' in str(e.value)
    with pytest.raises(base.PrepareError, match='vGPUs for VMs only'):
        bind(driver, VF1, profile_group('h200-mig-1g-18gb'))


def test_vgpu_request_on_a_datacenter_gpu_is_refused(make_host):
    host = make_host(shipped('h200-dc'))
    driver = new_driver(host)
    driver.discover()
    handle = vf_handle(GPU1, group=profile_group('h200-vgpu-1g-18gb'))
    with pytest.raises(base.PrepareError, match='data-center driver'):
        driver.prepare(GPU1, handle)


def test_pick_handles_by_kind():
    vf = {'attach_type': 'PCI', 'attach_info': json.dumps(
        records.pci_info(VF1))}
    pf = {'attach_type': 'PCI', 'attach_info': json.dumps(
        records.pci_info(GPU1))}
    mig = {'attach_type': 'MIG', 'attach_info': json.dumps(dict(
        records.pci_info(GPU1), mig_slot='0'))}
    dep = {'name': GPU1, 'num_accelerators': 8}
    pick = nvidia.NvidiaDriver.pick_handles
    assert pick(dep, profile_group('h200-vgpu-1g-18gb'),
                [pf, vf, mig]) == [vf]
    assert pick(dep, profile_group('h200-mig-1g-18gb'), [pf, mig]) == [mig]
    assert pick(dep, profile_group('h200-whole'), [pf, mig]) == [pf]


# vGPU binding, mdev layout (A100 80GB, vGPU <= 16) ---------------------------

def test_mdev_layout_binds_asked_type_on_the_vf(make_host):
    host = make_host(vgpu_spec(layout='mdev', model='a100-80gb'))
    driver = new_driver(host)
    [dep] = driver.discover()[0].deployables
    assert [h.attach_type for h in dep.attach_handles] == ['MDEV'] * 16
    assert 'CUSTOM_VGPU_A100D_2_20C' in dep.traits
    group = type_group('CUSTOM_VGPU_A100D_2_20C', {
        vgpu.VGPU: 1, MEM: 2, resources.COMPUTE_SLICE: 2,
        resources.NVDEC: 1})
    handle, info = bind(driver, VF1, group, uuid='7e2b0d4c-0a5f-4f63-9d7e-'
                        '1c2a3b4c5d6e', attach_type='MDEV')
    assert info['asked_type'] == 'nvidia-700'
    assert records.pci_address(info) == VF1       # the VF is the parent
    assert 'managed' not in info and 'vgpu_type' not in info
    [gi] = gpu_state(host)['gpu_instances']
    assert gi['profile_id'] == 14
    # Nova makes the mdev with the handle's UUID; the GPU stays ours.
    assert host.create_mdev(VF1, 'nvidia-700', handle['uuid'])
    driver.reconcile({GPU1: [{'uuid': handle['uuid'],
                              'attach_info': handle['attach_info']}]})
    assert by_address(driver.discover())[GPU1]
    host.remove_mdev(VF1, handle['uuid'])
    driver.release(GPU1, handle)
    assert gpu_state(host)['gpu_instances'] == []


def test_fake_mdev_create_and_remove_take_effect_at_the_write(make_host):
    """Nova's side in another process (KernelMdevCreator over the tree):
    the mdev exists when create returns and is gone when remove returns,
    before the agent reads sysfs again; the vGPU Manager counts it.
    """
    host = make_host(vgpu_spec(layout='mdev', model='a100-80gb'))
    [manager] = host.vgpu_managers()
    host.nvml.create_gi(host.nvml.gpu_info()[0]['uuid'], 14, 0,
                        compute_instance=False)
    host.sysfs.settle_vgpu()            # nvidia-700 available on the VFs
    creator = fake_mdev.KernelMdevCreator(host.root)
    first = nova_mdev.Mdev('a6f1c0de-0000-4000-8000-000000000001', VF1,
                           'nvidia-700')
    creator.create(first)
    device = os.path.join(host.root, 'bus', 'pci', 'devices', VF1)
    assert os.readlink(os.path.join(device, first.uuid, 'mdev_type')) == \
        os.path.join('..', 'mdev_supported_types', 'nvidia-700')
    # A VF holds one vGPU: a second mdev on it is refused at once.
    with pytest.raises(nova_exception.MdevCreationFailed):
        creator.create(first._replace(
            uuid='a6f1c0de-0000-4000-8000-000000000002'))
    host.sysfs.settle_vgpu()
    assert manager.state() == {VF1: 700}
    # Removed right after the create, before the agent looked: nothing left.
    assert creator.remove(first)
    assert not os.path.exists(os.path.join(device, first.uuid))
    assert creator.remove(first) is False
    host.sysfs.settle_vgpu()
    assert manager.state() == {}


# Nova's devices stay Nova's --------------------------------------------------

def test_vf_configured_by_someone_else_keeps_the_gpu_out(make_host):
    host = make_host(vgpu_spec())
    driver = new_driver(host)
    assert by_address(driver.discover())
    host.nvml.create_gi(host.nvml.gpu_info()[0]['uuid'], 19, 6,
                        compute_instance=False)
    host.sysfs.set_vgpu_type(VF1, 1414)     # not through a binding of ours
    # The conductor's answer names no binding holding it: not ours.
    driver.reconcile({})
    assert driver.discover() == []


def test_report_pass_during_a_bind_sees_the_vf_as_ours(
        make_host, monkeypatch):
    """The agent's report pass does not take the GPU's lock: one that
    reads the VFs right after a bind wrote the vGPU type, before the
    prepare returned (and long before the DB records the binding), sees
    that VF as ours, not someone else's (the GPU stays reported).
    """
    host = make_host(vgpu_spec())
    driver = new_driver(host)
    driver.discover()
    driver.reconcile({})            # the bindings are known: none
    seen = []
    sysfs = driver.state.sysfs
    write = sysfs.set_vgpu_type

    def write_then_report(vf, type_id):
        write(vf, type_id)
        seen.append(by_address(driver.discover()))

    monkeypatch.setattr(sysfs, 'set_vgpu_type', write_then_report)
    bind(driver, VF1, profile_group('h200-vgpu-1g-18gb'))
    [reported] = seen
    assert list(reported) == [GPU1]
    assert 'CUSTOM_VGPU_H200X_1_18C' in reported[GPU1].traits


def test_report_pass_between_unbind_and_release_sees_the_vf_as_ours(
        make_host):
    """The agent learns a binding went (the conductor's answer no longer
    names it) before its release clears the VF: a report pass meanwhile
    sees that VF as ours, still in use, and the GPU stays reported (it
    once took the GPU off Placement as "Nova's vGPUs", and the next binds
    on it failed).
    """
    host = make_host(vgpu_spec())
    driver = new_driver(host)
    driver.discover()
    handle, _info = bind(driver, VF1, profile_group('h200-vgpu-1g-18gb'))
    driver.reconcile({GPU1: [handle]})
    changed, _ = driver.reconcile({})       # unbound; release not yet run
    assert changed
    reported = by_address(driver.discover())
    assert list(reported) == [GPU1]
    assert 'CUSTOM_VGPU_H200X_1_18C' in reported[GPU1].traits
    assert read_vf(host, VF1, 'nvidia', 'current_vgpu_type').strip() == \
        '1414'
    driver.release(GPU1, handle)
    assert read_vf(host, VF1, 'nvidia', 'current_vgpu_type').strip() == '0'
    # Released: nothing left for a later reconcile to clear.
    assert driver.reconcile({}) == (False, {})
    assert list(by_address(driver.discover())) == [GPU1]


def test_a_missed_release_is_cleared_after_its_grace(make_host, caplog):
    """The release cast never arrived: a reconcile once the grace for it
    passed clears the VF's type itself (not one before).
    """
    host = make_host(vgpu_spec())
    driver = new_driver(host)
    driver.discover()
    handle, _info = bind(driver, VF1, profile_group('h200-vgpu-1g-18gb'))
    driver.reconcile({GPU1: [handle]})
    driver.reconcile({})                    # the binding went
    assert driver.reconcile({}) == (False, {})     # within the grace
    assert read_vf(host, VF1, 'nvidia', 'current_vgpu_type').strip() == \
        '1414'
    driver.vgpus.release_grace = 0          # ... and past it
    changed, _ = driver.reconcile({})       # still no release: missed
    assert changed
    assert read_vf(host, VF1, 'nvidia', 'current_vgpu_type').strip() == '0'
    assert 'missed release' in caplog.text
    assert list(by_address(driver.discover())) == [GPU1]


def test_configured_vf_before_the_bindings_are_known_is_in_use(make_host):
    """An agent restart on a host with our vGPUs: until the first
    reconcile says which bindings hold the configured VFs, they are in use,
    not someone else's (the GPU stays reported, no warning).
    """
    host = make_host(vgpu_spec())
    host.nvml.create_gi(host.nvml.gpu_info()[0]['uuid'], 19, 6,
                        compute_instance=False)
    host.sysfs.set_vgpu_type(VF1, 1414)
    driver = new_driver(host)
    [dep] = by_address(driver.discover()).values()
    assert dep.inventories[vgpu.VGPU]['reserved'] == 0
    # The rest of the GPU is still offered.
    assert 'CUSTOM_VGPU_H200X_1_18C' in dep.traits
    handle = vf_handle(VF1)
    handle['attach_info'] = json.dumps(dict(
        records.pci_info(VF1), managed='no', vgpu_type='1414',
        mig_profile='1g.18gb', mig_start=6))
    driver.reconcile({GPU1: [handle]})
    assert by_address(driver.discover())


def test_mdev_of_nova_on_a_vf_keeps_the_gpu_out(make_host):
    host = make_host(vgpu_spec(layout='mdev', model='a100-80gb'))
    driver = new_driver(host)
    host.nvml.create_gi(host.nvml.gpu_info()[0]['uuid'], 14, 0,
                        compute_instance=False)
    assert host.create_mdev(VF1, 'nvidia-700',
                            'a6f1c0de-0000-4000-8000-000000000001')
    driver.reconcile({})
    assert driver.discover() == []


@pytest.mark.parametrize('option,value', [
    ('nova_enabled_mdev_types', ['nvidia-700']),
    ('nova_mdev_device_addresses', ['nvidia-700=%s' % VF1]),
])
def test_nova_vgpu_config_keeps_the_gpu_out(make_host, option, value):
    CONF.set_override(option, value, group='nvidia')
    host = make_host(vgpu_spec(layout='mdev', model='a100-80gb'))
    assert new_driver(host).discover() == []


def test_enabled_type_narrowed_to_other_gpus_leaves_this_one(make_host):
    CONF.set_override('nova_enabled_mdev_types', ['nvidia-700'],
                      group='nvidia')
    CONF.set_override('nova_mdev_device_addresses',
                      ['nvidia-700=0000:99:00.4'], group='nvidia')
    host = make_host(vgpu_spec(layout='mdev', model='a100-80gb'))
    assert by_address(new_driver(host).discover())


def test_nova_pci_device_spec_on_a_vf_keeps_the_gpu_out(make_host):
    CONF.set_override('nova_device_spec',
                      [json.dumps({'address': VF1})], group='pci_driver')
    host = make_host(vgpu_spec())
    assert new_driver(host).discover() == []


def test_an_attribute_shown_again_is_not_rewritten(tmp_path):
    # A reader of a real sysfs attribute never sees it empty: the fake
    # rewrites a VF's vGPU files only when their value changes, so an
    # agent's report pass reading them while the tree settles again
    # (another thread) does not read '' in the middle of a rewrite.
    path = str(tmp_path / 'current_vgpu_type')
    sysfs_files.write(path, 1414)
    before = os.stat(path).st_mtime_ns
    time.sleep(0.01)
    sysfs_files.show(path, 1414)
    assert os.stat(path).st_mtime_ns == before
    assert sysfs_files.read(path) == '1414'
    sysfs_files.show(path, 0)
    assert sysfs_files.read(path) == '0'
