# SPDX-License-Identifier: Apache-2.0
"""A driver that reports the devices described in a host spec (YAML).

It lets every flow run without hardware: `cyborg-aio` uses the shipped
gpu-host spec (cyborg/data/fake-hosts) unless `--host-spec` names another.
"""

import copy
import os
import time

import yaml

from cyborg.common import pci
from cyborg.conf import CONF
from cyborg import data
from cyborg.drivers import base
from cyborg.objects import device as records

_DEFAULT_RC = {'GPU': 'PGPU', 'FPGA': 'FPGA'}


def default_host_spec():
    return data.fake_host('gpu-host')


# libyaml's parser when PyYAML was built with it: the same documents, a
# fraction of the CPU.
_Loader = getattr(yaml, 'CSafeLoader', yaml.SafeLoader)


def load_spec(path):
    with open(path) as f:
        spec = yaml.load(f, Loader=_Loader) or {}
    devices = spec.get('devices') or []
    if not isinstance(devices, list):
        raise ValueError('%s: "devices" must be a list' % path)
    return devices


def _functions(address, count):
    """PCI addresses of `count` functions starting at `address`."""
    info = records.pci_info(address)
    first = int(info['device'], 16) * 8 + int(info['function'])
    out = []
    for n in range(first, first + count):
        out.append('%s:%s:%02x.%d' % (info['domain'], info['bus'], n // 8,
                                      n % 8))
    return out


def device_from_spec(entry):
    dev_type = entry.get('type', 'GPU').upper()
    vendor = pci.normalize_id(entry['vendor_id'])
    product = pci.normalize_id(entry['product_id'])
    address = pci.normalize_address(entry['pci_address'])
    count = int(entry.get('functions', 1))
    handles = [records.AttachHandle(entry.get('attach_type', 'PCI'),
                                    records.pci_info(a))
               for a in _functions(address, count)]
    deployable = records.Deployable(
        name=address, num_accelerators=count,
        resource_class=entry.get(
            'resource_class', _DEFAULT_RC.get(dev_type, 'CUSTOM_' + dev_type)),
        traits=list(entry.get('traits', [])), attach_handles=handles,
        driver_name='fake')
    board = {'product_id': product, 'numa_node': entry.get('numa_node', 0)}
    return records.Device(
        type=dev_type, vendor=vendor, product_id=product,
        model=entry.get('model', 'fake %s' % dev_type),
        controlpath_id={'cpid_type': 'PCI',
                        'cpid_info': records.pci_info(address)},
        deployables=[deployable], std_board_info=board,
        # A copy: the parsed spec is kept between passes.
        vendor_board_info=copy.deepcopy(
            entry.get('vendor_board_info', 'fake_vendor_info')),
        # No lifecycle data: a fake device is usable as declared.
        phase=entry.get('phase', 'Ready'))


class FakeDriver(base.Driver):
    name = 'fake'

    def __init__(self, path=None):
        self.path = path or CONF.fake_driver.host_spec or default_host_spec()

    def discover(self):
        return [device_from_spec(e) for e in self._spec()]

    def _spec(self):
        """The spec's device entries, parsed again only when the file
        changed: every agent pass discovers, and in cyborg-aio an unbind
        wakes a pass, so parsing the YAML each time cost more CPU than the
        bind itself.
        """
        st = os.stat(self.path)
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cached = getattr(self, '_parsed', None)
        if cached is None or cached[0] != key:
            cached = self._parsed = (key, load_spec(self.path))
        return cached[1]

    def prepare(self, deployable_name, handle):
        """Takes the spec entry's `prepare_seconds` (default 0): preparing
        a real device can take seconds, e.g. creating a MIG instance
        (NVIDIA's MIG user guide, "nvidia-smi mig -cgi ... -C"), and a
        conductor may die meanwhile.
        """
        delay = self._prepare_delays().get(deployable_name)
        if delay:
            time.sleep(delay)
        return None

    def _prepare_delays(self):
        # Derived again only when the spec file changed: a bind should not
        # parse YAML.
        entries = self._spec()
        if getattr(self, '_delays', (None,))[0] is not entries:
            self._delays = (entries, {
                pci.normalize_address(e['pci_address']):
                    float(e['prepare_seconds'])
                for e in entries if e.get('prepare_seconds')})
        return self._delays[1]
