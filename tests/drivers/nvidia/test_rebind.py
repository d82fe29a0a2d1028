# SPDX-License-Identifier: Apache-2.0
"""Whole-GPU rebinding and reset as a real host needs them, over the fake
NVML and sysfs: the unbind waits while NVML holds the GPU (so the agent
lets go first), every function of the IOMMU group moves or the bind is
refused naming the stranger, the VFIO driver follows the product, and
every privileged write goes through the privsep entrypoints."""

import json
import os

import fixtures
from oslo_privsep.test import fixture as privsep_fixture
import pytest

from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import privileged
from cyborg.drivers.nvidia import sysfs as sysfs_mod
from cyborg.objects import device as records
from tests.drivers.nvidia import conftest

GPU = '0000:1b:00.0'
AUDIO = '0000:1b:00.1'
STRANGER = '0000:1c:00.0'
PROFILES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                        os.pardir, 'etc', 'cyborg', 'device-profiles')


def whole():
    with open(os.path.join(PROFILES, 'h200-whole.json')) as f:
        return json.load(f)[0]['groups'][0]


def handle(info=None):
    return {'uuid': 'h-1', 'attach_type': 'PCI',
            'attach_info': json.dumps(info or records.pci_info(GPU)),
            'request_group': whole()}


@pytest.fixture
def make_host(install_host):
    def make(**gpu):
        host = install_host({'iommu': True, 'gpus': [dict(
            {'model': 'h200', 'pci_address': GPU, 'driver': 'nvidia',
             'iommu_group': 7}, **gpu)]})
        CONF.set_override('rebind_for_passthrough', True, group='nvidia')
        return host
    return make


def new_driver(host):
    drv = conftest.new_driver(host)
    drv.discover()
    return drv


@pytest.fixture
def calls(monkeypatch):
    """The privsep entrypoints called, by name (they still run)."""
    seen = []
    for name in ('rebind', 'reset_function', 'driver_reset', 'set_vgpu_type',
                 'vfio_group_holders', 'share_handles', 'set_mig_mode',
                 'create_gpu_instance', 'destroy_gpu_instance',
                 'set_persistence_mode'):
        real = getattr(privileged, name)
        assert privileged.context.is_entrypoint(real)

        def spy(*args, _real=real, _name=name):
            seen.append(_name)
            return _real(*args)
        monkeypatch.setattr(privileged, name, spy)
    return seen


# Unbind ordering -----------------------------------------------------------

def test_unbind_waits_while_nvml_holds_the_gpu(make_host):
    """The fake plays nv-pci.c: the nvidia driver's remove waits for its
    usage count; a write that does not finish is bounded by the timeout.
    """
    host = make_host()
    host.nvml.set_persistence_mode(host.nvml.gpu_info()[0]['uuid'], False)
    session = nvml.PynvmlBackend()
    session.open()                                  # someone holds NVML
    with pytest.raises(sysfs_mod.RebindError,
                       match='unbind did not finish within 0.2s'):
        host.sysfs.rebind(GPU, 'vfio-pci', timeout=0.2)
    assert host.sysfs.blocked_unbinds == [GPU]
    session.close()                                 # the remove proceeds
    host.sysfs.rebind(GPU, 'vfio-pci')
    assert host.sysfs.driver(GPU) == 'vfio-pci'


def test_persistence_mode_also_holds_the_gpu(make_host):
    host = make_host()
    assert host.nvml.holds(GPU)                     # captured: mode on
    with pytest.raises(sysfs_mod.RebindError, match='did not finish'):
        host.sysfs.rebind(GPU, 'vfio-pci', timeout=0.2)


