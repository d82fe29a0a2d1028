# SPDX-License-Identifier: Apache-2.0
"""Shares and what enforces them, at the driver: which share kinds a GPU
is offered in on each kind of host (MPS only on a data-center-driver
host; time-slice nowhere, with the reason), share handles typed MPS, the
MPS ceiling following bound shares through prepare, release and a
restart's reconcile (the fake MPS control program as the daemon), and
refusals."""

import json
import logging
import os
import sys

import pytest

from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import driver as nvidia
from cyborg.drivers.nvidia import shares
from cyborg_emulators.nvidia import fake_mps_control
from tests.drivers.nvidia import test_driver
from tests.drivers.nvidia import test_vgpu

GPU = test_driver.GPU1
SHARE = GPU + shares.SHARE_SUFFIX
FAKE = '%s -m cyborg_emulators.nvidia.fake_mps_control' % sys.executable


@pytest.fixture
def host(make_host, tmp_path):
    CONF.set_override('mps_control_command', FAKE, group='nvidia')
    CONF.set_override('mps_root', str(tmp_path / 'mps'), group='nvidia')
    return make_host(test_driver.spec(gpu2=False))


make_host = test_driver.make_host


def _driver(host):
    return nvidia.NvidiaDriver(backend=nvml.PynvmlBackend(retry_delay=0),
                               sysfs=host.sysfs)


def _share(memory=None, percent=None, uuid='h-1'):
    group = {'resources:CUSTOM_GPU_SHARE_SLOT': '1'}
    if memory is not None:
        group['resources:CUSTOM_GPU_MEMORY_MB'] = str(memory)
    if percent is not None:
        group['resources:CUSTOM_GPU_CORE_PERCENT'] = str(percent)
    return {'uuid': uuid, 'attach_type': shares.HANDLE_TYPE,
            'attach_info': '{}', 'request_group': group}


def _gpu(**kw):
    fields = dict(uuid='GPU-x', address=GPU, name='NVIDIA H200',
                  product_id='2335', memory_total=1 << 37,
                  memory_reserved=0, compute_capability=(9, 0),
                  mig_current=0)
    fields.update(kw)
    return nvml.Gpu(**fields)


def _set_commands(pipe):
    return [c for c in fake_mps_control.commands(pipe)
            if c.startswith('set_')]


def test_enforcers(host):
    drv = _driver(host)
    enforcer = drv.shares.enforcer
    assert enforcer(_gpu(), 'mps') == (shares.MPS_ENFORCER, None)
    kind, why = enforcer(_gpu(compute_capability=(6, 0)), 'mps')
    assert kind is None and 'compute capability 7.0' in why and '6.0' in why
    kind, why = enforcer(_gpu(mig_current=1), 'mps')
    assert kind is None and 'MIG mode is on' in why
    kind, why = enforcer(_gpu(), 'time-slice')
    assert kind is None and 'nothing limits' in why


def test_nothing_is_shared_on_a_vgpu_manager_host(host):
    """vGPU Manager (NVML HOST_VGPU): no host CUDA, so no MPS; its
    time-sliced vGPU types are the time slices VMs get, so no time-slice
    share either: the reason names the type traits to ask for.
    """
    vgpu_host = dict(
        virtualization_mode=nvml.VIRTUALIZATION_HOST_VGPU,
        vgpu_types=(nvml.VgpuType(1414, 'NVIDIA H200X-1-18C', 18432, 7, 19),
                    nvml.VgpuType(1427, 'NVIDIA H200X-70C', 71680, 2),
                    nvml.VgpuType(1428, 'NVIDIA H200X-141C', 144384, 1)))
    enforcer = _driver(host).shares.enforcer
    kind, why = enforcer(_gpu(**vgpu_host), 'mps')
    assert kind is None and 'no host CUDA' in why
    kind, why = enforcer(_gpu(**vgpu_host), 'time-slice')
    assert kind is None
    assert 'trait CUSTOM_VGPU_H200X_141C or CUSTOM_VGPU_H200X_70C' in why
    assert 'H200X_1_18C' not in why         # MIG-backed: not a time slice


