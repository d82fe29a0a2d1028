# SPDX-License-Identifier: Apache-2.0
"""Whole-GPU passthrough: a request for every memory slice of a GPU's
provider takes the physical function's PCI handle and needs the GPU on a
VFIO driver: the one its product needs ([nvidia] passthrough_drivers,
e.g. nvgrace-gpu-vfio-pci for GH200), else [nvidia] passthrough_driver.

The driver rebinds it there only behind the safety gates and when
[nvidia] rebind_for_passthrough allows, the way the kernel wants it
(contract gpu-to-vm.md §4):

- nothing may be running on it and it may hold no MIG instances;
- every other function of its IOMMU group must go to VFIO too (a VM can
  only open a viable group): the GPU's own NVIDIA functions (audio,
  NVSwitch) move with it; bridges may stay; anything else means the GPU
  cannot be passed through safely, and the bind is refused naming it;
- the nvidia driver's unbind waits until nothing holds the GPU, so the
  agent lets go of NVML (its device files and event set) for the
  duration and turns persistence mode off first; each sysfs write is
  bounded by [nvidia] rebind_timeout;
- the writes themselves go through the privsep daemon (privileged).

unbind returns every moved function to the driver it came from and
persistence mode to what it was.
"""

from oslo_log import log

from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers.nvidia import resources
from cyborg.drivers.nvidia import sysfs as sysfs_mod

LOG = log.getLogger(__name__)

BRIDGE_CLASS = '0604'
# Drivers under which a group member does not keep a VFIO group from
# being viable (the kernel's vfio group check allows pci-stub besides
# VFIO drivers, and bridges whatever holds them).
STUB_DRIVERS = ('pci-stub',)


def is_whole(deployable_total, group):
    """A request for every memory slice of the provider is whole-GPU."""
    vector = resources.request_vector(group or {})
    return vector.get(resources.MEM_SLICE, deployable_total) \
        >= deployable_total


def vfio_driver(product_id):
    """The VFIO driver a GPU of this product is passed through on."""
    return (CONF.nvidia.passthrough_drivers.get((product_id or '').lower())
            or CONF.nvidia.passthrough_driver)


def vfio_drivers():
    """Every driver a GPU may be passed through on."""
    return {CONF.nvidia.passthrough_driver} | set(
        CONF.nvidia.passthrough_drivers.values())


def group_plan(sysfs, address):
    """(functions to move to VFIO with the GPU, [refusal]) for the GPU's
    IOMMU group.
    """
    members = sysfs.iommu_group_members(address)
    if not members:
        return [], ['it is in no IOMMU group']
    group = sysfs.iommu_group(address)
    moves, refusals = [], []
    allowed = vfio_drivers() | set(STUB_DRIVERS)
    for member in members:
        if member['address'] == address or \
                member['class'].startswith(BRIDGE_CLASS) or \
                member['driver'] is None or member['driver'] in allowed:
            continue
        if member['vendor'] == sysfs_mod.NVIDIA_VENDOR and not \
                member['class'].startswith(sysfs_mod.DISPLAY_CLASS):
            moves.append(member['address'])
        else:
            refusals.append(
                '%s (vendor %s, class %s, on %s) shares IOMMU group %s and '
                'is not ours to move' % (
                    member['address'], member['vendor'], member['class'],
                    member['driver'], group))
    return moves, refusals