def test_driver_lets_go_of_nvml_and_persistence_before_the_unbind(
        make_host, calls):
    host = make_host()
    drv = new_driver(host)
    drv.health.watch([g.uuid for g in drv.backend.gpus()])  # an event set
    info = drv.prepare(GPU, handle())
    assert host.sysfs.blocked_unbinds == []         # it never had to wait
    assert host.sysfs.driver(GPU) == 'vfio-pci'
    assert info['restore_persistence'] is True
    assert calls == ['set_persistence_mode', 'rebind']
    # NVML is open again afterwards (the GPU is simply not listed).
    assert drv.backend.gpus() == []
    drv.release(GPU, handle(dict(records.pci_info(GPU), **info)))
    assert host.sysfs.driver(GPU) == 'nvidia'
    assert calls[2:] == ['rebind', 'set_persistence_mode']
    assert drv.backend.persistence_mode(drv.backend.gpus()[0].uuid)


# IOMMU group ---------------------------------------------------------------

def test_the_gpus_own_functions_move_with_it_and_come_back(make_host):
    host = make_host(group_members=[
        {'address': AUDIO, 'vendor': '0x10de', 'class': '0x040300',
         'driver': 'snd_hda_intel'},
        {'address': '0000:1a:00.0', 'vendor': '0x10de', 'class': '0x060400',
         'driver': 'pcieport'}])
    drv = new_driver(host)
    info = drv.prepare(GPU, handle())
    assert info['restore_group'] == {AUDIO: 'snd_hda_intel'}
    assert host.sysfs.driver(AUDIO) == 'vfio-pci'
    assert host.sysfs.driver('0000:1a:00.0') == 'pcieport'  # a bridge
    drv.release(GPU, handle(dict(records.pci_info(GPU), **info)))
    assert host.sysfs.driver(AUDIO) == 'snd_hda_intel'
    assert host.sysfs.driver(GPU) == 'nvidia'


def test_a_stranger_in_the_iommu_group_refuses_the_bind(make_host, calls):
    host = make_host(group_members=[
        {'address': STRANGER, 'vendor': '0x8086', 'class': '0x020000',
         'driver': 'ice'}])
    drv = new_driver(host)
    with pytest.raises(base.PrepareError) as e:
        drv.prepare(GPU, handle())
    assert ('0000:1c:00.0 (vendor 8086, class 020000, on ice) shares IOMMU '
            'group 7 and is not ours to move') in str(e.value)
    assert calls == []                              # nothing touched
    assert host.sysfs.driver(GPU) == 'nvidia'


def test_another_gpu_in_the_group_is_not_taken(make_host):
    host = make_host(group_members=[
        {'address': STRANGER, 'vendor': '0x10de', 'class': '0x030200',
         'driver': 'nvidia'}])
    drv = new_driver(host)
    with pytest.raises(base.PrepareError, match='0000:1c:00.0 .* is not '
                       'ours to move'):
        drv.prepare(GPU, handle())


# The VFIO driver per product -----------------------------------------------

def test_products_listed_get_their_variant_driver(make_host, tmp_path):
    host = make_host()
    product = '%04x' % host.nvml.gpu_info()[0]['pci_device_id']
    CONF.set_override('passthrough_drivers',
                      {product: 'nvgrace-gpu-vfio-pci'}, group='nvidia')
    drv = new_driver(host)
    with pytest.raises(base.PrepareError, match='Unknown driver '
                       'nvgrace-gpu-vfio-pci'):
        drv.prepare(GPU, handle())
    os.makedirs(os.path.join(host.root, 'bus', 'pci', 'drivers',
                             'nvgrace-gpu-vfio-pci'))
    drv.prepare(GPU, handle())
    assert host.sysfs.driver(GPU) == 'nvgrace-gpu-vfio-pci'
    [device] = drv.discover()
    assert device.observations['mode'] == 'Passthrough'


def test_gh200_defaults_to_nvgrace_gpu_vfio_pci():
    from cyborg.drivers.nvidia import passthrough
    assert passthrough.vfio_driver('2342') == 'nvgrace-gpu-vfio-pci'
    assert passthrough.vfio_driver('2345') == 'nvgrace-gpu-vfio-pci'
    assert passthrough.vfio_driver('2335') == 'vfio-pci'


