# SPDX-License-Identifier: Apache-2.0
"""Attach handles → libvirt <hostdev> elements, as Nova 2026.2's libvirt
driver composes them (spec cyborg-vgpu-support; nova/virt/libvirt/config.py
LibvirtConfigGuestHostdevPCI / LibvirtConfigGuestHostdevMDEV):

- `PCI`: <hostdev mode='subsystem' type='pci' managed='yes'> with the
  handle's domain/bus/device(slot)/function. An info `managed` of "no"
  (a VF left on its vendor VFIO variant driver, already configured, e.g.
  an NVIDIA vGPU VF with its type written to current_vgpu_type) gives
  managed='no', as Nova does for [pci] device_spec "managed": "no" (spec
  enable-vfio-devices-with-kernel-variant-drivers): libvirt must not
  detach/reattach such a device, and doing so can crash the host.
- `MDEV`: the mdev of `asked_type` that Nova creates on the parent device
  (the handle's domain/bus/device/function) with the ARQ's
  attach_handle_uuid (see mdev.py), then <hostdev mode='subsystem'
  type='mdev' managed='no' model='vfio-pci'> with <source><address
  uuid='…'/></source>.

Beyond Nova, which logs and drops every accelerator of the guest when one
handle is of another type: a handle that cannot be wired (another type,
e.g. `MIG` (host-only MIG instances), `MPS` (GPU shares for host
processes and containers) or `TEST_PCI`; an unbound ARQ;
missing or malformed fields) is refused with AttachHandleNotWirable, which
names each such ARQ and why. A guest never boots without a device it was
given.
"""

import uuid as uuidlib
import xml.etree.ElementTree as ET

from nova_cyborg_client import exception
from nova_cyborg_client import mdev as nova_mdev

PCI = 'PCI'
MDEV = 'MDEV'
MIG = 'MIG'
MPS = 'MPS'
SUPPORTED_TYPES = frozenset((PCI, MDEV))
# Why a known type other than PCI/MDEV is refused.
REFUSED_TYPES = {
    MIG: 'a MIG instance of a data-center-driver host is for host '
         'processes and containers (CUDA_VISIBLE_DEVICES=MIG-...), a guest '
         'cannot use it; VMs get MIG-backed vGPUs on a vGPU host',
    MPS: 'an MPS share of a data-center-driver host is for host processes '
         'and containers (its CUDA_MPS_* client environment), a guest '
         'cannot use it; VMs get time-sliced vGPUs on a vGPU host',
    'TEST_PCI': 'a fake driver\'s test handle, not a device',
}
# (field, largest value): a PCI address's parts, as a handle's info has
# them (hex strings, with or without 0x).
ADDRESS_FIELDS = (('domain', 0xffff), ('bus', 0xff), ('device', 0x1f),
                  ('function', 0x7))
MANAGED_VALUES = {'yes': True, 'true': True, 'no': False, 'false': False}


class _Refused(Exception):
    """Why one ARQ cannot be wired."""


def _hex(value):
    value = str(value)
    return value if value.startswith('0x') else '0x' + value


def _address(info):
    """{field: int} of the handle's PCI address; _Refused if a part is
    missing or not a hex number in range.
    """
    if not isinstance(info, dict):
        raise _Refused('attach_handle_info is missing')
    out = {}
    for field, largest in ADDRESS_FIELDS:
        value = info.get(field)
        if value in (None, ''):
            raise _Refused('attach_handle_info has no %s' % field)
        try:
            number = int(str(value), 16)
        except ValueError:
            number = -1
        if not 0 <= number <= largest:
            raise _Refused('attach_handle_info %s %r is not a PCI address '
                           'part' % (field, value))
        out[field] = number
    return out


def sysfs_address(info):
    """'0000:1b:00.4' from a handle's info."""
    a = _address(info)
    return '%04x:%02x:%02x.%x' % (a['domain'], a['bus'], a['device'],
                                  a['function'])


def _managed(info):
    value = info.get('managed')
    if value is None:
        return True
    managed = MANAGED_VALUES.get(str(value).lower())
    if managed is None:
        raise _Refused('attach_handle_info managed %r is neither "yes" nor '
                       '"no"' % (value,))
    return managed


