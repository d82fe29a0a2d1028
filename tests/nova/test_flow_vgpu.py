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

from cyborg_emulators.nvidia import fake_mdev
from nova_cyborg_client import flow
from nova_cyborg_client import scheduler

CYBORG_VGPU_1G = [{'resources:VGPU': '1',
                   'trait:CUSTOM_NVIDIA_2335_H200X_1_18C': 'required'}]


@pytest.fixture(scope='module')
def aio_stack(vgpu_stack):
    """conftest's `stack` over the vGPU host, in both layouts."""
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