# Reclaim and reset -----------------------------------------------------------

def test_reset_goes_through_privsep_in_order(make_host, calls):
    host = make_host(mig_mode=1)
    uuid = host.nvml.gpu_info()[0]['uuid']
    host.nvml.create_gi(uuid, 9, 4)
    drv = new_driver(host)
    done = drv.reclaim(GPU)
    assert done.startswith('destroyed GPU instance')
    assert 'unbound from nvidia; PCI reset (flr bus); returned from no ' \
        'driver to nvidia' in done
    assert calls == ['vfio_group_holders', 'destroy_gpu_instance',
                     'set_persistence_mode', 'rebind', 'reset_function',
                     'rebind', 'set_persistence_mode']
    assert host.sysfs.resets == [GPU]
    assert host.sysfs.blocked_unbinds == []
    assert host.sysfs.driver(GPU) == 'nvidia'


def test_without_a_pci_reset_the_nvidia_driver_resets(make_host, calls):
    host = make_host(reset_method='')
    drv = new_driver(host)
    done = drv.reclaim(GPU)
    assert 'GPU reset by the nvidia driver' in done
    assert 'driver_reset' in calls and 'reset_function' not in calls
    assert host.sysfs.resets == [GPU]
    assert host.sysfs.driver(GPU) == 'nvidia'


def test_reclaim_checks_occupancy_before_touching_anything(make_host,
                                                           calls):
    host = make_host(driver='vfio-pci')
    host.hold_vfio_group(31337, 7)
    drv = new_driver(host)
    with pytest.raises(base.Busy) as e:
        drv.reclaim(GPU)
    assert e.value.reason == 'Busy'
    assert '31337 hold /dev/vfio/7' in str(e.value)
    assert calls == ['vfio_group_holders']
    assert host.sysfs.driver(GPU) == 'vfio-pci'
    assert host.sysfs.resets == []


# The entrypoints themselves -------------------------------------------------

@pytest.mark.parametrize('args', [
    ('relative/sys', GPU, 'vfio-pci', 1),
    ('/sys/../etc', GPU, 'vfio-pci', 1),
    (None, '../../etc/passwd', 'vfio-pci', 1),
    (None, GPU, '../evil', 1),
    (None, GPU, 'vfio-pci; rm -rf /', 1)])
def test_rebind_entrypoint_accepts_only_kernel_spellings(make_host, args):
    host = make_host()
    args = (args[0] or host.root,) + args[1:]
    with pytest.raises(privileged.PrivilegedError):
        privileged.rebind(*args)
    assert host.sysfs.driver(GPU) == 'nvidia'


def test_vfio_scan_skips_exited_processes_and_non_pids(make_host):
    host = make_host()
    host.hold_vfio_group(100, 7)
    host.hold_vfio_group(200, 8)
    os.makedirs(os.path.join(host.proc_root, '300'))   # exited: no fd/
    assert privileged.vfio_group_holders(host.proc_root, 7) == [100]
    with pytest.raises(privileged.PrivilegedError):
        privileged.vfio_group_holders(host.proc_root, -1)


def _environ(host, pid, *items):
    path = os.path.join(host.proc_root, str(pid))
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, 'environ'), 'wb') as f:
        f.write(b''.join(item + b'\0' for item in items))


def test_share_handles_read_one_variable_of_each_process(make_host):
    """The share handle each MPS client carries, in the order asked;
    None for a process without one, one that exited and one whose
    environ cannot be read.
    """
    host = make_host()
    _environ(host, 4001, b'PATH=/usr/bin', b'CYBORG_SHARE_HANDLE=h-1',
             b'SECRET=x')
    _environ(host, 4002, b'PATH=/usr/bin')
    _environ(host, 4003, b'CYBORG_SHARE_HANDLE=')
    os.makedirs(os.path.join(host.proc_root, '4004', 'environ'))
    assert privileged.share_handles(host.proc_root,
                                    [4002, 4001, 4003, 4004, 4005]) == [
        None, 'h-1', None, None, None]
    assert privileged.share_handles(host.proc_root, []) == []


