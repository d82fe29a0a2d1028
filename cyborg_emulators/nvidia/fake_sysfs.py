# SPDX-License-Identifier: Apache-2.0
"""A fake /sys for NVIDIA GPUs and a whole fake GPU host built from a spec.

Driver binding, SR-IOV and IOMMU state live in sysfs, not in NVML, so tests
need both faked consistently: FakeGpuHost writes the tree that
cyborg.drivers.nvidia.sysfs.Sysfs and cyborg.drivers.pci.scan() read, and
its FakeNvml only enumerates GPUs whose driver symlink points at `nvidia`.

Host spec (YAML-friendly)::

    nvidia:
      driver_version: "580.159.04"   # optional, else the model file's
      iommu: true
      gpus:
        - model: h200                # models/h200.json or a capture path
          pci_address: "0000:1b:00.0"
          uuid: GPU-...              # optional, uuid5 of the address
          numa_node: 0               # optional (sysfs -1 / NVML model)
          mig_mode: 1                # optional, default 0
          driver: nvidia             # nvidia | vfio-pci | none
          sriov_vfs: 16              # optional VFs enabled (default 0;
                                     # only with vgpu_manager)
          sriov_totalvfs: 16         # optional, default sriov_vfs
          iommu_group: 20            # optional, else allocated
          reset_method: "flr bus"    # optional sysfs reset_method; ""
                                     # for a function with no reset
          group_members:             # optional other functions of the
            - {address: "0000:1b:00.1", vendor: "0x10de",   # IOMMU group
               class: "0x040300", driver: snd_hda_intel}
          vgpu_manager:              # optional: a vGPU-Manager GPU whose
            layout: vfio             # VFs carry the vGPU types (vfio|mdev,
            heterogeneous: false     # see fake_vgpu); needs sriov_vfs
"""

import errno
import json
import os
import threading

from cyborg.common import pci
from cyborg.drivers.nvidia import privileged
from cyborg.drivers.nvidia import sysfs
from cyborg_emulators.nvidia import fake_nvml
from cyborg_emulators.nvidia import fake_vgpu
from cyborg_emulators.nvidia import sysfs_files as files

NVIDIA_VENDOR = '0x10de'
GPU_CLASS = '0x030200'  # 3D controller
DRIVERS = ('nvidia', 'vfio-pci')
FIRST_VF_OFFSET = 4  # PF 1b:00.0 -> VFs 1b:00.4 ... 1b:00.7, 1b:01.0 ...
# What `reset_method` lists for a data-center GPU that advertises
# function-level reset (PCIe DevCap FLReset+; bus reset as the fallback).
# An assumption until a capture says otherwise: a spec can set its own.
DEFAULT_RESET_METHOD = 'flr bus'


