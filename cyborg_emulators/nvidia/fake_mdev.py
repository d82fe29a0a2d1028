# SPDX-License-Identifier: Apache-2.0
"""Nova's mdev creation on a fake vGPU host, with the kernel's timing.

On a host, the write of a UUID to an mdev type's `create` file returns
once the mdev exists (or fails), and `remove` is done when its write
returns (Documentation/ABI/testing/sysfs-bus-vfio-mdev). The fake tree is
plain files, so KernelMdevCreator writes exactly what SysfsMdevCreator
writes and then plays the kernel's side at once (fake_vgpu.
apply_mdev_writes), from whichever process writes: a delete right after a
boot finds the mdev and removes it, nothing is left behind. The agent's
fake vGPU Manager counts the mdevs it finds as configured VFs.
"""

import os

from cyborg_emulators.nvidia import fake_vgpu
from nova_cyborg_client import exception
from nova_cyborg_client import mdev


class KernelMdevCreator(mdev.SysfsMdevCreator):
    """SysfsMdevCreator over a fake sysfs root, applied at the write."""

    def _devices(self):
        return os.path.join(self.root, 'bus', 'pci', 'devices')

    def create(self, m):
        super().create(m)
        refused = fake_vgpu.apply_mdev_writes(self._devices(), m.parent)
        if (m.mdev_type, m.uuid) in refused:
            raise exception.MdevCreationFailed(
                uuid=m.uuid, mdev_type=m.mdev_type, parent=m.parent,
                reason='the vGPU Manager has no instance of it left on the '
                       'device (available_instances 0, or a mdev exists)')

    def remove(self, m):
        existed = super().remove(m)
        if existed:
            fake_vgpu.apply_mdev_writes(self._devices(), m.parent)
        return existed
