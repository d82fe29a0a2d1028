# SPDX-License-Identifier: Apache-2.0
"""Mediated devices for Cyborg-owned MDEV attach handles.

Nova 2026.2 (spec cyborg-vgpu-support) does, for each ARQ bound with an
`MDEV` handle: create an mdev of the handle's `asked_type` on the parent
device named by the handle's domain/bus/device/function, with the ARQ's
`attach_handle_uuid` as the mdev's UUID, before the guest starts; remove it
when the instance is deleted. Nova goes through libvirt's node-device API
(`_create_mdev`: nodedev create, define, autostart: a persistent mdev);
here it is an explicit step of the flow behind `MdevCreator`, whose sysfs
implementation uses the kernel's interface directly
(Documentation/ABI/testing/sysfs-bus-vfio-mdev):

  create: write the UUID to
          <sysfs>/bus/pci/devices/<parent>/mdev_supported_types/<type>/create
  remove: write 1 to <sysfs>/bus/pci/devices/<parent>/<uuid>/remove

A sysfs-created mdev is transient (gone at host reboot), unlike Nova's
libvirt-defined one. Both writes need root on a real host.
"""

import abc
import collections
import os

from oslo_log import log

from nova_cyborg_client import exception

LOG = log.getLogger(__name__)

# uuid: the ARQ's attach_handle_uuid; parent: the parent's PCI address in
# sysfs form (0000:1b:00.4); mdev_type: the handle's asked_type.
Mdev = collections.namedtuple('Mdev', 'uuid parent mdev_type')


class MdevCreator(abc.ABC):
    """Creates and removes the mdevs of a guest's MDEV attach handles."""

    @abc.abstractmethod
    def create(self, mdev):
        """Create `mdev` (an Mdev); MdevCreationFailed if it cannot be."""

    @abc.abstractmethod
    def remove(self, mdev):
        """Remove `mdev`; True if it existed, False if it was gone already.
        MdevRemovalFailed if it exists and cannot be removed.
        """


class SysfsMdevCreator(MdevCreator):
    """The kernel's mdev interface under `root` (/sys on a host; a fake
    tree in tests and in cyborg-aio).
    """

    def __init__(self, root='/sys'):
        self.root = root

    def _parent_dir(self, parent):
        return os.path.join(self.root, 'bus', 'pci', 'devices', parent)

    def types(self, parent):
        """The mdev types the parent offers (sorted), [] if none."""
        try:
            return sorted(os.listdir(os.path.join(
                self._parent_dir(parent), 'mdev_supported_types')))
        except OSError:
            return []

    def create(self, mdev):
        def fail(reason):
            raise exception.MdevCreationFailed(
                uuid=mdev.uuid, mdev_type=mdev.mdev_type, parent=mdev.parent,
                reason=reason)

        if not os.path.isdir(self._parent_dir(mdev.parent)):
            fail('no such PCI device in %s' % self.root)
        type_dir = os.path.join(self._parent_dir(mdev.parent),
                                'mdev_supported_types', mdev.mdev_type)
        if not os.path.isdir(type_dir):
            types = self.types(mdev.parent)
            fail('the device offers no such mdev type (it offers: %s)'
                 % (', '.join(types) or 'none: not an mdev parent'))
        available = _read(os.path.join(type_dir, 'available_instances'))
        if available is not None and available.isdigit() and \
                int(available) < 1:
            fail('available_instances is 0')
        try:
            with open(os.path.join(type_dir, 'create'), 'w') as f:
                f.write(mdev.uuid)
        except OSError as e:
            fail('writing %s/create: %s' % (type_dir, e.strerror or e))
        LOG.info('Created mdev %s of type %s on %s', mdev.uuid,
                 mdev.mdev_type, mdev.parent)

    def remove(self, mdev):
        path = os.path.join(self._parent_dir(mdev.parent), mdev.uuid,
                            'remove')
        if not os.path.exists(path):
            LOG.info('mdev %s on %s is already gone', mdev.uuid, mdev.parent)
            return False
        try:
            with open(path, 'w') as f:
                f.write('1')
        except OSError as e:
            raise exception.MdevRemovalFailed(
                uuid=mdev.uuid, parent=mdev.parent,
                reason=e.strerror or str(e))
        LOG.info('Removed mdev %s from %s', mdev.uuid, mdev.parent)
        return True


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None
