# SPDX-License-Identifier: Apache-2.0
"""Attach handles → libvirt <hostdev> elements, as Nova's libvirt driver.

Nova wires accelerators only when every ARQ has a PCI attach handle, and
drops all of them otherwise (TEST_PCI from a fake driver, a failed ARQ...).
Beyond Nova, MDEV handles (vGPU, MIG) are wired too, as the mdev whose uuid
is the attach handle's uuid, and PCI and MDEV may be mixed; any other type
still drops them all.
"""

import xml.etree.ElementTree as ET

from oslo_log import log

LOG = log.getLogger(__name__)

PCI = 'PCI'
MDEV = 'MDEV'
SUPPORTED_TYPES = frozenset((PCI, MDEV))


def _hex(value):
    value = str(value)
    return value if value.startswith('0x') else '0x' + value


def pci_hostdev(info, managed=True):
    dev = ET.Element('hostdev', mode='subsystem', type='pci',
                     managed='yes' if managed else 'no')
    source = ET.SubElement(dev, 'source')
    ET.SubElement(source, 'address', domain=_hex(info['domain']),
                  bus=_hex(info['bus']), slot=_hex(info['device']),
                  function=_hex(info['function']))
    return dev


def mdev_hostdev(mdev_uuid):
    dev = ET.Element('hostdev', mode='subsystem', type='mdev',
                     model='vfio-pci', managed='no')
    source = ET.SubElement(dev, 'source')
    ET.SubElement(source, 'address', uuid=mdev_uuid)
    return dev


def accel_arqs_to_wire(instance_uuid, accel_info):
    """The ARQs to wire: all of them if each handle type is supported,
    else none (logged).
    """
    if not accel_info:
        return []
    types = {arq.get('attach_handle_type') for arq in accel_info}
    if types <= SUPPORTED_TYPES:
        return list(accel_info)
    LOG.info('Ignoring accelerator requests for instance %s. Supported '
             'Attach handle types: %s. But got these unsupported types: %s.',
             instance_uuid, sorted(SUPPORTED_TYPES),
             sorted(str(t) for t in types - SUPPORTED_TYPES))
    return []


def guest_hostdevs(instance_uuid, accel_info):
    """<hostdev> elements for the instance's bound ARQs."""
    devices = []
    for arq in accel_arqs_to_wire(instance_uuid, accel_info):
        if arq['attach_handle_type'] == PCI:
            devices.append(pci_hostdev(arq['attach_handle_info']))
        else:
            devices.append(mdev_hostdev(arq['attach_handle_uuid']))
    return devices


def to_xml(element):
    """Pretty XML of one element (a copy is indented, not the original)."""
    element = ET.fromstring(ET.tostring(element))
    ET.indent(element, space='  ')
    return ET.tostring(element, encoding='unicode')


def devices_xml(instance_uuid, accel_info):
    """The guest's accelerator devices as a <devices> fragment."""
    devices = ET.Element('devices')
    devices.extend(guest_hostdevs(instance_uuid, accel_info))
    return to_xml(devices)