@pytest.mark.parametrize('args', [
    ('relative/proc', [4001]),
    (None, 4001),
    (None, [-1]),
    (None, [0]),
    (None, [True]),
    (None, ['4001/../../etc'])])
def test_share_handles_entrypoint_accepts_only_pids(make_host, args):
    host = make_host()
    with pytest.raises(privileged.PrivilegedError):
        privileged.share_handles(args[0] or host.proc_root, args[1])


def test_entrypoints_answer_through_a_real_privsep_daemon(make_host):
    """The same entrypoints across oslo.privsep's channel (a forked
    daemon, unprivileged): arguments and answers survive serialization.
    """
    host = make_host()
    host.hold_vfio_group(4242, 7)
    privileged.context.set_client_mode(True)
    with fixtures.Fixture() as holder:
        holder.useFixture(privsep_fixture.UnprivilegedPrivsepFixture(
            privileged.context, {}))
        assert list(privileged.vfio_group_holders(host.proc_root, 7)) == [
            4242]
        _environ(host, 4242, b'CYBORG_SHARE_HANDLE=h-7')
        assert list(privileged.share_handles(host.proc_root,
                                             [4242, 4243])) == ['h-7', None]
        with pytest.raises(Exception, match='not a PCI address'):
            privileged.rebind(host.root, 'nope', 'vfio-pci', 1)


def test_mig_changes_go_through_privsep(make_host, calls):
    host = make_host(mig_mode=0)
    drv = new_driver(host)
    with open(os.path.join(PROFILES, 'h200-mig-1g-18gb.json')) as f:
        group = json.load(f)[0]['groups'][0]
    info = drv.prepare(GPU, dict(handle(), request_group=group))
    assert calls == ['set_mig_mode', 'create_gpu_instance']
    drv.release(GPU, handle(dict(records.pci_info(GPU), **info)))
    assert calls[2:] == ['destroy_gpu_instance']


def test_only_the_privsep_module_writes_or_changes_nvml():
    """Every privileged write of the nvidia driver is in privileged.py:
    no other module opens a file for writing, and the NVML changes
    (backend.direct_*) are called from there only.
    """
    here = os.path.dirname(privileged.__file__)
    mutators = ('nvmlDeviceSet', 'nvmlDeviceCreateGpuInstance',
                'nvmlGpuInstanceCreateComputeInstance',
                'nvmlGpuInstanceDestroy', 'nvmlComputeInstanceDestroy')
    for name in sorted(os.listdir(here)):
        if not name.endswith('.py'):
            continue
        with open(os.path.join(here, name)) as f:
            text = f.read()
        if name not in ('geometry_cache.py',     # the agent's own file
                        'privileged.py'):
            assert "'w')" not in text and '"w")' not in text, name
        if name == 'privileged.py':
            continue
        calls = [line.strip() for line in text.splitlines()
                 if '.direct_' in line]
        assert not calls, (name, calls)
        if name != 'backend.py':
            assert not any(m in text for m in mutators), name


def test_entrypoints_act_with_privileges_only_while_running(
        make_host, monkeypatch):
    """privileged.acting() is what a fake asks to refuse non-root callers
    (the fake kernel write runs in the entrypoint's worker thread, the
    proc scan in the caller's).
    """
    host = make_host()
    monkeypatch.setattr(os, 'geteuid', lambda: 1000)
    seen = []
    real = os.listdir

    def listdir(path):
        if path == host.proc_root:
            seen.append(privileged.acting())
        return real(path)
    monkeypatch.setattr(os, 'listdir', listdir)
    assert not privileged.acting()
    privileged.vfio_group_holders(host.proc_root, 7)
    assert seen == [True]
    assert not privileged.acting()
