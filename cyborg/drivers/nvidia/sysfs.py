# SPDX-License-Identifier: Apache-2.0
"""What the kernel says about a PCI function: the authoritative source for
driver binding, SR-IOV and IOMMU state, none of which NVML knows.

`Sysfs(root)` reads a tree laid out like /sys; its writes (driver
binding, PCI reset) go through the privsep daemon (privileged). Tests
point it at a fake tree (cyborg_emulators.nvidia.fake_sysfs) whose fake
kernel applies those writes by moving symlinks.
"""

import os
import re

from cyborg.common import pci
from cyborg.conf import CONF
from cyborg.drivers.nvidia import privileged
from cyborg.drivers import pci as pci_driver

_UUID = re.compile(r'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                   r'[0-9a-f]{12}$')
NVIDIA_VENDOR = '10de'
DISPLAY_CLASS = '03'


# Trees that are not the kernel's (cyborg-aio's fake GPUs): root → the
# Sysfs object that knows how to act on them.
_SIMULATED = {}


class RebindError(Exception):
    pass


class VgpuError(Exception):
    pass


# A creatable_vgpu_types line: "1414 : NVIDIA H200X-1-18C".
_VGPU_TYPE_LINE = re.compile(r'^\s*([0-9]+)\s*:\s*(.+?)\s*$')
_MDEV_TYPE = re.compile(r'^nvidia-([0-9]+)$')


def _mdev_type_id(name):
    m = _MDEV_TYPE.match(name or '')
    return int(m.group(1)) if m else None


def for_root(root):
    """The Sysfs for a root: the kernel's, or a registered simulation."""
    return _SIMULATED.get(root) or Sysfs(root)


def register_simulated(root, sysfs):
    _SIMULATED[root] = sysfs


def unregister_simulated(root):
    _SIMULATED.pop(root, None)


class Sysfs:

    def __init__(self, root='/sys'):
        self.root = root

    def _dev(self, address, *parts):
        return os.path.join(self.root, 'bus', 'pci', 'devices', address,
                            *parts)

    def nvidia_gpus(self):
        """Every NVIDIA display-class function: PFs and VFs, whatever
        driver holds them (a vfio-pci GPU is invisible to NVML).
        """
        out = []
        for function in pci_driver.scan(self.root):
            if (function['vendor'] == NVIDIA_VENDOR
                    and function['class'].startswith(DISPLAY_CLASS)):
                function.update(self.sriov(function['address']))
                out.append(function)
        return out

    def sriov(self, address):
        """{'vfs': [addresses], 'sriov_totalvfs': n, 'physfn': addr|None}."""
        path = self._dev(address)
        vfs = []
        try:
            names = os.listdir(path)
        except OSError:
            names = []
        for name in sorted(names, key=lambda n: (len(n), n)):
            if name.startswith('virtfn'):
                target = os.path.basename(os.readlink(os.path.join(path,
                                                                   name)))
                vfs.append(pci.normalize_address(target))
        physfn = None
        if 'physfn' in names:
            physfn = pci.normalize_address(os.path.basename(
                os.readlink(os.path.join(path, 'physfn'))))
        total = _read_int(os.path.join(path, 'sriov_totalvfs'))
        return {'vfs': vfs, 'sriov_totalvfs': total or 0, 'physfn': physfn,
                'mdevs': self.mdevs(address)}

    def mdevs(self, address):
        """UUIDs of the mediated devices carved out of a function."""
        path = self._dev(address)
        try:
            names = os.listdir(path)
        except OSError:
            return []
        return sorted(n for n in names if _UUID.match(n) and os.path.exists(
            os.path.join(path, n, 'mdev_type')))

    def _vf_mdev_types(self, address):
        """[{type, name, description, available_instances}] of the vGPU
        types a VF of a vGPU-Manager GPU offers in the mdev layout (its
        mdev_supported_types); [] for any other function. On Ampere and
        Hopper the vGPU Manager offers vGPU types on the VFs, never on
        the PF (contract gpu-to-vm.md §2): only vf_vgpu() reads them.
        """
        path = self._dev(address, 'mdev_supported_types')
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return []
        out = []
        for name in names:
            entry = {'type': name}
            for key in ('name', 'description', 'available_instances'):
                try:
                    with open(os.path.join(path, name, key)) as f:
                        entry[key] = f.read().strip()
                except OSError:
                    entry[key] = ''
            out.append(entry)
        return out

    def vf_vgpu(self, address):
        """The vGPU Manager's view of one VF (contract gpu-to-vm.md §2):
        {'layout': 'vfio' | 'mdev' | None, 'types': {id: name} (vfio: the
        types creatable now; mdev: every supported type), 'available':
        {id: bool} (creatable now), 'current': the configured type id
        (vfio; 0 = none), 'mdevs': {uuid: type id} (mdev)}.
        """
        out = {'layout': None, 'types': {}, 'available': {}, 'current': 0,
               'mdevs': {}}
        creatable = self._dev(address, 'nvidia', 'creatable_vgpu_types')
        if os.path.exists(creatable):
            out['layout'] = 'vfio'
            with open(creatable) as f:
                for line in f:
                    m = _VGPU_TYPE_LINE.match(line)
                    if m:
                        out['types'][int(m.group(1))] = m.group(2)
            out['available'] = dict.fromkeys(out['types'], True)
            out['current'] = _read_int(self._dev(
                address, 'nvidia', 'current_vgpu_type')) or 0
            return out
        types = self._vf_mdev_types(address)
        if not types:
            return out
        out['layout'] = 'mdev'
        for entry in types:
            type_id = _mdev_type_id(entry['type'])
            if type_id is None:
                continue
            out['types'][type_id] = entry['name']
            out['available'][type_id] = (entry['available_instances']
                                         not in ('', '0'))
        for mdev in self.mdevs(address):
            target = os.readlink(self._dev(address, mdev, 'mdev_type'))
            out['mdevs'][mdev] = _mdev_type_id(os.path.basename(target))
        return out

    def vfs_vgpu(self, addresses):
        """{VF: vf_vgpu(VF)} of several VFs."""
        return {address: self.vf_vgpu(address) for address in addresses}

    def set_vgpu_type(self, address, type_id):
        """Configure a VF with a vGPU type (vfio layout; 0 clears it) and
        check that the vGPU Manager took it.
        """
        try:
            privileged.set_vgpu_type(self.root, address, int(type_id),
                                     CONF.nvidia.rebind_timeout)
        except privileged.PrivilegedError as e:
            raise VgpuError('Writing vGPU type %s to VF %s failed: %s'
                            % (type_id, address, e))
        now = self.vf_vgpu(address)['current']
        if now != type_id:
            raise VgpuError('VF %s has vGPU type %s after writing %s (the '
                            'vGPU Manager refused it)'
                            % (address, now or 'none', type_id))

    def driver(self, address):
        try:
            return os.path.basename(os.readlink(self._dev(address, 'driver')))
        except OSError:
            return None

    def iommu_enabled(self):
        """IOMMU groups exist only when the kernel runs with an IOMMU."""
        try:
            return bool(os.listdir(os.path.join(self.root, 'kernel',
                                                'iommu_groups')))
        except OSError:
            return False

    def rebind(self, address, driver, timeout=None):
        """Hand the function to `driver` (None: leave it unbound) through
        the privsep daemon: driver_override, unbind, drivers_probe, each
        write bounded by `timeout` ([nvidia] rebind_timeout).
        """
        current = self.driver(address)
        if current == (driver or None):
            return
        try:
            privileged.rebind(self.root, address, driver or '',
                              timeout or CONF.nvidia.rebind_timeout)
        except privileged.PrivilegedError as e:
            raise RebindError('Could not rebind %s from %s to %s: %s'
                              % (address, current or 'no driver',
                                 driver or 'no driver', e))
        now = self.driver(address)
        if now != (driver or None):
            raise RebindError('%s is bound to %s after asking for %s'
                              % (address, now or 'no driver',
                                 driver or 'no driver'))

    def iommu_group(self, address):
        """The function's IOMMU group number, None without one."""
        try:
            return int(os.path.basename(os.readlink(
                self._dev(address, 'iommu_group'))))
        except (OSError, ValueError):
            return None

    def iommu_group_members(self, address):
        """[{address, vendor, class, driver}] of every function in the
        function's IOMMU group (itself included); [] without a group.
        """
        group = self.iommu_group(address)
        if group is None:
            return []
        path = os.path.join(self.root, 'kernel', 'iommu_groups', str(group),
                            'devices')
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return []
        out = []
        for name in names:
            member = pci.normalize_address(name)
            out.append({
                'address': member,
                'vendor': pci.normalize_id(_read(self._dev(member, 'vendor'))
                                           or '0'),
                'class': _read(self._dev(member, 'class')).lower().replace(
                    '0x', '').zfill(6),
                'driver': self.driver(member)})
        return out

    def can_reset(self, address):
        """The kernel offers a reset of the function (sysfs `reset`)."""
        return os.path.exists(self._dev(address, 'reset'))

    def reset(self, address, timeout=None):
        """Reset the function (the kernel's pci_reset_function: FLR where
        supported) through the privsep daemon; returns the reset methods
        the kernel listed.
        """
        try:
            return privileged.reset_function(
                self.root, address, timeout or CONF.nvidia.rebind_timeout)
        except privileged.PrivilegedError as e:
            raise RebindError('Could not reset %s: %s' % (address, e))

    def driver_reset(self, address, timeout=None):
        """The nvidia driver's GPU reset (nvidia-smi --gpu-reset) through
        the privsep daemon, for a function with no PCI reset.
        """
        try:
            privileged.driver_reset(
                self.root, address, timeout or CONF.nvidia.rebind_timeout)
        except privileged.PrivilegedError as e:
            raise RebindError('Could not reset %s: %s' % (address, e))


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ''


def _read_int(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return None
