# SPDX-License-Identifier: Apache-2.0
"""cyborg-aio's demo on the fake H200 hosts: vGPUs under the vGPU Manager
(vfio and mdev layouts) and whole GPUs on the data-center driver.
"""

import json
import os

import yaml

from cyborg_harness import aio as harness_aio
from tests.functional import aio_common

FAKE_HOSTS = harness_aio.FAKE_HOSTS


def test_aio_h200_vgpu_demo_boots_vgpus_for_vms(aio):
    """Two fake H200s under the vGPU Manager through the real nvidia
    driver and the Nova flow: a time-sliced vGPU on one GPU, MIG-backed
    vGPUs of two sizes on the other, each on its own VF with its type
    written (vfio layout); a restart unbinds and binds them again.
    """
    spec = os.path.join(FAKE_HOSTS, 'h200-vgpu.yaml')
    for run in range(2):
        proc = aio(demo=True, host_spec=spec)
        out = proc.read_until(r'^demo: \d+ of \d+ instance\(s\) booted')
        assert 'demo: 4 of 4 instance(s) booted' in out, out + proc.logs()
        arqs = aio_common.demo_arqs(proc.api)
        assert len(arqs) == 4, arqs
        infos = {a['device_profile_name'] + '/' + a['uuid']:
                 a['attach_handle_info'] for a in arqs}
        assert {a['attach_handle_type'] for a in arqs} == {'PCI'}
        assert all(i['managed'] == 'no' and i['function'] != '0'
                   for i in infos.values()), infos
        vfs = {(i['bus'], i['device'], i['function'])
               for i in infos.values()}
        assert len(vfs) == 4, infos
        by_type = {i['vgpu_type']: i for i in infos.values()}
        assert set(by_type) == {'1427', '1418', '1414'}, infos
        # The time-sliced vGPU has a GPU of its own.
        sliced_bus = by_type['1427']['bus']
        assert {i['bus'] for i in infos.values()
                if i['vgpu_type'] != '1427'} == {
                    {'1b': '43', '43': '1b'}[sliced_bus]}
        state = json.loads((aio.state_dir / 'fake-nvml.json').read_text())
        layouts = sorted(sorted((gi['profile_id'], gi['compute_instances'])
                                for gi in gpu['gpu_instances'])
                         for gpu in state['gpus'].values())
        assert layouts == [[], [(9, []), (19, []), (19, [])]], layouts
        assert 'MIG instances nobody owns' not in proc.logs()
        assert proc.stop() == 0, proc.logs()
        # No warning on the terminal: not the demo's, nor Placement's
        # "over-capacity" for a fenced GPU that is in use.
        assert proc.stderr_lines() == [], proc.logs()


def test_aio_h200_vgpu_demo_mdev_layout_leaves_no_mdev(aio, tmp_path):
    """The same host with the vGPU types as mdev types on the VFs: the demo
    makes each MDEV handle's mdev on its VF (the fake applies the write at
    once, as the kernel does); a rerun deletes the previous instances
    first, and exactly the mdevs of the live ARQs remain.
    """
    with open(os.path.join(FAKE_HOSTS, 'h200-vgpu.yaml')) as f:
        spec = yaml.safe_load(f)
    for gpu in spec['nvidia']['gpus']:
        gpu['vgpu_manager']['layout'] = 'mdev'
    path = tmp_path / 'h200-vgpu-mdev.yaml'
    path.write_text(yaml.safe_dump(spec))
    devices = aio.state_dir / 'fake-sysfs' / 'bus' / 'pci' / 'devices'
    for run in range(2):
        proc = aio(demo=True, host_spec=str(path))
        out = proc.read_until(r'^demo: \d+ of \d+ instance\(s\) booted')
        assert 'demo: 4 of 4 instance(s) booted' in out, out + proc.logs()
        assert out.count("type='mdev'") + out.count('type="mdev"') == 4, out
        arqs = aio_common.demo_arqs(proc.api)
        assert {a['attach_handle_type'] for a in arqs} == {'MDEV'}, arqs
        wanted = {}
        for arq in arqs:
            i = arq['attach_handle_info']
            vf = '%s:%s:%s.%s' % (i['domain'], i['bus'], i['device'],
                                  i['function'])
            wanted[arq['attach_handle_uuid']] = (vf, i['asked_type'])
        assert len({vf for vf, _ in wanted.values()}) == 4, wanted
        mdevs = {}
        for link in devices.glob('*/*/mdev_type'):
            mdevs[link.parent.name] = (link.parent.parent.name,
                                       os.path.basename(os.readlink(link)))
        assert mdevs == wanted
        assert proc.stop() == 0, proc.logs()


def test_aio_h200_dc_demo_whole_gpu_and_no_vgpu(aio):
    """Two fake H200s on the data-center driver: a whole H200 boots for a
    VM; a vGPU profile gets no allocation candidate.
    """
    proc = aio(demo=True, host_spec=os.path.join(FAKE_HOSTS, 'h200-dc.yaml'))
    out = proc.read_until(r'^demo: \d+ of \d+ instance\(s\) booted')
    assert 'demo: 1 of 1 instance(s) booted' in out, out + proc.logs()
    assert 'with h200-vgpu-1g-18gb refused, as it must be' in out, out
    [arq] = aio_common.demo_arqs(proc.api)
    assert arq['device_profile_name'] == 'h200-whole'
    assert arq['attach_handle_type'] == 'PCI'
    assert arq['attach_handle_info']['function'] == '0'
    assert arq['attach_handle_info']['restore_driver'] == 'nvidia'
    assert proc.stop() == 0, proc.logs()
    # The passed-through H200 is fenced while its instance holds it,
    # without Placement logging it over capacity; the refused vGPU is the
    # demo's point, not a warning.
    assert proc.stderr_lines() == [], proc.logs()