@pytest.mark.parametrize('mode', ['mps', 'time-slice'])
def test_vgpu_host_share_request_is_refused_and_said(make_host, caplog,
                                                     mode):
    """The shipped vGPU-Manager host: a share asked for gets no share
    deployable, the observation (the agent's Share condition) says why,
    the log says it once, and the vGPU view is untouched. No vGPU type
    is on the PF: they are on the VFs only.
    """
    host = make_host(test_vgpu.shipped('h200-vgpu.yaml'))
    assert not os.path.exists(os.path.join(
        host.root, 'bus', 'pci', 'devices', GPU, 'mdev_supported_types'))
    drv = _driver(host)
    before = {d.deployables[0].name: d.deployables[0].inventories
              for d in drv.discover()}
    drv.set_share_modes({GPU: {'mode': mode, 'slots': 4}})
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        devices = drv.discover()
    device = next(d for d in devices if d.deployables[0].name == GPU)
    assert [d.name for d in device.deployables] == [GPU]
    assert device.deployables[0].inventories == before[GPU]
    observation = device.observations['share']
    assert (observation['mode'], observation['ready']) == (mode, False)
    assert 'run by the NVIDIA vGPU Manager' in observation['why']
    said = [r.getMessage() for r in caplog.records
            if r.getMessage().startswith('Share mode')]
    assert said == ['Share mode %s asked for GPU %s is not offered: %s'
                    % (mode, GPU, observation['why'])]
    with pytest.raises(base.PrepareError, match='vGPU Manager'):
        drv.prepare(SHARE, _share(1024, 10))


def test_share_handles_are_mps_not_a_vm_type(host):
    """A share is for host processes and containers: its handles are of
    type MPS (never MDEV, which Nova would make an mdev of).
    """
    drv = _driver(host)
    drv.set_share_modes({GPU: {'mode': 'mps', 'slots': 3}})
    [device] = drv.discover()
    share = next(d for d in device.deployables if d.name == SHARE)
    assert [(h.attach_type, h.attach_info['share_slot'])
            for h in share.attach_handles] == [
        ('MPS', '0'), ('MPS', '1'), ('MPS', '2')]
    whole = next(d for d in device.deployables if d.name == GPU)
    assert {h.attach_type for h in whole.attach_handles} == {'PCI', 'MIG'}
    handles = [{'uuid': 'h-%d' % n, 'attach_type': h.attach_type,
                'attach_info': json.dumps(h.attach_info)}
               for n, h in enumerate(share.attach_handles)]
    assert drv.pick_handles({'name': SHARE, 'num_accelerators': 3},
                            _share(1024, 10)['request_group'],
                            handles) == handles


