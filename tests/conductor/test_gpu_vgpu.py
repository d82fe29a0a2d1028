# SPDX-License-Identifier: Apache-2.0
"""Binding GPUs on both kinds of NVIDIA host through the API, conductor,
agent and the real Placement, with the real nvidia driver over the fake
NVML and sysfs: vGPUs for VMs on a vGPU-Manager host (vfio layout: a VF
`PCI` handle with its type written; mdev layout: an `MDEV` handle with
`asked_type` and the VF as parent), and on a data-center host whole GPUs
for VMs and `MIG` handles for everything else."""

import time
import uuid

import pytest
import yaml

from cyborg.conf import CONF
from cyborg import data
from cyborg_emulators.nvidia import fake_sysfs
from tests.conductor import test_binding
from tests.conductor import test_gpu_binding

GPU = '0000:1b:00.0'
VF = '0000:1b:00.4'
nova_server = test_binding.nova_server
new_driver = test_gpu_binding.new_driver


def host_spec(name, **gpu):
    with open(data.fake_host(name)) as f:
        spec = yaml.safe_load(f)
    spec['nvidia']['gpus'] = [dict(spec['nvidia']['gpus'][0], **gpu)]
    return spec


MDEV_HOST = {'nvidia': {'iommu': True, 'gpus': [{
    'model': 'a100-80gb', 'pci_address': GPU, 'mig_mode': 1,
    'sriov_vfs': 16, 'vgpu_manager': {'layout': 'mdev'}}]}}
MDEV_PROFILE = {'resources:VGPU': '1', 'resources:CUSTOM_GPU_MEM_SLICE': '2',
                'resources:CUSTOM_GPU_COMPUTE_SLICE': '2',
                'resources:CUSTOM_GPU_NVDEC': '1',
                'trait:CUSTOM_VGPU_A100D_2_20C': 'required'}


@pytest.fixture
def make_stack(sqlite_database, placement_service, nova_server, tmp_path):
    made = []

    def make(spec, *profiles):
        host = fake_sysfs.FakeGpuHost(spec, root=str(tmp_path / 'sys'))
        host.install()
        CONF.set_override('sysfs_root', host.root, group='nvidia')
        s = test_binding.Stack(placement_service, nova_server, new_driver())
        s.gpu_host = host
        made.append(s)
        for name in profiles:
            s.profile(name, data.profile(name)[0]['groups'])
        return s

    yield make
    for s in made:
        s.stop()
        s.gpu_host.uninstall()


def boot(stack, profile):
    arqs = stack.create_arqs(profile)
    instance = str(uuid.uuid4())
    assert stack.bind(arqs, instance, [stack.rp(GPU)] * len(arqs)) \
        .status_int == 202
    return instance, stack.wait_resolved(instance)


def unbind(stack, instance):
    r = stack.api('DELETE', '/v2/accelerator_requests?instance=%s'
                  % instance, headers=test_binding.NOVA_HEADERS)
    assert r.status_int == 204


def gpu_instances(stack):
    state = stack.gpu_host.to_state()
    return list(state['gpus'].values())[0]['gpu_instances']


def vf_type(stack, vf):
    return stack.gpu_host.sysfs.vf_vgpu(vf)['current']


