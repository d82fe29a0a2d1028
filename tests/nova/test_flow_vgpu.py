# SPDX-License-Identifier: Apache-2.0
"""vGPUs reach a guest the way Nova 2026.2 gives them: on the fake H200
vGPU-Manager host (cyborg/data/fake-hosts/h200-vgpu.yaml) in both layouts
of the vGPU types, through the Nova flow, from a profile written for
Cyborg (resources:VGPU=1 + trait:CUSTOM_NVIDIA_2335_H200X_1_18C,
translated by the API):

- mdev layout (types under each VF's mdev_supported_types): an MDEV
  handle naming the VF and `asked_type`; the flow creates the mdev of that
  type on the VF with the handle's UUID, the guest gets
  <hostdev type='mdev' managed='no' model='vfio-pci'>, and deleting the
  instance removes the mdev;
- vfio layout (vGPU 17+, no mdev): the VF as a PCI handle with its type
  written, the guest gets <hostdev type='pci' managed='no'>.
"""

import os

import pytest
import requests
import yaml

from cyborg import data
from cyborg_emulators.nvidia import fake_mdev
from nova_cyborg_client import flow
from nova_cyborg_client import scheduler
from tests.nova import conftest

CYBORG_VGPU_1G = [{'resources:VGPU': '1',
                   'trait:CUSTOM_NVIDIA_2335_H200X_1_18C': 'required'}]


def _spec(tmp_path, layout):
    with open(data.fake_host('h200-vgpu')) as f:
        spec = yaml.safe_load(f)
    for gpu in spec['nvidia']['gpus']:
        gpu['vgpu_manager']['layout'] = layout
    path = tmp_path / ('h200-vgpu-%s.yaml' % layout)
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope='module', params=['mdev', 'vfio'])
def vgpu_stack(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp('stack')
    stack = conftest.Stack(tmp, 'nova-vgpu',
                           host_spec=_spec(tmp, request.param))
    stack.layout = request.param
    stack.sysfs = str(tmp / 'state' / 'fake-sysfs')
    yield stack
    stack.stop()


@pytest.fixture
def stack(vgpu_stack, conf):
    vgpu_stack.nova.receiver = conftest.nova_events.Receiver()
    conftest.point_at(conf, api=vgpu_stack.api,
                      placement=vgpu_stack.placement)
    return vgpu_stack


def test_cyborg_vgpu_profile_boots_a_vgpu(stack):
    resp = requests.post(stack.api + '/device_profiles', timeout=10,
                         json=[{'name': 'cyborg-vgpu-1g',
                                'groups': CYBORG_VGPU_1G}])
    assert resp.status_code == 201, resp.text
    runner = flow.FlowRunner(
        stack.nova.receiver,
        mdev_creator=fake_mdev.KernelMdevCreator(stack.sysfs))
    result = runner.boot(scheduler.Flavor(
        extra_specs={'accel:device_profile': 'cyborg-vgpu-1g'}))
    [arq] = result.arqs
    info = arq['attach_handle_info']
    vf = '%s:%s:%s.%s' % (info['domain'], info['bus'], info['device'],
                          info['function'])
    assert info['function'] != '0'          # a VF, not the PF
    assert info['mig_profile'] == '1g.18gb'
    [hostdev] = result.hostdevs
    if stack.layout == 'mdev':
        assert (arq['attach_handle_type'], info['asked_type']) == (
            'MDEV', 'nvidia-1414')
        [m] = result.mdevs
        assert (m.uuid, m.parent, m.mdev_type) == (
            arq['attach_handle_uuid'], vf, 'nvidia-1414')
        assert hostdev.attrib == {'mode': 'subsystem', 'type': 'mdev',
                                  'managed': 'no', 'model': 'vfio-pci'}
        assert hostdev.find('source/address').attrib == {'uuid': m.uuid}
        device = os.path.join(stack.sysfs, 'bus/pci/devices', vf, m.uuid)
        assert os.path.isdir(device)   # made at the write, as the kernel
    else:
        assert arq['attach_handle_type'] == 'PCI'
        assert (info['managed'], info['vgpu_type']) == ('no', '1414')
        assert result.mdevs == []
        assert hostdev.attrib == {'mode': 'subsystem', 'type': 'pci',
                                  'managed': 'no'}
    runner.delete(result.instance.uuid)
    if stack.layout == 'mdev':
        assert not os.path.exists(device)
