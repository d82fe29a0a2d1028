# SPDX-License-Identifier: Apache-2.0
"""What the NVIDIA driver's concerns share about this host's GPUs.

One HostState per driver: the NVML backend and sysfs, the geometry last
seen of each GPU, the health monitor, and one lock per GPU (a GPU is
prepared, released, reconciled and reclaimed under its lock). The
helpers below read a GPU's MIG instances the same way for every concern.
"""

import collections
import contextlib
import json
import threading

from cyborg.drivers import base
from cyborg.drivers.nvidia import mig


class HostState:

    def __init__(self, backend, sysfs, geometry, health):
        self.backend = backend
        self.sysfs = sysfs
        self.geometry = geometry      # geometry_cache.GeometryCache
        self.health = health          # health.HealthMonitor
        self.locks = collections.defaultdict(threading.Lock)
        # address -> what is being changed on it now ('MIG mode', 'kernel
        # driver'): discovery reports such a GPU as Initializing.
        self._changing = {}
        self._changing_lock = threading.Lock()
        # Why the MPS clients' share handles could not be read at the last
        # scrape, or None (telemetry warns once per change of it).
        self.share_handles_failed = None

    @contextlib.contextmanager
    def changing(self, address, what):
        """Mark the GPU as having its `what` changed while in the block."""
        with self._changing_lock:
            self._changing[address] = what
        try:
            yield
        finally:
            with self._changing_lock:
                self._changing.pop(address, None)

    def change_under_way(self, address):
        """What is being changed on the GPU now, or None."""
        with self._changing_lock:
            return self._changing.get(address)

    def instances(self, gpu):
        """The GPU's live MIG instances ([] when MIG mode is off)."""
        if not gpu.mig_capable or gpu.mig_current != 1:
            return []
        return self.backend.instances(gpu.uuid)

    def live(self, gpu):
        """The GPU as NVML sees it now (remembered); PrepareError when
        NVML cannot see it.
        """
        for now in self.backend.gpus():
            if now.address == gpu.address:
                self.geometry.remember(now)
                return now
        raise base.PrepareError('GPU %s is not visible to NVML'
                                % gpu.address)


def slots(gpu, instances):
    """The instances of profiles the GPU lists, as the allocator sees
    them.
    """
    by_id = {p.id: p for p in gpu.profiles}
    return [mig.Slot(i.profile_id, i.start, i.size) for i in instances
            if i.profile_id in by_id]


def describe(gpu, slots):
    """'1g.18gb@0,3g.71gb@4' for log lines and reasons."""
    names = {p.id: p.name for p in gpu.profiles}
    return ','.join('%s@%d' % (names[s.profile_id], s.start)
                    for s in slots)


def attach_info(handle):
    """A handle's attach info as a dict (stored as JSON)."""
    info = handle.get('attach_info') or {}
    return json.loads(info) if isinstance(info, str) else dict(info)
