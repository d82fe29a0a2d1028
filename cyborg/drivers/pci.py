# SPDX-License-Identifier: Apache-2.0
"""Generic PCI driver: devices picked by a Nova-style device_spec from sysfs.

Each matching function becomes a device with one deployable and one PCI
attach handle. Functions that Nova's own [pci] device_spec claims are left
to Nova: one host resource must never be offered twice.
"""

import fnmatch
import json
import os

from oslo_log import log

from cyborg.common import pci
from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.objects import device as records

LOG = log.getLogger(__name__)

# PCI base class → our device type; display controllers are GPUs.
_CLASS_TYPES = {'03': 'GPU', '12': 'AICHIP', '0b': 'FPGA', '02': 'NIC',
                '01': 'SSD', '10': 'QAT'}
_DEFAULT_RC = {'GPU': 'PGPU', 'FPGA': 'FPGA'}


class DeviceSpec:
    """One whitelist entry: vendor/product ids and an address glob."""

    def __init__(self, raw):
        spec = json.loads(raw) if isinstance(raw, str) else dict(raw)
        if not isinstance(spec, dict):
            raise ValueError('device_spec entries must be JSON objects: %r'
                             % raw)
        self.vendor_id = (pci.normalize_id(spec['vendor_id'])
                          if 'vendor_id' in spec else None)
        self.product_id = (pci.normalize_id(spec['product_id'])
                           if 'product_id' in spec else None)
        address = spec.get('address', '*')
        if address.count(':') == 1:
            address = '*:' + address
        self.address = address.lower()
        self.device_type = spec.get('device_type')
        self.resource_class = spec.get('resource_class')
        traits = spec.get('traits', '')
        self.traits = [t.strip() for t in traits.split(',') if t.strip()] \
            if isinstance(traits, str) else list(traits)

    def matches(self, function):
        return ((self.vendor_id is None
                 or self.vendor_id == function['vendor'])
                and (self.product_id is None
                     or self.product_id == function['product'])
                and fnmatch.fnmatch(function['address'], self.address))


def _read(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def _link_name(path):
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def scan(sysfs_root):
    """Every PCI function under <sysfs_root>/bus/pci/devices, as dicts."""
    devices_dir = os.path.join(sysfs_root, 'bus', 'pci', 'devices')
    try:
        names = sorted(os.listdir(devices_dir))
    except OSError:
        LOG.warning('No PCI devices directory at %s', devices_dir)
        return []
    functions = []
    for name in names:
        path = os.path.join(devices_dir, name)
        try:
            address = pci.normalize_address(name)
        except ValueError:
            continue
        numa = _read(os.path.join(path, 'numa_node'), '-1')
        functions.append({
            'address': address,
            'vendor': pci.normalize_id(_read(os.path.join(path, 'vendor'),
                                             '0')),
            'product': pci.normalize_id(_read(os.path.join(path, 'device'),
                                              '0')),
            'class': (_read(os.path.join(path, 'class'), '0x000000')
                      .lower().replace('0x', '').zfill(6)),
            'numa_node': int(numa) if numa.lstrip('-').isdigit() else -1,
            'driver': _link_name(os.path.join(path, 'driver')),
            'iommu_group': _link_name(os.path.join(path, 'iommu_group')),
            'is_vf': os.path.exists(os.path.join(path, 'physfn')),
        })
    return functions


class PCIDriver(base.Driver):
    name = 'pci'

    def __init__(self, specs=None, nova_specs=None, sysfs_root=None):
        self.specs = [DeviceSpec(s) for s in (
            specs if specs is not None else CONF.pci_driver.device_spec)]
        self.nova_specs = [DeviceSpec(s) for s in (
            nova_specs if nova_specs is not None
            else CONF.pci_driver.nova_device_spec)]
        self.sysfs_root = sysfs_root or CONF.pci_driver.sysfs_root

    def discover(self):
        devices = []
        for function in scan(self.sysfs_root):
            spec = next((s for s in self.specs if s.matches(function)), None)
            if spec is None:
                continue
            if any(s.matches(function) for s in self.nova_specs):
                LOG.info('PCI device %s (%s:%s) is claimed by Nova\'s [pci] '
                         'device_spec; skipping it', function['address'],
                         function['vendor'], function['product'])
                continue
            devices.append(self._device(function, spec))
        return devices

    def _device(self, function, spec):
        dev_type = spec.device_type or _CLASS_TYPES.get(
            function['class'][:2], 'AICHIP')
        info = records.pci_info(function['address'])
        deployable = records.Deployable(
            name=function['address'], num_accelerators=1,
            resource_class=spec.resource_class or _DEFAULT_RC.get(
                dev_type, 'CUSTOM_PCI_%s_%s' % (function['vendor'].upper(),
                                                function['product'].upper())),
            traits=list(spec.traits),
            attach_handles=[records.AttachHandle('PCI', info)],
            driver_name='pci')
        board = {k: function[k] for k in ('product', 'class', 'numa_node',
                                          'driver', 'iommu_group', 'is_vf')}
        board['product_id'] = board.pop('product')
        return records.Device(
            type=dev_type, vendor=function['vendor'],
            product_id=function['product'],
            model='%s %s' % (pci.vendor_name(function['vendor']),
                             function['product']),
            controlpath_id={'cpid_type': 'PCI', 'cpid_info': info},
            deployables=[deployable], std_board_info=board,
            # No lifecycle data beyond being listed on the bus.
            phase='Ready')