def wait_for(check, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def candidates(stack, profile):
    """Placement's allocation candidates for a profile's one group on
    this stack's GPU (Placement is shared by the tests of a run).
    """
    group = data.profile(profile)[0]['groups'][0]
    resources = ','.join('%s:%s' % (k.split(':', 1)[1], v)
                         for k, v in group.items()
                         if k.startswith('resources:'))
    required = ','.join(k.split(':', 1)[1] for k, v in group.items()
                        if k.startswith('trait:') and v == 'required')
    r = stack.adapter.get('/allocation_candidates?resources=%s&required=%s'
                          % (resources, required), microversion='1.29',
                          raise_exc=False)
    if r.status_code == 400 and 'No such trait' in r.text:
        return []           # no provider anywhere has the trait
    assert r.status_code == 200, r.text
    rp = stack.rp(GPU)
    return [a for a in r.json()['allocation_requests']
            if rp in a['allocations']]


def test_vfio_layout_binds_a_vf_with_its_type_written(make_stack):
    stack = make_stack(host_spec('h200-vgpu'), 'h200-vgpu-1g-18gb')
    instance, [bound] = boot(stack, 'h200-vgpu-1g-18gb')
    assert bound['state'] == 'Bound'
    assert bound['attach_handle_type'] == 'PCI'
    info = bound['attach_handle_info']
    assert (info['domain'], info['bus'], info['device'], info['function']) \
        == ('0000', '1b', '00', '4')
    assert info['managed'] == 'no' and info['vgpu_type'] == '1414'
    assert vf_type(stack, VF) == 1414
    assert [(gi['profile_id'], gi['compute_instances'])
            for gi in gpu_instances(stack)] == [(19, [])]
    assert len(candidates(stack, 'h200-vgpu-1g-18gb')) == 1
    unbind(stack, instance)
    assert wait_for(lambda: not gpu_instances(stack))
    assert vf_type(stack, VF) == 0


def test_vfio_layout_placement_stops_at_seven_1g(make_stack):
    stack = make_stack(host_spec('h200-vgpu'), 'h200-vgpu-1g-18gb')
    vfs = set()
    for _ in range(7):
        assert candidates(stack, 'h200-vgpu-1g-18gb')
        _, [bound] = boot(stack, 'h200-vgpu-1g-18gb')
        assert bound['state'] == 'Bound'
        vfs.add(bound['attach_handle_info']['function'])
    assert len(vfs) == 7 and len(gpu_instances(stack)) == 7
    # The agent publishes what still fits after each bind: no 8th.
    assert candidates(stack, 'h200-vgpu-1g-18gb') == []


def test_mdev_layout_binds_asked_type_on_the_vf(make_stack):
    stack = make_stack(MDEV_HOST)
    stack.profile('a100-vgpu-2g', [MDEV_PROFILE])
    instance, [bound] = boot(stack, 'a100-vgpu-2g')
    assert bound['state'] == 'Bound'
    assert bound['attach_handle_type'] == 'MDEV'
    info = bound['attach_handle_info']
    assert info['asked_type'] == 'nvidia-700'
    assert (info['bus'], info['device'], info['function']) == \
        ('1b', '00', '4')       # the VF, the mdev's parent
    assert bound['attach_handle_uuid']
    # Nova creates the mdev of asked_type on the VF with the ARQ's UUID:
    # the GPU stays ours.
    assert stack.gpu_host.create_mdev(VF, info['asked_type'],
                                      bound['attach_handle_uuid'])
    stack.agent.report_once(full=True)
    assert [d['name'] for d in stack.api('GET', '/v2/deployables')
            .json['deployables']] == [GPU]
    stack.gpu_host.remove_mdev(VF, bound['attach_handle_uuid'])
    unbind(stack, instance)
    assert wait_for(lambda: not gpu_instances(stack))


def test_datacenter_host_mig_is_not_for_vms(make_stack):
    stack = make_stack(host_spec('h200-dc', mig_mode=1), 'h200-mig-1g-18gb',
                       'h200-vgpu-1g-18gb', 'h200-whole')
    # A VM profile finds no candidate on a data-center host.
    assert candidates(stack, 'h200-vgpu-1g-18gb') == []
    assert candidates(stack, 'h200-mig-1g-18gb')
    instance, [bound] = boot(stack, 'h200-mig-1g-18gb')
    assert bound['state'] == 'Bound'
    assert bound['attach_handle_type'] == 'MIG'
    assert bound['attach_handle_info']['mig_uuid'].startswith('MIG-')
    unbind(stack, instance)
    assert wait_for(lambda: not gpu_instances(stack))
    # Forced onto it anyway (a stale scheduler), the vGPU bind fails.
    _, [failed] = boot(stack, 'h200-vgpu-1g-18gb')
    assert failed['state'] == 'BindFailed'


def test_vgpu_host_has_no_candidate_for_whole_or_non_vm_mig(make_stack):
    stack = make_stack(host_spec('h200-vgpu'), 'h200-mig-1g-18gb',
                       'h200-whole')
    assert candidates(stack, 'h200-mig-1g-18gb') == []
    assert candidates(stack, 'h200-whole') == []