def vf_address(pf_address, index):
    """Address of VF `index` (0-based) of a PF, stride 1."""
    domain, bus, rest = pf_address.split(':')
    device, function = (int(x, 16) for x in rest.split('.'))
    n = device * 8 + function + FIRST_VF_OFFSET + index
    return '%s:%s:%02x.%d' % (domain, bus, n // 8, n % 8)


class _Tree:
    """Paths and link edits of one fake sysfs root."""

    def __init__(self, root):
        self.root = root
        self.devices = os.path.join(root, 'bus', 'pci', 'devices')
        self.drivers = os.path.join(root, 'bus', 'pci', 'drivers')
        self.groups = os.path.join(root, 'kernel', 'iommu_groups')
        self.probe = os.path.join(root, 'bus', 'pci', 'drivers_probe')

    def dev(self, address, *parts):
        return os.path.join(self.devices, address, *parts)

    def add_driver(self, name):
        path = os.path.join(self.drivers, name)
        os.makedirs(path, exist_ok=True)
        for control in ('bind', 'unbind', 'new_id'):
            if not os.path.exists(os.path.join(path, control)):
                files.write(os.path.join(path, control), '')

    def has_driver(self, name):
        return bool(name) and os.path.isdir(os.path.join(self.drivers, name))

    def unbound(self, address):
        """An existing function that no driver holds."""
        return os.path.isdir(self.dev(address)) and not self.bound(address)

    def bound(self, address):
        try:
            return os.path.basename(os.readlink(self.dev(address, 'driver')))
        except OSError:
            return None

    def bind(self, address, driver):
        """Point <dev>/driver (and drivers/<drv>/<dev>) at `driver`."""
        current = self.bound(address)
        if current:
            os.unlink(self.dev(address, 'driver'))
            link = os.path.join(self.drivers, current, address)
            if os.path.lexists(link):
                os.unlink(link)
        if driver:
            files.symlink(os.path.join('..', '..', '..', 'bus', 'pci',
                                       'drivers', driver),
                          self.dev(address, 'driver'))
            files.symlink(os.path.join('..', '..', 'devices', address),
                          os.path.join(self.drivers, driver, address))

    def add_function(self, address, device_id, numa_node, driver, group,
                     vendor=NVIDIA_VENDOR, class_=GPU_CLASS,
                     reset_method=None):
        path = self.dev(address)
        os.makedirs(path)
        for name, value in (('vendor', vendor),
                            ('device', '0x%04x' % device_id),
                            ('class', class_),
                            ('numa_node', numa_node),
                            ('driver_override', '')):
            files.write(os.path.join(path, name), value)
        if reset_method:
            # The kernel creates `reset` only for a function with a reset
            # method and lists the methods in `reset_method` (Linux
            # Documentation/ABI/testing/sysfs-bus-pci).
            files.write(os.path.join(path, 'reset'), '')
            files.write(os.path.join(path, 'reset_method'), reset_method)
        if driver and driver != 'none':
            self.add_driver(driver)
            self.bind(address, driver)
        if group is not None:
            members = os.path.join(self.groups, str(group), 'devices')
            os.makedirs(members, exist_ok=True)
            files.symlink(os.path.join('..', '..', '..', 'kernel',
                                       'iommu_groups', str(group)),
                          os.path.join(path, 'iommu_group'))
            files.symlink(os.path.join('..', '..', '..', '..', 'bus', 'pci',
                                       'devices', address),
                          os.path.join(members, address))

    def add_vfs(self, pf, vfs, total, device_id, numa_node, groups):
        files.write(self.dev(pf, 'sriov_totalvfs'), total)
        files.write(self.dev(pf, 'sriov_numvfs'), len(vfs))
        for i, vf in enumerate(vfs):
            self.add_function(vf, device_id, numa_node, 'nvidia',
                              next(groups))
            files.symlink(os.path.join('..', vf), self.dev(pf, 'virtfn%d' % i))
            files.symlink(os.path.join('..', pf), self.dev(vf, 'physfn'))


class FakeSysfs(sysfs.Sysfs):
    """Sysfs over a fake tree.  rebind() and reset() run the base class
    unchanged, through the privsep entrypoints; this object is the fake
    kernel behind them (write(), registered with privileged.simulate by
    FakeGpuHost.install), and driver() shows the result.

    holds(address) says whether something keeps the GPU open in the
    nvidia driver (the fake NVML's session, persistence mode): an unbind
    from nvidia then blocks until wait_released(address) returns, as the
    driver's remove does (see FakeNvml.holds).  on_reset(address) plays a
    PCI reset of the function.  on_unbound(address) tells the fake NVML
    that a GPU left the nvidia driver (Hopper then loses its MIG mode).
    """

    def __init__(self, root, holds=None, wait_released=None,
                 on_reset=None, on_unbound=None):
        super().__init__(root)
        self._tree = _Tree(root)
        self.rebinds = []  # (address, from driver, to driver) per call
        self.vgpu_managers = []  # fake_vgpu.VgpuManager of vGPU GPUs
        self.refuse_bind = set()  # addresses whose probe fails
        self.blocked_unbinds = []  # addresses whose unbind had to wait
        self.resets = []  # addresses reset, in order
        self.writes = []  # (path relative to the root, value) applied
        self.holds = holds or (lambda address: False)
        self.wait_released = wait_released or (lambda address: True)
        self.on_reset = on_reset
        self.on_unbound = on_unbound
        # The kernel applies control-file writes atomically; here several
        # threads (NVML visibility checks, the health monitor, a rebind)
        # may settle the tree at once.
        self._settling = threading.RLock()

    def rebind(self, address, driver, timeout=None):
        address = pci.normalize_address(address)
        self.rebinds.append((address, self.driver(address), driver))
        if driver and not self._tree.has_driver(driver):
            raise sysfs.RebindError('Unknown driver %s for %s'
                                    % (driver, address))
        super().rebind(address, driver, timeout)

    def write(self, path, value):
        """The kernel's side of one control-file write (the privsep
        entrypoints call it for a simulated root).
        """
        parts = os.path.relpath(path, self.root).split(os.sep)
        if parts[:3] == ['bus', 'pci', 'drivers'] and parts[3:] == [
                'nvidia', 'unbind'] and self.holds(value):
            self.blocked_unbinds.append(value)
            self.wait_released(value)
        with self._settling:
            self.writes.append(('/'.join(parts), value))
            if parts[:3] == ['bus', 'pci', 'devices'] and \
                    parts[4:] == ['reset']:
                if not os.path.exists(path):
                    raise OSError(errno.ENOTTY, 'no reset method')
                self.resets.append(parts[3])
                if self.on_reset is not None:
                    self.on_reset(parts[3])
                return
            files.write(path, value)
            self._settle()

    def gpu_reset(self, address):
        """The kernel's side of nvidia-smi --gpu-reset: refused while
        anything holds the GPU (nvidia-smi(1), --gpu-reset: no process
        and no persistence may hold it), and only for a GPU on the nvidia
        driver.
        """
        if self._tree.bound(address) != 'nvidia':
            raise OSError(errno.ENODEV, '%s is not on the nvidia driver'
                          % address)
        if self.holds(address):
            raise OSError(errno.EBUSY, 'GPU %s is currently in use'
                          % address)
        with self._settling:
            self.resets.append(address)
            if self.on_reset is not None:
                self.on_reset(address)

    def driver(self, address):
        with self._settling:
            self._settle()
            return super().driver(address)

    def vf_vgpu(self, address):
        with self._settling:
            self.settle_vgpu()
            return super().vf_vgpu(address)

    def vfs_vgpu(self, addresses):
        with self._settling:
            self.settle_vgpu()
            return {a: sysfs.Sysfs.vf_vgpu(self, a) for a in addresses}

    def settle_vgpu(self):
        """Apply writes to the VFs' vGPU files and show what the vGPU
        Manager allows now (it depends on NVML's MIG state too).
        """
        with self._settling:
            for manager in self.vgpu_managers:
                fake_vgpu.settle(self._tree.devices, manager)

    def _settle(self):
        """Apply pending unbind/bind/drivers_probe writes, kernel-like."""
        tree = self._tree
        names = sorted(os.listdir(tree.drivers)) \
            if os.path.isdir(tree.drivers) else []
        for name in names:
            address = files.take(os.path.join(tree.drivers, name, 'unbind'))
            if address and tree.bound(address) == name:
                tree.bind(address, None)
                if name == 'nvidia' and self.on_unbound is not None:
                    self.on_unbound(address)
        for name in names:
            address = files.take(os.path.join(tree.drivers, name, 'bind'))
            if address and tree.unbound(address):
                tree.bind(address, name)
        address = files.take(tree.probe)
        if address and tree.unbound(address) and \
                address not in self.refuse_bind:
            wanted = (files.read(tree.dev(address, 'driver_override'))
                      or 'nvidia')
            if tree.has_driver(wanted):
                tree.bind(address, wanted)


def _refuse_unreal(gpu):
    """Refuse a GPU spec that no real host is in. Every GPU modelled here
    (models/: A100, H100, H200) is Ampere or later, where the vGPU
    Manager runs the GPU through SR-IOV (contract gpu-to-vm.md §1-§2).
    """
    address = gpu['pci_address']
    if 'vgpu_types' in gpu or 'mdevs' in gpu:
        # vGPU types, and the mdevs made of them, sit on the VFs only;
        # the physical function offers none (§2).
        raise ValueError(
            'GPU %s: %s on the physical function are not modelled: on '
            'Ampere and Hopper the vGPU Manager offers vGPU types, and '
            'mdevs are created, on the SR-IOV VFs only (contract '
            'gpu-to-vm.md §2); give the GPU a vgpu_manager section (layout '
            'mdev for mdevs) and sriov_vfs, and create an mdev on a VF '
            'with FakeGpuHost.create_mdev as Nova\'s libvirt driver does'
            % (address, 'vGPU types' if 'vgpu_types' in gpu else 'mdevs'))
    if int(gpu.get('sriov_vfs', 0)) and gpu.get('vgpu_manager') is None:
        # A data-center-driver host has no VFs of its GPUs: only NVIDIA's
        # sriov-manage, part of the vGPU Manager, enables them (§1).
        raise ValueError(
            'GPU %s: SR-IOV VFs without the vGPU Manager are not '
            'modelled: on a data-center-driver host the GPU\'s VFs stay '
            'disabled, only the vGPU Manager\'s sriov-manage enables them '
            '(contract gpu-to-vm.md §1); give the GPU a vgpu_manager '
            'section or no sriov_vfs' % address)


class FakeGpuHost:
    """A fake sysfs tree under `root` plus a FakeNvml that sees only GPUs
    bound to `nvidia`.  With `state_file`, NVML state is loaded at install
    and saved after every change, so it survives an agent restart.

    `proc_root` (default: `proc` beside `root`) is a fake procfs holding
    only what the agent reads there: /proc/<pid>/fd links, e.g. a VM's
    QEMU holding /dev/vfio/<group> (hold_vfio_group).
    """

    def __init__(self, spec, root, state_file=None, proc_root=None):
        section = spec.get('nvidia', spec)
        self.spec = spec
        self.root = root
        self.proc_root = proc_root or os.path.join(
            os.path.dirname(os.path.abspath(root)), 'proc')
        self.state_file = state_file
        self.iommu = section.get('iommu', True)
        self.gpus = [dict(g) for g in section.get('gpus', [])]
        for gpu in self.gpus:
            gpu['pci_address'] = pci.normalize_address(gpu['pci_address'])
            _refuse_unreal(gpu)
        self.nvml = fake_nvml.FakeNvml(
            self.gpus, driver_version=section.get('driver_version'),
            visible=self._bound_to_nvidia,
            on_change=self._save if state_file else None)
        self._build()
        self.sysfs = FakeSysfs(root, holds=self.nvml.holds,
                               wait_released=self.nvml.wait_released,
                               on_reset=self._reset,
                               on_unbound=self.nvml.driver_unbound)
        self.sysfs.vgpu_managers = self.vgpu_managers()
        if not self._saved():
            self.sysfs.settle_vgpu()

    def vgpu_managers(self):
        """The fake vGPU Manager of each vGPU GPU (fake_vgpu)."""
        return [g.vgpu for g in self.nvml._gpus if g.vgpu is not None]

    def create_mdev(self, vf, type_name, mdev_uuid):
        """What Nova's libvirt driver does for an MDEV ARQ: write the
        UUID to the VF's type `create` file; True when the mdev exists.
        """
        tree = _Tree(self.root)
        files.write(tree.dev(vf, 'mdev_supported_types', type_name,
                             'create'), mdev_uuid)
        self.sysfs.settle_vgpu()
        return os.path.isdir(tree.dev(vf, mdev_uuid))

    def reboot(self):
        """A host reboot: NVML's (FakeNvml.reboot: GPU instances gone,
        Hopper's MIG mode off, no VF keeps its vGPU type) and the VFs'
        vGPU files showing it (fake_vgpu.reboot).
        """
        self.nvml.reboot()
        with self.sysfs._settling:
            for manager in self.vgpu_managers():
                fake_vgpu.reboot(self.sysfs._tree.devices, manager)

    def remove_mdev(self, vf, mdev_uuid):
        tree = _Tree(self.root)
        files.write(tree.dev(vf, mdev_uuid, 'remove'), '1')
        self.sysfs.settle_vgpu()

    def _build(self):
        """Create missing functions; existing ones keep their binding."""
        tree = _Tree(self.root)
        # procfs: PID directories, and entries that are not processes.
        os.makedirs(os.path.join(self.proc_root, 'self'), exist_ok=True)
        os.makedirs(os.path.join(self.proc_root, '1', 'fd'), exist_ok=True)
        os.makedirs(tree.devices, exist_ok=True)
        for name in DRIVERS:
            tree.add_driver(name)
        if not os.path.exists(tree.probe):
            files.write(tree.probe, '')
        groups = self._group_numbers()
        for gpu, info in zip(self.gpus, self.nvml.gpu_info()):
            address = gpu['pci_address']
            if os.path.isdir(tree.dev(address)):
                continue
            numa = gpu.get('numa_node')
            numa = -1 if numa is None else numa
            group = gpu['iommu_group'] if self.iommu and \
                'iommu_group' in gpu else next(groups)
            tree.add_function(address, info['pci_device_id'], numa,
                              gpu.get('driver', 'nvidia'), group,
                              reset_method=gpu.get('reset_method',
                                                   DEFAULT_RESET_METHOD))
            for member in gpu.get('group_members') or ():
                tree.add_function(
                    pci.normalize_address(member['address']),
                    int(member.get('device', '0x0'), 16), numa,
                    member.get('driver'), group,
                    vendor=member.get('vendor', NVIDIA_VENDOR),
                    class_=member.get('class', GPU_CLASS))
            vfs = int(gpu.get('sriov_vfs', 0))
            total = int(gpu.get('sriov_totalvfs', vfs))
            if total:
                tree.add_vfs(address, [vf_address(address, i)
                                       for i in range(vfs)], total,
                             info['pci_device_id'], numa, groups)
        for gpu, fake in zip(self.gpus, self.nvml._gpus):
            if fake.vgpu is not None:
                fake.vgpu.vfs = [vf_address(gpu['pci_address'], i)
                                 for i in range(int(gpu.get('sriov_vfs',
                                                            0)))]

    def _group_numbers(self):
        """IOMMU group numbers not claimed by the spec, ascending (None
        for ever without an IOMMU).
        """
        used = {g['iommu_group'] for g in self.gpus if 'iommu_group' in g}
        n = 0
        while True:
            if not self.iommu:
                yield None
            elif n not in used:
                yield n
            n += 1

    def hold_vfio_group(self, pid, group, fd=20):
        """Process `pid` opens /dev/vfio/<group> (QEMU does for a GPU it
        passes through), as /proc/<pid>/fd/<fd> shows.
        """
        fds = os.path.join(self.proc_root, str(pid), 'fd')
        os.makedirs(fds, exist_ok=True)
        files.symlink('/dev/vfio/%d' % group, os.path.join(fds, str(fd)))

    def release_vfio_group(self, pid):
        """Process `pid` exits."""
        fds = os.path.join(self.proc_root, str(pid), 'fd')
        for name in os.listdir(fds):
            os.unlink(os.path.join(fds, name))
        os.rmdir(fds)
        os.rmdir(os.path.dirname(fds))

    def _reset(self, address):
        """A PCI reset of a GPU: its MIG instances, processes and faults
        go (the fake NVML's GPU reset).
        """
        for info in self.nvml.gpu_info():
            if info['pci_address'] == address:
                self.nvml.reset_gpu(info['uuid'])

    def _saved(self):
        return bool(self.state_file and os.path.exists(self.state_file))

    def _bound_to_nvidia(self, address):
        return self.sysfs.driver(address) == 'nvidia'

    def _save(self, state):
        tmp = '%s.tmp.%d' % (self.state_file, os.getpid())
        with open(tmp, 'w') as f:
            json.dump(state, f, indent=1, sort_keys=True)
        os.replace(tmp, self.state_file)

    def install(self):
        """Serve NVML from the fake, and let every Sysfs opened on this
        root (sysfs.for_root) act on the fake tree.
        """
        if self._saved():
            with open(self.state_file) as f:
                self.nvml.load_state(json.load(f))
            # The VFs' vGPU types are in the kept tree: the vGPU Manager
            # takes them again once the GPU instances they sit on are
            # back (an agent restart is no host reboot).
            self.sysfs.settle_vgpu()
        self.nvml.install()
        sysfs.register_simulated(self.root, self.sysfs)
        privileged.simulate(self.root, self.sysfs)
        return self

    def uninstall(self):
        privileged.unsimulate(self.root)
        sysfs.unregister_simulated(self.root)
        self.nvml.uninstall()

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.uninstall()

    def to_state(self):
        return self.nvml.to_state()

    def load_state(self, state):
        self.nvml.load_state(state)
