# SPDX-License-Identifier: Apache-2.0
"""Sharing a GPU by capacity (MPS / time-slice) through the API, agent,
conductor and Placement with the nvidia driver over the fake NVML: the
`_share` provider's totals, one ARQ per share bound through it, Placement
never handing out more than the card, and share pool vs whole/MIG use
excluding each other through the pool consumer's allocation; MPS shares
enforced by the GPU's MPS control daemon (the fake control program) and
bound through `MPS` handles; time-slice shares offered nowhere (nothing
enforces them on a data-center-driver host, and on a vGPU-Manager host
the time-sliced vGPU types are the VMs' time slices), with the reason in
the Share condition."""

import json
import os
import sys
import time
import uuid

import pytest

from cyborg.agent import providers
from cyborg.agent import share_pools
from cyborg.conf import CONF
from cyborg import data
from cyborg.drivers.nvidia import shares
from cyborg_emulators.nvidia import fake_mps_control
from cyborg_emulators.nvidia import fake_sysfs
from tests.conductor import test_binding
from tests.conductor import test_gpu_binding
from tests.conductor import test_gpu_lifecycle

nova_server = test_binding.nova_server
GPU = '0000:1b:00.0'
SHARE = GPU + '_share'
V24 = test_gpu_lifecycle.V24
PROFILE = 'gpu-share-mps-25pct-16g'
# The fake H200 capture: NVML total 143771 MiB, v2 reserved 615.06 MiB
# (rounded up), minus the default 256 MiB margin.
SHARE_MEMORY = 143771 - 616 - 256
MIG_1G = {'CUSTOM_GPU_MEM_SLICE': 1, 'CUSTOM_GPU_COMPUTE_SLICE': 1,
          'CUSTOM_GPU_NVDEC': 1, 'CUSTOM_GPU_NVJPG': 1}


FAKE_MPS = '%s -m cyborg_emulators.nvidia.fake_mps_control' % sys.executable
# The GPU under the vGPU Manager, as the shipped h200-vgpu host has it.
VGPU_MANAGER = {'mig_mode': 1, 'sriov_vfs': 16,
                'vgpu_manager': {'layout': 'vfio', 'heterogeneous': False}}


@pytest.fixture
def gpu_host(request, tmp_path):
    gpu = {'model': 'h200', 'pci_address': GPU, 'mig_mode': 0}
    gpu.update(getattr(request, 'param', {}))
    host = fake_sysfs.FakeGpuHost({'iommu': True, 'gpus': [gpu]},
                                  root=str(tmp_path / 'sys'))
    with host:
        CONF.set_override('sysfs_root', host.root, group='nvidia')
        CONF.set_override('mps_control_command', FAKE_MPS, group='nvidia')
        CONF.set_override('mps_root', str(tmp_path / 'mps'), group='nvidia')
        yield host


def gpu_uuid(stack):
    board = test_gpu_lifecycle.device(stack, GPU)['std_board_info']
    return (json.loads(board) if isinstance(board, str) else board)['uuid']


def mps_pipe(stack):
    return os.path.join(CONF.nvidia.mps_root, gpu_uuid(stack), 'pipe')


@pytest.fixture
def stack(sqlite_database, placement_service, nova_server, gpu_host):
    s = test_binding.Stack(placement_service, nova_server,
                           test_gpu_binding.new_driver())
    s.gpu_host = gpu_host
    groups = data.profile(PROFILE)[0]['groups']
    s.profile(PROFILE, groups)
    yield s
    s.stop()


def share_rp(stack):
    return providers.provider_uuid(stack.host, SHARE)


def pool(stack):
    allocations, _ = stack.placement.allocations(
        share_pools.pool_consumer(stack.rp(GPU)))
    return allocations


def allocate(stack, rp, resources, consumer=None):
    r = stack.placement.adapter.put(
        '/allocations/%s' % (consumer or uuid.uuid4()), microversion='1.28',
        json={'allocations': {rp: {'resources': resources}},
              'project_id': 'p1', 'user_id': 'u1',
              'consumer_generation': None}, raise_exc=False)
    return r.status_code


def set_share(stack, mode, **extra):
    dev = test_gpu_lifecycle.device(stack, GPU)
    r = stack.api('POST', '/v2/devices/%s/share' % dev['uuid'],
                  dict(extra, mode=mode), headers=V24)
    assert r.status_int == 200, r.text
    stack.agent.report_once(full=True)
    return test_gpu_lifecycle.device(stack, GPU)


def share_condition(dev):
    return next(((c['status'], c['reason']) for c in dev['conditions']
                 if c['type'] == 'Share'), None)


