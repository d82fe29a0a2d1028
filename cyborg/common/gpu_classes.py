# SPDX-License-Identifier: Apache-2.0
"""Resource classes that measure a part of one GPU rather than count
accelerators.

Cyborg makes one ARQ per unit of a group's resources (`resources:FPGA=2`
is two FPGAs, two ARQs), and its own code notes that non-accelerator
resources such as device memory must not count. These classes are such
resources: a group asking for 4 memory slices and 3 compute slices is one
MIG instance, one ARQ.
"""

MEM_SLICE = 'CUSTOM_GPU_MEM_SLICE'
COMPUTE_SLICE = 'CUSTOM_GPU_COMPUTE_SLICE'
NVDEC = 'CUSTOM_GPU_NVDEC'
NVJPG = 'CUSTOM_GPU_NVJPG'
OFA = 'CUSTOM_GPU_OFA'
# A share of one GPU (time-slice or MPS): a slot, a percentage of its SMs
# and MiB of its memory, drawn from the GPU's `_share` provider.
CORE_PERCENT = 'CUSTOM_GPU_CORE_PERCENT'
MEMORY_MB = 'CUSTOM_GPU_MEMORY_MB'
SHARE_SLOT = 'CUSTOM_GPU_SHARE_SLOT'

# Standard class of a vGPU: on an NVIDIA vGPU-Manager host one VF; a
# group asking for it and slices is one vGPU (the slices are its own).
VGPU = 'VGPU'

PARTS_OF_ONE_GPU = frozenset((MEM_SLICE, COMPUTE_SLICE, NVDEC, NVJPG, OFA,
                              CORE_PERCENT, MEMORY_MB, SHARE_SLOT))


def accelerators_in_group(group):
    """How many accelerators (so ARQs) one device-profile group asks for."""
    count = 0
    partial = False
    for key, value in group.items():
        if not key.startswith('resources:'):
            continue
        if key[len('resources:'):] in PARTS_OF_ONE_GPU:
            partial = True
        else:
            count += int(value)
    if partial and int(group.get('resources:' + VGPU, 0)):
        return count
    return count + (1 if partial else 0)