def test_mps_ceiling_follows_bound_shares(host):
    drv = _driver(host)
    drv.set_share_modes({GPU: {'mode': 'mps', 'slots': 4}})
    [device] = drv.discover()
    share = next(d for d in device.deployables if d.name == SHARE)
    assert share.attributes['share_mode'] == 'mps'
    assert device.observations['share']['enforcer'] == shares.MPS_ENFORCER
    gpu_uuid = device.std_board_info['uuid']
    pipe, _ = drv.shares.mps.directories(gpu_uuid)
    pool = share.inventories['CUSTOM_GPU_MEMORY_MB']['total']
    assert _set_commands(pipe) == [
        'set_default_active_thread_percentage 25',
        'set_default_device_pinned_mem_limit 0 %dM' % (pool // 4)]
    small = drv.prepare(SHARE, _share(16384, 25, 'h-small'))
    big = drv.prepare(SHARE, _share(32768, 50, 'h-big'))
    assert small['mps_client_env']['CYBORG_SHARE_HANDLE'] == 'h-small'
    assert big['mps_client_env']['CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'] == \
        '0=32768M'
    # Percent only: that fraction of the pool's memory; memory only: all SMs.
    assert drv.prepare(SHARE, _share(percent=10, uuid='h-p'))[
        'share_memory_mb'] == pool // 10
    assert drv.prepare(SHARE, _share(memory=1024, uuid='h-m'))[
        'share_percent'] == 100
    assert fake_mps_control.load(pipe)['default_thread_percentage'] == 100
    for uuid in ('h-p', 'h-m'):
        drv.release(SHARE, {'uuid': uuid})
    state = fake_mps_control.load(pipe)
    assert (state['default_thread_percentage'],
            state['default_pinned_mem_limit']) == (50.0, {'0': '32768M'})
    drv.release(SHARE, {'uuid': 'h-big'})
    state = fake_mps_control.load(pipe)
    assert (state['default_thread_percentage'],
            state['default_pinned_mem_limit']) == (25.0, {'0': '16384M'})

    # Agent restart: the running daemon is adopted and gets the ceiling of
    # the shares the conductor says are bound.
    again = _driver(host)
    again.set_share_modes({GPU: {'mode': 'mps', 'slots': 4}})
    again.reconcile({SHARE: [{'uuid': 'h-small',
                              'attach_info': json.dumps(small)},
                             {'uuid': 'h-big',
                              'attach_info': json.dumps(big)}]})
    again.discover()
    state = fake_mps_control.load(pipe)
    assert (state['default_thread_percentage'],
            state['default_pinned_mem_limit']) == (50.0, {'0': '32768M'})

    # Share mode off and nothing bound: the daemon is stopped.
    again.set_share_modes({})
    again.reconcile({})
    again.discover()
    assert fake_mps_control.load(pipe) is None


def test_share_refusals(host):
    drv = _driver(host)
    with pytest.raises(base.PrepareError, match='not in a share mode'):
        drv.prepare(SHARE, _share(1024, 10))
    drv.set_share_modes({GPU: {'mode': 'mps', 'slots': 4}})
    drv.discover()
    with pytest.raises(base.PrepareError, match='neither'):
        drv.prepare(SHARE, _share())
    drv.set_share_modes({GPU: {'mode': 'time-slice', 'slots': 4}})
    [device] = drv.discover()
    assert [d.name for d in device.deployables] == [GPU]
    assert device.observations['share']['ready'] is False
    with pytest.raises(base.PrepareError,
                       match='time-slice shares are not offered'):
        drv.prepare(SHARE, _share(1024, 10))


def test_time_slice_asked_while_mps_shares_are_held(host):
    """Time-slice asked for a GPU whose MPS shares are still bound: the
    share provider stays for them, fenced (nothing new is granted) and
    with no share-kind trait (no time-slice share exists to ask for).
    """
    drv = _driver(host)
    drv.set_share_modes({GPU: {'mode': 'mps', 'slots': 4}})
    drv.discover()
    info = drv.prepare(SHARE, _share(1024, 10))
    drv.reconcile({SHARE: [{'uuid': 'h-1', 'attach_info': json.dumps(info)}]})
    drv.set_share_modes({GPU: {'mode': 'time-slice', 'slots': 4}})
    [device] = drv.discover()
    share = next(d for d in device.deployables if d.name == SHARE)
    assert share.attributes['share_mode'] == 'time-slice'
    assert not [t for t in share.traits if t.startswith('CUSTOM_GPU_SHARE_')]
    assert {'CUSTOM_GPU_VENDOR_NVIDIA', 'CUSTOM_GPU_MODEL_H200'} <= \
        set(share.traits)
    assert all(inv['reserved'] == inv['total']
               for inv in share.inventories.values())
    observation = device.observations['share']
    assert observation['ready'] is False
    assert 'time-slice shares are not offered' in observation['why']
