# SPDX-License-Identifier: Apache-2.0
"""Whether anything on this host still uses a GPU: the driver's half of
the fail-closed check in front of a reclaim or a reset (the agent has
already checked claims and Placement allocations).

Two things can hold a GPU without Cyborg knowing:
- a VM: QEMU holds the VFIO group file /dev/vfio/<group> open while the
  GPU is passed through, even when no claim is left (contract
  gpu-to-vm.md §4) - found by scanning /proc/*/fd through privsep, since
  QEMU runs as another user;
- CUDA processes on a GPU on the nvidia driver, which NVML lists.

Any doubt is an answer: a scan or an NVML read that fails makes the GPU
count as busy (OccupancyUnknown).
"""

from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import privileged


def check(state, address):
    """Raise base.Busy unless nothing uses the GPU at `address`; touches
    nothing.
    """
    sysfs = state.sysfs
    group = sysfs.iommu_group(address)
    if group is not None:
        try:
            pids = privileged.vfio_group_holders(CONF.nvidia.proc_root,
                                                 group)
        except Exception as e:
            raise base.Busy('OccupancyUnknown', 'cannot tell who holds '
                            '/dev/vfio/%d: %s' % (group, e))
        if pids:
            raise base.Busy('Busy', 'process(es) %s hold /dev/vfio/%d open '
                            '(a VM still uses the GPU)'
                            % (', '.join(str(p) for p in pids), group))
    if sysfs.driver(address) != 'nvidia':
        return
    try:
        gpu = next((g for g in state.backend.gpus()
                    if g.address == address), None)
    except (nvml.NvmlError, nvml.NvmlUnavailable) as e:
        raise base.Busy('OccupancyUnknown', 'NVML cannot list the '
                        'processes on GPU %s: %s' % (address, e))
    if gpu is None:
        # On nvidia yet not listed: lost, or NVML started before it came.
        return
    if gpu.processes:
        raise base.Busy('Busy', '%d process(es) use GPU %s (pids %s)' % (
            len(gpu.processes), address,
            ', '.join(str(p[0]) for p in gpu.processes)))