def test_share_pool_binds_shares_and_excludes_whole_and_mig(stack):
    dev = set_share(stack, 'mps', slots=4)
    assert (dev['share_mode'], dev['share_slots']) == ('mps', 4)
    assert share_condition(dev) == ('True', 'Pooled')
    rp = stack.rp(SHARE)
    assert rp == share_rp(stack)
    _, inventories = stack.placement.inventories(rp)
    assert {rc: (inv['total'], inv['reserved'], inv['max_unit'])
            for rc, inv in inventories.items()} == {
        'CUSTOM_GPU_CORE_PERCENT': (100, 0, 100),
        'CUSTOM_GPU_MEMORY_MB': (SHARE_MEMORY, 0, SHARE_MEMORY),
        'CUSTOM_GPU_SHARE_SLOT': (4, 0, 1)}
    _, traits = stack.placement.traits(rp)
    assert {'CUSTOM_GPU_SHARE_MPS', 'CUSTOM_GPU_MODEL_H200',
            'OWNER_CYBORG'} <= traits
    # The pool consumer holds the whole GPU provider.
    gpu_rp = stack.rp(GPU)
    assert pool(stack) == {gpu_rp: {
        'CUSTOM_GPU_MEM_SLICE': 8, 'CUSTOM_GPU_COMPUTE_SLICE': 7,
        'CUSTOM_GPU_NVDEC': 7, 'CUSTOM_GPU_NVJPG': 7, 'CUSTOM_GPU_OFA': 1}}
    assert allocate(stack, gpu_rp, MIG_1G) == 409
    assert allocate(stack, gpu_rp, pool(stack)[gpu_rp]) == 409

    # One share: one ARQ, claimed in Placement on the share provider,
    # bound through it.
    arqs = stack.create_arqs(PROFILE)
    assert len(arqs) == 1
    instance = str(uuid.uuid4())
    share = {'CUSTOM_GPU_MEMORY_MB': 16384, 'CUSTOM_GPU_CORE_PERCENT': 25,
             'CUSTOM_GPU_SHARE_SLOT': 1}
    assert allocate(stack, rp, share, instance) == 204
    assert stack.bind(arqs, instance, [rp]).status_int == 202
    [bound] = stack.wait_resolved(instance)
    assert bound['state'] == 'Bound', bound
    # For host processes and containers: not a VM attach type.
    assert bound['attach_handle_type'] == 'MPS'
    info = bound['attach_handle_info']
    assert (info['share_mode'], info['share_memory_mb'],
            info['share_percent']) == ('mps', 16384, 25)
    assert info['enforcer'] == shares.MPS_ENFORCER
    pipe = mps_pipe(stack)
    assert info['mps_pipe_directory'] == pipe
    assert info['mps_client_env'] == {
        'CUDA_MPS_PIPE_DIRECTORY': pipe,
        'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': '25',
        'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT': '0=16384M',
        'CYBORG_SHARE_HANDLE': bound['attach_handle_uuid']}
    # The agent started the GPU's daemon pinned to it, with one slot's
    # even share as the ceiling, then raised it to the bound share.
    daemon = fake_mps_control.load(pipe)
    assert daemon['visible_devices'] == gpu_uuid(stack)
    assert [c for c in fake_mps_control.commands(pipe)
            if c.startswith('set_')] == [
        'set_default_active_thread_percentage 25',
        'set_default_device_pinned_mem_limit 0 %dM' % (SHARE_MEMORY // 4),
        'set_default_active_thread_percentage 25',
        'set_default_device_pinned_mem_limit 0 16384M']
    # A client with the share's environment gets the share's limits; one
    # without it, the ceiling (never the whole GPU).
    assert fake_mps_control.connect_client(
        pipe, 5001, 1000, info['mps_client_env']) == {
            'thread_percentage': 25.0, 'pinned_mem_limit_mib': 16384}
    assert fake_mps_control.connect_client(pipe, 5002, 1000, {}) == {
        'thread_percentage': 25.0, 'pinned_mem_limit_mib': 16384}
    stack.agent.report_once(full=True)
    assert test_gpu_lifecycle.device(stack, GPU)['management_state'] == \
        'Managed'

    # Never more than the card.
    assert allocate(stack, rp, {'CUSTOM_GPU_MEMORY_MB':
                                SHARE_MEMORY - 16384 + 1,
                                'CUSTOM_GPU_SHARE_SLOT': 1}) == 409
    assert allocate(stack, rp, {'CUSTOM_GPU_CORE_PERCENT': 76,
                                'CUSTOM_GPU_SHARE_SLOT': 1}) == 409

    # Leaving share mode while a share is held: fenced, kept.
    dev = set_share(stack, 'none')
    assert share_condition(dev) == ('False', 'ShareInUse')
    _, inventories = stack.placement.inventories(rp)
    usages = stack.placement.usages(rp)
    # Nothing free, and no usage above capacity: the fence reserves what
    # the held share leaves.
    assert all(inv['reserved'] + usages.get(rc, 0) == inv['total']
               for rc, inv in inventories.items()), (inventories, usages)
    assert any(usages.values())
    assert pool(stack)
    assert allocate(stack, gpu_rp, MIG_1G) == 409

    # Freed: share provider and pool allocation gone, MIG possible again.
    r = stack.api('DELETE', '/v2/accelerator_requests?instance=%s'
                  % instance, headers=test_binding.NOVA_HEADERS)
    assert r.status_int == 204
    stack.placement.delete_allocations(instance)
    deadline = time.time() + 10
    while time.time() < deadline:
        stack.agent.report_once(full=True)
        if stack.placement.provider(rp) is None:
            break
        time.sleep(0.1)
    assert stack.placement.provider(rp) is None
    assert pool(stack) == {}
    dev = test_gpu_lifecycle.device(stack, GPU)
    assert share_condition(dev) is None
    assert allocate(stack, gpu_rp, MIG_1G) == 204
    # No pool, no daemon.
    assert fake_mps_control.load(pipe) is None
    assert fake_mps_control.commands(pipe) == []


def test_share_mode_refused_while_mig_is_in_use(stack):
    gpu_rp = stack.rp(GPU)
    mig_claim = str(uuid.uuid4())
    assert allocate(stack, gpu_rp, MIG_1G, mig_claim) == 204
    dev = set_share(stack, 'mps')
    assert share_condition(dev) == ('False', 'GpuInUse')
    assert stack.placement.provider(share_rp(stack)) is None
    deps = stack.api('GET', '/v2/deployables').json['deployables']
    assert SHARE not in {d['name'] for d in deps}
    # Once the MIG claim is gone, the next pass makes the pool.
    stack.placement.delete_allocations(mig_claim)
    stack.agent.report_once(full=True)
    dev = test_gpu_lifecycle.device(stack, GPU)
    assert share_condition(dev) == ('True', 'Pooled')
    _, traits = stack.placement.traits(share_rp(stack))
    assert 'CUSTOM_GPU_SHARE_MPS' in traits
    _, inventories = stack.placement.inventories(share_rp(stack))
    assert inventories['CUSTOM_GPU_SHARE_SLOT']['total'] == 10
    assert inventories['CUSTOM_GPU_CORE_PERCENT']['allocation_ratio'] == 1.0


def test_share_provider_is_fenced_with_its_device(stack):
    set_share(stack, 'mps')
    dev = test_gpu_lifecycle.device(stack, GPU)
    r = stack.api('POST', '/v2/devices/%s/exclude' % dev['uuid'],
                  headers=V24)
    assert r.status_int == 200
    stack.agent.report_once(full=True)
    for address in (GPU, SHARE):
        assert test_gpu_lifecycle.fenced(stack, address), address


@pytest.mark.parametrize('gpu_host', [VGPU_MANAGER], indirect=True)
@pytest.mark.parametrize('mode, reason', [
    ('time-slice', 'whose time-sliced vGPU types already are the enforced '
                   'time slices of VMs: ask for one with a vGPU device '
                   'profile (trait CUSTOM_VGPU_H200X_141C or '
                   'CUSTOM_VGPU_H200X_35C or CUSTOM_VGPU_H200X_70C)'),
    ('mps', 'there is no host CUDA')])
def test_no_share_on_a_vgpu_manager_host(stack, mode, reason):
    """A time-slice share would duplicate the time-sliced vGPU types that
    VMs get there; MPS has no host CUDA to run on. Neither is offered,
    the Share condition says why, and the GPU's vGPUs stay offered.
    """
    dev = set_share(stack, mode)
    assert dev['share_mode'] == mode
    assert share_condition(dev) == ('False', 'Unsupported')
    [message] = [c['message'] for c in dev['conditions']
                 if c['type'] == 'Share']
    assert reason in message
    assert stack.placement.provider(share_rp(stack)) is None
    assert pool(stack) == {}
    _, inventories = stack.placement.inventories(stack.rp(GPU))
    assert inventories['VGPU']['total'] == 16


def test_time_slice_share_not_offered_where_nothing_enforces_it(stack):
    """No vGPU types (data-center driver): nothing would limit a
    time-sliced process, so no share provider, and the condition says why.
    """
    dev = set_share(stack, 'time-slice')
    assert share_condition(dev) == ('False', 'Unsupported')
    [message] = [c['message'] for c in dev['conditions']
                 if c['type'] == 'Share']
    assert 'nothing limits a time-sliced process' in message
    assert stack.placement.provider(share_rp(stack)) is None
    assert pool(stack) == {}


@pytest.mark.parametrize('gpu_host', [{'mig_mode': 1}], indirect=True)
def test_mps_share_not_offered_in_mig_mode(stack):
    dev = set_share(stack, 'mps')
    assert share_condition(dev) == ('False', 'Unsupported')
    assert stack.placement.provider(share_rp(stack)) is None
    assert fake_mps_control.load(mps_pipe(stack)) is None


def test_mps_share_not_offered_when_the_daemon_cannot_start(stack):
    CONF.set_override('mps_control_command', '/nonexistent/mps-control',
                      group='nvidia')
    stack.driver.shares.mps.command = ['/nonexistent/mps-control']
    dev = set_share(stack, 'mps')
    assert share_condition(dev) == ('False', 'Unsupported')
    [message] = [c['message'] for c in dev['conditions']
                 if c['type'] == 'Share']
    assert 'did not start' in message
    assert stack.placement.provider(share_rp(stack)) is None
