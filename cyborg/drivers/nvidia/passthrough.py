# SPDX-License-Identifier: Apache-2.0
"""Whole-GPU passthrough: a request for every memory slice of a GPU's
provider takes the physical function's PCI handle and needs the GPU on
the passthrough driver ([nvidia] passthrough_driver). The driver rebinds
it there only behind the safety gates (rebind_blockers) and when
[nvidia] rebind_for_passthrough allows; unbind returns it to the driver
it came from.
"""

from oslo_log import log

from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers.nvidia import resources
from cyborg.drivers.nvidia import sysfs as sysfs_mod

LOG = log.getLogger(__name__)


def is_whole(deployable_total, group):
    """A request for every memory slice of the provider is whole-GPU."""
    vector = resources.request_vector(group or {})
    return vector.get(resources.MEM_SLICE, deployable_total) \
        >= deployable_total


class Passthrough:

    def __init__(self, state):
        self.state = state

    def prepare(self, gpu):
        """Put the GPU on the passthrough driver; the attach info updates
        (the driver to restore at unbind). The caller holds the GPU's
        lock.
        """
        sysfs = self.state.sysfs
        target = CONF.nvidia.passthrough_driver
        current = sysfs.driver(gpu.address)
        if current == target:
            return None
        blockers = self.rebind_blockers(gpu)
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
        try:
            sysfs.rebind(gpu.address, target)
        except sysfs_mod.RebindError as e:
            raise base.PrepareError(str(e))
        # No NVML restart: a GPU that left nvidia is simply no longer
        # listed (the way back, in release(), does restart it).
        LOG.info('GPU %s moved from %s to %s for passthrough', gpu.address,
                 current, target)
        return {'restore_driver': current or ''}

    def release(self, address, restore_driver):
        """Give the GPU back to the driver prepare() took it from. The
        caller holds the GPU's lock.
        """
        self.state.sysfs.rebind(address, restore_driver)
        self.state.backend.refresh()
        LOG.info('GPU %s returned to %s', address, restore_driver)

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
