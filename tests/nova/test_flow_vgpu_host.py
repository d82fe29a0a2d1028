# SPDX-License-Identifier: Apache-2.0
"""Issue #16's "done when", through the Nova flow on the fake H200
vGPU-Manager host (cyborg/data/fake-hosts/h200-vgpu.yaml, as shipped: the
`vfio` layout; and a variant of it in the `mdev` layout):

- 14 MIG-backed 1g vGPUs (shipped profile h200-vgpu-1g-18gb) boot on the
  two H200s (7 GPU instances of 1g.18gb each), the 15th finds no
  allocation candidate (NoValidHost);
- each ARQ holds its own VF: `PCI` with managed "no" and type 1414
  written to the VF's nvidia/current_vgpu_type (vfio), or `MDEV` with
  asked_type nvidia-1414, whose mdev the flow made on the VF with the
  ARQ's attach_handle_uuid (mdev);
- the guest XML is the <hostdev> Nova 2026.2's libvirt driver writes;
- deleting the instances removes their mdevs at once (the fake applies
  mdev create/remove at the write, as the kernel does).
"""

import os

import pytest

from cyborg_aio import demo
from cyborg_emulators.nvidia import fake_mdev
from nova_cyborg_client import context as nova_context
from nova_cyborg_client import exception
from nova_cyborg_client import flow
from nova_cyborg_client import scheduler

PROFILE = 'h200-vgpu-1g-18gb'
FLAVOR = scheduler.Flavor(extra_specs={'accel:device_profile': PROFILE})
GPUS = 2
PER_GPU = 7             # 1g.18gb GPU instances on an H200
VFS_PER_GPU = 16


@pytest.fixture(scope='module')
def aio_stack(vgpu_stack):
    """conftest's `stack` over the vGPU host, in both layouts."""
    return vgpu_stack


def _vf(info):
    return '%s:%s:%s.%s' % (info['domain'], info['bus'], info['device'],
                            info['function'])


def _read(*parts):
    with open(os.path.join(*parts)) as f:
        return f.read().strip()


def test_fourteen_1g_vgpus_then_no_candidate(stack, conf):
    assert demo.ensure_profiles(nova_context.RequestContext(), conf, {
        PROFILE: demo.shipped_profile(PROFILE)}) == [PROFILE]
    runner = flow.FlowRunner(
        stack.nova.receiver,
        mdev_creator=fake_mdev.KernelMdevCreator(stack.sysfs))
    devices = os.path.join(stack.sysfs, 'bus', 'pci', 'devices')
    results = [runner.boot(FLAVOR) for _ in range(GPUS * PER_GPU)]

    with pytest.raises(flow.FlowError) as e:
        runner.boot(FLAVOR)
    assert isinstance(e.value.cause, exception.NoValidHost), e.value

    arqs = [arq for r in results for arq in r.arqs]
    assert len(arqs) == GPUS * PER_GPU
    vfs = [_vf(arq['attach_handle_info']) for arq in arqs]
    assert len(set(vfs)) == len(vfs)            # a VF each
    pfs = {}
    for vf in vfs:
        pf = os.path.basename(os.readlink(os.path.join(devices, vf,
                                                       'physfn')))
        pfs.setdefault(pf, []).append(vf)
    assert sorted(len(v) for v in pfs.values()) == [PER_GPU] * GPUS
    for arq in arqs:
        info = arq['attach_handle_info']
        assert info['function'] != '0' or info['device'] != '00'
        assert info['mig_profile'] == '1g.18gb'

    for result in results:
        [arq] = result.arqs
        [hostdev] = result.hostdevs
        info, vf = arq['attach_handle_info'], _vf(arq['attach_handle_info'])
        source = hostdev.find('source/address')
        if stack.layout == 'mdev':
            assert (arq['attach_handle_type'], info['asked_type']) == (
                'MDEV', 'nvidia-1414')
            assert 'vgpu_type' not in info and 'managed' not in info
            [m] = result.mdevs
            assert (m.uuid, m.parent, m.mdev_type) == (
                arq['attach_handle_uuid'], vf, 'nvidia-1414')
            # The mdev exists now, of its type, under its VF.
            link = os.readlink(os.path.join(devices, vf, m.uuid,
                                            'mdev_type'))
            assert os.path.basename(link) == 'nvidia-1414'
            assert hostdev.attrib == {'mode': 'subsystem', 'type': 'mdev',
                                      'managed': 'no', 'model': 'vfio-pci'}
            assert source.attrib == {'uuid': m.uuid}
        else:
            assert arq['attach_handle_type'] == 'PCI'
            assert (info['managed'], info['vgpu_type']) == ('no', '1414')
            assert _read(devices, vf, 'nvidia', 'current_vgpu_type') == \
                '1414'
            assert result.mdevs == []
            assert hostdev.attrib == {'mode': 'subsystem', 'type': 'pci',
                                      'managed': 'no'}
            assert source.attrib == {
                'domain': '0x' + info['domain'], 'bus': '0x' + info['bus'],
                'slot': '0x' + info['device'],
                'function': '0x' + info['function']}

    for result in results:
        runner.delete(result.instance.uuid)
    if stack.layout == 'mdev':
        # Removed when the delete returned; none left on any VF.
        for result in results:
            [m] = result.mdevs
            assert not os.path.exists(os.path.join(devices, m.parent,
                                                   m.uuid))