class Passthrough:

    def __init__(self, state):
        self.state = state

    def prepare(self, gpu):
        """Put the GPU (and the rest of its IOMMU group) on VFIO; the
        attach info updates say what to restore at unbind. The caller
        holds the GPU's lock.
        """
        sysfs = self.state.sysfs
        target = vfio_driver(gpu.product_id)
        current = sysfs.driver(gpu.address)
        moves, refusals = group_plan(sysfs, gpu.address)
        if current == target and not moves and not refusals:
            return None
        blockers = self.rebind_blockers(gpu) + refusals
        if blockers:
            raise base.PrepareError(
                'GPU %s is bound to %s, not %s, and cannot be rebound: %s'
                % (gpu.address, current or 'no driver', target,
                   '; '.join(blockers)))
        if not CONF.nvidia.rebind_for_passthrough:
            raise base.PrepareError(
                'GPU %s is bound to %s, not %s; bind it to %s or set '
                '[nvidia] rebind_for_passthrough'
                % (gpu.address, current or 'no driver', target, target))
        info = {'restore_driver': current or '',
                'restore_group': {a: sysfs.driver(a) or '' for a in moves}}
        try:
            if current == 'nvidia':
                info['restore_persistence'] = self._persistence_off(gpu)
            self.move(gpu.address, target)
            for address in moves:
                sysfs.rebind(address, CONF.nvidia.passthrough_driver)
        except (sysfs_mod.RebindError, base.PrepareError) as e:
            self._undo(gpu, info)
            raise base.PrepareError(str(e))
        LOG.info('GPU %s moved from %s to %s for passthrough%s',
                 gpu.address, current, target,
                 ' with %s' % ', '.join(moves) if moves else '')
        return info

    def release(self, address, info):
        """Give the GPU (and what moved with it) back. The caller holds
        the GPU's lock.
        """
        sysfs = self.state.sysfs
        for member, driver in sorted(
                (info.get('restore_group') or {}).items()):
            sysfs.rebind(member, driver or None)
        self.state.sysfs.rebind(address, info['restore_driver'] or None)
        self.state.backend.refresh()
        uuid = self._uuid(address)
        if info.get('restore_persistence') and uuid:
            self.state.backend.set_persistence_mode(uuid, True)
        LOG.info('GPU %s returned to %s', address, info['restore_driver'])

    def move(self, address, driver):
        """Rebind one GPU; off the nvidia driver only with NVML let go
        (RebindError says why not).
        """
        sysfs = self.state.sysfs
        if sysfs.driver(address) == 'nvidia':
            with self.state.backend.released():
                sysfs.rebind(address, driver)
        else:
            sysfs.rebind(address, driver)
            if driver == 'nvidia':
                self.state.backend.refresh()

    def rebind_blockers(self, gpu):
        """The safety gates in front of a rebind, as reasons."""
        sysfs = self.state.sysfs
        blockers = []
        if not sysfs.iommu_enabled():
            blockers.append('the IOMMU is off')
        vfs = sysfs.sriov(gpu.address)['vfs']
        if vfs:
            blockers.append('%d SR-IOV VFs are enabled' % len(vfs))
        if sysfs.driver(gpu.address) == 'nvidia':
            live = self.state.backend.gpus()
            now = next((g for g in live if g.address == gpu.address), gpu)
            if now.processes:
                blockers.append('%d processes use it' % len(now.processes))
            if self.state.instances(now):
                blockers.append('it has MIG instances')
        return blockers

    def _persistence_off(self, gpu):
        """Turn persistence mode off (it keeps the driver holding the
        GPU); True when it was on.
        """
        backend = self.state.backend
        if not backend.persistence_mode(gpu.uuid):
            return False
        backend.set_persistence_mode(gpu.uuid, False)
        LOG.info('GPU %s: persistence mode off for the rebind',
                 gpu.address)
        return True

    def _undo(self, gpu, info):
        """Best effort after a failed prepare: what moved goes back."""
        sysfs = self.state.sysfs
        for member, driver in (info.get('restore_group') or {}).items():
            if sysfs.driver(member) != (driver or None):
                try:
                    sysfs.rebind(member, driver or None)
                except sysfs_mod.RebindError as e:
                    LOG.warning('Could not return %s to %s: %s', member,
                                driver, e)
        if info.get('restore_persistence') and \
                sysfs.driver(gpu.address) == 'nvidia':
            self.state.backend.set_persistence_mode(gpu.uuid, True)

    def _uuid(self, address):
        gpu = self.state.geometry.get(address)
        return gpu.uuid if gpu is not None else None
