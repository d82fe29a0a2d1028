# SPDX-License-Identifier: Apache-2.0
"""PCI ids and names shared by drivers and trait naming."""

import re

VENDOR_NAMES = {
    '10de': 'NVIDIA', '1002': 'AMD', '8086': 'INTEL', '10ee': 'XILINX',
    '1bd4': 'INSPUR', '19e5': 'HUAWEI', '15b3': 'MELLANOX', '1d0f': 'AMAZON',
}

ADDRESS_RE = re.compile(r'^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')


def normalize_id(value):
    """'0x10DE' / '10de' → '10de'."""
    value = str(value).strip().lower()
    if value.startswith('0x'):
        value = value[2:]
    return value.zfill(4)


def normalize_address(address):
    """'1b:00.0' / '0000:1B:00.0' → '0000:1b:00.0' (sysfs form)."""
    address = address.strip().lower()
    if address.count(':') == 1:
        address = '0000:' + address
    if not ADDRESS_RE.match(address):
        raise ValueError('not a PCI address: %s' % address)
    return address


def vendor_name(vendor_id):
    vendor_id = normalize_id(vendor_id)
    return VENDOR_NAMES.get(vendor_id, vendor_id.upper())
