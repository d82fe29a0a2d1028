# SPDX-License-Identifier: Apache-2.0
"""A cloud moving from Cyborg keeps its flavors: profiles written for
Cyborg's GPU driver (resources:PGPU=1 + trait:CUSTOM_NVIDIA_<product id>)
boot on the nvidia driver's providers, through the Nova flow, on a
cyborg-aio whose agent runs the nvidia driver over the fake H200 host
(cyborg-aio turns [api] gpu_profile_compat to nvidia for such a host).
"""

import uuid

import pytest
import requests

from cyborg import data
from nova_cyborg_client import exception
from nova_cyborg_client import flow
from nova_cyborg_client import scheduler
from tests.nova import conftest

HOST = data.fake_host('h200-dc')
WHOLE_H200 = [{'resources:PGPU': '1',
               'trait:CUSTOM_NVIDIA_2335': 'required'}]
VGPU_1G = [{'resources:VGPU': '1',
            'trait:CUSTOM_NVIDIA_2335_H200X_1_18C': 'required'}]
ADMIN = {'X-Auth-Token': 'admin', 'OpenStack-API-Version': 'placement 1.36'}


@pytest.fixture(scope='module')
def nvidia_stack(tmp_path_factory):
    stack = conftest.Stack(tmp_path_factory.mktemp('stack'), 'nova-h200',
                           host_spec=HOST)
    yield stack
    stack.stop()


@pytest.fixture
def stack(nvidia_stack, conf):
    nvidia_stack.nova.receiver = conftest.nova_events.Receiver()
    conftest.point_at(conf, api=nvidia_stack.api,
                      placement=nvidia_stack.placement)
    return nvidia_stack


def _create(stack, name, groups):
    resp = requests.post(stack.api + '/device_profiles', timeout=10,
                         json=[{'name': name, 'groups': groups}])
    assert resp.status_code == 201, resp.text
    return resp.json()


def _flavor(name):
    return scheduler.Flavor(vcpus=2, memory_mb=2048, root_gb=20,
                            extra_specs={'accel:device_profile': name})


def test_cyborg_pgpu_profile_boots_a_whole_h200(stack):
    profile = _create(stack, 'cyborg-pgpu', WHOLE_H200)
    [group] = profile['groups']
    assert group['resources:CUSTOM_GPU_MEM_SLICE'] == '8'
    assert group['accel:cyborg_group'] == (
        '{"resources:PGPU":"1","trait:CUSTOM_NVIDIA_2335":"required"}')
    runner = flow.FlowRunner(stack.nova.receiver)
    result = runner.boot(_flavor('cyborg-pgpu'))
    instance = result.instance.uuid
    try:
        gpu_rp = result.provider_mapping['device_profile_0'][0]
        allocations = requests.get(
            '%s/allocations/%s' % (stack.placement, instance),
            headers=ADMIN, timeout=10).json()['allocations']
        assert allocations[gpu_rp]['resources'] == {
            'CUSTOM_GPU_MEM_SLICE': 8, 'CUSTOM_GPU_COMPUTE_SLICE': 7,
            'CUSTOM_GPU_NVDEC': 7, 'CUSTOM_GPU_NVJPG': 7,
            'CUSTOM_GPU_OFA': 1}
        [arq] = result.arqs
        assert (arq['state'], arq['attach_handle_type']) == ('Bound', 'PCI')
        info = arq['attach_handle_info']
        # A GPU's PF (a GPU with VFs never goes whole to a VM).
        assert info['function'] == '0'
        [hostdev] = result.hostdevs
        assert hostdev.attrib == {'mode': 'subsystem', 'type': 'pci',
                                  'managed': 'yes'}
        assert hostdev.find('source/address').attrib == {
            'domain': '0x' + info['domain'], 'bus': '0x' + info['bus'],
            'slot': '0x' + info['device'], 'function': '0x0'}
    finally:
        runner.delete(instance)


def test_cyborg_vgpu_profile_finds_no_candidate_without_vgpus(stack):
    """A data-center-driver host has no VFs with vGPU types: a VM profile
    for a vGPU gets no allocation candidate there, nothing is left.
    """
    _create(stack, 'cyborg-vgpu', VGPU_1G)
    runner = flow.FlowRunner(stack.nova.receiver)
    instance = str(uuid.uuid4())
    with pytest.raises(flow.FlowError) as e:
        runner.boot(_flavor('cyborg-vgpu'), instance_uuid=instance)
    assert isinstance(e.value.cause, exception.NoValidHost)
    resp = requests.get(stack.api + '/accelerator_requests',
                        params={'instance': instance}, timeout=10)
    assert resp.json()['arqs'] == []
