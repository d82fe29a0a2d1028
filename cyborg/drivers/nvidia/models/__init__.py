# SPDX-License-Identifier: Apache-2.0
"""NVML captures of real GPU models (the JSON of
cyborg_emulators.nvidia.capture): the fake NVML serves them, and the driver
takes the geometry of a GPU NVML cannot see (bound to vfio-pci since boot)
from the capture of the same product."""

import functools
import glob
import json
import os

DIR = os.path.dirname(os.path.abspath(__file__))


def load(model):
    """A capture: a name under this directory, a JSON path or a dict."""
    if isinstance(model, dict):
        return model
    path = model
    if not (model.endswith('.json') or os.sep in model):
        path = os.path.join(DIR, model + '.json')
    with open(path) as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def _by_product():
    from cyborg.drivers.nvidia import backend

    out = {}
    for path in sorted(glob.glob(os.path.join(DIR, '*.json'))):
        device = load(path)['devices'][0]
        memory = device.get('memory_v2') or device['memory_v1']
        out['%04x' % (device['pci']['pciDeviceId'] >> 16)] = {
            'name': device['name'],
            'product_id': '%04x' % (device['pci']['pciDeviceId'] >> 16),
            'memory_total': memory['total'],
            'memory_reserved': memory.get('reserved', 0),
            'compute_capability': tuple(device['cuda_cc']),
            'profiles': backend.profiles_from_capture(device)}
    return out


def by_product_id(product_id):
    """nvml.Gpu fields (no address/uuid) of the shipped capture of this
    PCI device id, or None.
    """
    return _by_product().get(product_id) if product_id else None
