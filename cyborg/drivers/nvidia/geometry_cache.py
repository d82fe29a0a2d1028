# SPDX-License-Identifier: Apache-2.0
"""The geometry last seen of each GPU (address → backend.Gpu).

A GPU handed to vfio-pci is invisible to NVML, so its geometry (memory,
MIG profiles) is what NVML said before: kept in memory, and across agent
restarts in the file [nvidia] geometry_cache names. A GPU NVML has never
seen takes the shipped capture of its product (cyborg/drivers/nvidia/
models), under a UUID that says so (UNSEEN).
"""

import json
import os

from oslo_log import log

from cyborg.conf import CONF
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import models

LOG = log.getLogger(__name__)
# UUID prefix of a GPU known only from the shipped capture of its product.
UNSEEN = 'unknown-'


def gpu_from_json(data):
    profiles = tuple(nvml.MigProfile(**dict(
        p, placements=tuple(p['placements']))) for p in data['profiles'])
    return nvml.Gpu(**dict(
        data, compute_capability=tuple(data['compute_capability']),
        processes=(), profiles=profiles,
        vgpu_types=tuple(nvml.VgpuType(**t)
                         for t in data.get('vgpu_types', ()))))


def shipped(function):
    """Geometry of a GPU NVML cannot see (bound to vfio-pci since boot),
    from the shipped capture of the same product, if there is one.
    """
    model = models.by_product_id(function.get('product'))
    if model is None:
        return None
    return nvml.Gpu(**dict(model, address=function['address'],
                           uuid=UNSEEN + function['address']))


def placeholder(function):
    """A GPU nobody can describe (NVML never saw it, no shipped capture of
    its product): listed with what sysfs knows, whole use only, so its
    phase and conditions reach the operator.
    """
    product = function.get('product') or 'unknown'
    return nvml.Gpu(uuid=UNSEEN + function['address'],
                    address=function['address'],
                    name='NVIDIA GPU (PCI device %s)' % product,
                    product_id=product, memory_total=0, memory_reserved=0,
                    compute_capability=(0, 0))


class GeometryCache:

    def __init__(self):
        self._gpus = self._load()

    def get(self, address):
        return self._gpus.get(address)

    def setdefault(self, address, gpu):
        return self._gpus.setdefault(address, gpu)

    def items(self):
        return self._gpus.items()

    def remember(self, gpu):
        """What NVML says now of a GPU; saved when its identity or MIG
        profiles changed.
        """
        before = self._gpus.get(gpu.address)
        self._gpus[gpu.address] = gpu
        if CONF.nvidia.geometry_cache and (
                before is None or before.profiles != gpu.profiles
                or before.uuid != gpu.uuid):
            self._save()

    @staticmethod
    def _load():
        path = CONF.nvidia.geometry_cache
        if not path or not os.path.exists(path):
            return {}
        try:
            with open(path) as f:
                raw = json.load(f)
            return {a: gpu_from_json(g) for a, g in raw.items()}
        except (OSError, ValueError, TypeError, KeyError) as e:
            LOG.warning('Ignoring unreadable GPU geometry cache %s: %s',
                        path, e)
            return {}

    def _save(self):
        path = CONF.nvidia.geometry_cache
        tmp = path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump({a: dict(vars(g), processes=[],
                               profiles=[vars(p) for p in g.profiles],
                               vgpu_types=[vars(t) for t in g.vgpu_types])
                       for a, g in self._gpus.items()}, f, indent=1,
                      default=list)
        os.replace(tmp, path)