def pci_hostdev(info, managed=True):
    dev = ET.Element('hostdev', mode='subsystem', type='pci',
                     managed='yes' if managed else 'no')
    source = ET.SubElement(dev, 'source')
    ET.SubElement(source, 'address', domain=_hex(info['domain']),
                  bus=_hex(info['bus']), slot=_hex(info['device']),
                  function=_hex(info['function']))
    return dev


def mdev_hostdev(mdev_uuid):
    # Attribute order as Nova's format_dom writes them.
    dev = ET.Element('hostdev', mode='subsystem', type='mdev',
                     managed='no', model='vfio-pci')
    source = ET.SubElement(dev, 'source')
    ET.SubElement(source, 'address', uuid=mdev_uuid)
    return dev


def mdev_of(arq):
    """The Mdev an MDEV-handle ARQ asks Nova to create (_Refused if the
    handle lacks what it takes).
    """
    info = arq.get('attach_handle_info')
    parent = sysfs_address(info)
    mdev_type = info.get('asked_type')
    if not mdev_type or not isinstance(mdev_type, str):
        raise _Refused('attach_handle_info has no asked_type (the mdev type '
                       'to create on %s)' % parent)
    try:
        mdev_uuid = str(uuidlib.UUID(str(arq.get('attach_handle_uuid'))))
    except ValueError:
        raise _Refused('attach_handle_uuid %r is not a UUID (it names the '
                       'mdev)' % (arq.get('attach_handle_uuid'),))
    return nova_mdev.Mdev(mdev_uuid, parent, mdev_type)


class GuestDevices:
    """What a guest gets from its bound ARQs: `hostdevs` (<hostdev>
    elements, in ARQ order) and `mdevs` (Mdev, to create before the guest
    starts). AttachHandleNotWirable if any ARQ cannot be wired.
    """

    def __init__(self, instance_uuid, accel_info):
        self.instance_uuid = instance_uuid
        self.hostdevs = []
        self.mdevs = []
        problems = []
        for arq in accel_info or []:
            try:
                self._add(arq)
            except _Refused as e:
                problems.append((arq.get('uuid'),
                                 arq.get('attach_handle_type') or '-',
                                 str(e)))
        if problems:
            raise exception.AttachHandleNotWirable(problems)

    def _add(self, arq):
        handle_type = arq.get('attach_handle_type')
        if arq.get('state', 'Bound') != 'Bound':
            raise _Refused('not bound (state %s)' % arq.get('state'))
        if handle_type == PCI:
            info = arq.get('attach_handle_info')
            _address(info)
            self.hostdevs.append(pci_hostdev(info, _managed(info)))
        elif handle_type == MDEV:
            mdev = mdev_of(arq)
            self.mdevs.append(mdev)
            self.hostdevs.append(mdev_hostdev(mdev.uuid))
        elif handle_type in REFUSED_TYPES:
            raise _Refused(REFUSED_TYPES[handle_type])
        else:
            raise _Refused('not a type a guest can be given (%s are)'
                           % ', '.join(sorted(SUPPORTED_TYPES)))

    @property
    def xml(self):
        devices = ET.Element('devices')
        devices.extend(self.hostdevs)
        return to_xml(devices)


def mdevs_of(accel_info):
    """The mdevs of the MDEV-handle ARQs among `accel_info` (those whose
    handle names one; others are skipped): what a delete removes.
    """
    out = []
    for arq in accel_info or []:
        if arq.get('attach_handle_type') != MDEV:
            continue
        try:
            out.append(mdev_of(arq))
        except _Refused:
            continue
    return out


def guest_hostdevs(instance_uuid, accel_info):
    """<hostdev> elements for the instance's bound ARQs."""
    return GuestDevices(instance_uuid, accel_info).hostdevs


def to_xml(element):
    """Pretty XML of one element (a copy is indented, not the original)."""
    element = ET.fromstring(ET.tostring(element))
    ET.indent(element, space='  ')
    return ET.tostring(element, encoding='unicode')


def devices_xml(instance_uuid, accel_info):
    """The guest's accelerator devices as a <devices> fragment."""
    return GuestDevices(instance_uuid, accel_info).xml
