# SPDX-License-Identifier: Apache-2.0
"""How a physical GPU looks in Placement (contract/gpu-sharing.md §4.4).

One provider per GPU. Whole-GPU use and every MIG profile draw on the same
inventories of that provider: memory slices, SM (compute) slices and the
media engines. A whole GPU asks for all of them, a 3g.71gb for 4 memory
slices, 3 compute slices, 3 decoders and 3 JPEG engines. Placement's own
atomic capacity check then makes "whole + any MIG" or "MIG layouts that
exceed the card" impossible to grant twice.

Placement sees counts, not positions, so the agent also publishes what
still fits after every change: MEM_SLICE max_unit = the largest block any
profile can still take, and one CUSTOM_MIG_FIT_<PROFILE> trait per
profile with a free legal placement (MIG device profiles require it).
GPU instances nobody owns (orphans) are subtracted through `reserved`.
"""

import re

from cyborg.common import gpu_classes
from cyborg.drivers.nvidia import mig

MEM_SLICE = gpu_classes.MEM_SLICE
COMPUTE_SLICE = gpu_classes.COMPUTE_SLICE
NVDEC = gpu_classes.NVDEC
NVJPG = gpu_classes.NVJPG
OFA = gpu_classes.OFA
ENGINE_RCS = ((NVDEC, 'decoders'), (NVJPG, 'jpegs'), (OFA, 'ofas'))
CORE_PERCENT = gpu_classes.CORE_PERCENT
MEMORY_MB = gpu_classes.MEMORY_MB
SHARE_SLOT = gpu_classes.SHARE_SLOT
# The share modes an operator may set. Only MPS is offered: a GPU set to
# time-slice gets no share pool, only the reason (shares.Shares.enforcer).
SHARE_MODES = ('mps', 'time-slice')
SHARE_TRAITS = {'mps': 'CUSTOM_GPU_SHARE_MPS'}     # per mode offered
MIB = 1 << 20

_TRAIT_CHARS = re.compile(r'[^A-Z0-9]+')


def trait_part(text):
    return _TRAIT_CHARS.sub('_', text.upper()).strip('_')


def model_name(gpu_name):
    """'NVIDIA H200' → 'H200'; 'NVIDIA A100-SXM4-80GB' → 'A100_SXM4_80GB'."""
    name = gpu_name.strip()
    if name.upper().startswith('NVIDIA '):
        name = name[len('NVIDIA '):]
    return trait_part(name)


def fit_trait(profile):
    return 'CUSTOM_MIG_FIT_' + trait_part(profile.name)


def profile_vector(profile):
    """What one GPU instance of `profile` takes from the provider."""
    vector = {MEM_SLICE: profile.slices, COMPUTE_SLICE: profile.compute_slices}
    for rc, attr in ENGINE_RCS:
        if getattr(profile, attr):
            vector[rc] = getattr(profile, attr)
    return vector


def totals(profiles):
    """The provider's totals: the full profile's vector, with all memory
    slices (a 7g's placement spans them all). A GPU without MIG is one
    slice of each: whole use only.
    """
    if not profiles:
        return {MEM_SLICE: 1, COMPUTE_SLICE: 1}
    vector = profile_vector(mig.full_profile(profiles))
    vector[MEM_SLICE] = mig.slice_count(profiles)
    return vector


def static_traits(gpu, passthrough):
    traits = {'CUSTOM_GPU_VENDOR_NVIDIA',
              'CUSTOM_GPU_MODEL_' + model_name(gpu.name),
              'CUSTOM_GPU_CC_%d_%d' % tuple(gpu.compute_capability[:2])}
    if gpu.mig_capable:
        traits.add('CUSTOM_GPU_MIG_CAPABLE')
    if gpu.numa_node is not None and gpu.numa_node >= 0:
        traits.add('CUSTOM_GPU_NUMA_%d' % gpu.numa_node)
    if passthrough:
        traits.add('CUSTOM_GPU_PASSTHROUGH_CAPABLE')
    return traits


def inventories(profiles, slots, orphans=(), whole_in_use=False):
    """Placement inventories for a GPU whose live instances are `slots`
    (orphans among them are listed again in `orphans`).

    whole_in_use: the GPU is handed out whole (e.g. on vfio-pci), so NVML
    cannot see its instances; nothing more fits.
    """
    total = totals(profiles)
    reserved = dict.fromkeys(total, 0)
    by_id = {p.id: p for p in profiles}
    for slot in orphans:
        for rc, n in profile_vector(by_id[slot.profile_id]).items():
            reserved[rc] = min(total[rc], reserved[rc] + n)
    invs = {rc: {'total': n, 'reserved': reserved[rc], 'min_unit': 1,
                 'max_unit': n, 'step_size': 1, 'allocation_ratio': 1.0}
            for rc, n in total.items()}
    if profiles and not whole_in_use:
        block = mig.largest_block(slots, profiles)
        if block == 0:
            # Free slices may remain (7 × 1g leaves slice 7) but no
            # profile can use them: offer nothing.
            invs[MEM_SLICE]['reserved'] = total[MEM_SLICE]
        elif slots:
            invs[MEM_SLICE]['max_unit'] = block
            fitting = mig.fitting(slots, profiles)
            invs[COMPUTE_SLICE]['max_unit'] = max(
                by_id[i].compute_slices for i in fitting)
            _reserve_unreachable(invs, profiles, slots)
    return invs


# resource class -> mig.most_added() key
_ADDED = {MEM_SLICE: 'slices', COMPUTE_SLICE: 'compute', NVDEC: 'decoders',
          NVJPG: 'jpegs', OFA: 'ofas'}


def _reserve_unreachable(invs, profiles, slots):
    """Reserve what no set of new instances could take any more (a slice
    no legal placement reaches, the SM slice two 3g strand): the least
    capacity that still grants every set of claims that can be placed
    together, so claims that race between two publications are granted
    together only when the layout leaves room for them as counts go
    (docs/nvidia-gpus.md, "Claims that race").
    """
    by_id = {p.id: p for p in profiles}
    taken = {}
    for slot in slots:
        for rc, n in profile_vector(by_id[slot.profile_id]).items():
            taken[rc] = taken.get(rc, 0) + n
    added = mig.most_added(slots, profiles)
    for rc, key in _ADDED.items():
        inv = invs.get(rc)
        if inv is None:
            continue
        room = inv['total'] - taken.get(rc, 0)
        unreachable = max(0, room - added.get(key, 0))
        # Orphans are reserved already; claimed instances are allocations.
        inv['reserved'] = min(inv['total'], inv['reserved'] + unreachable)


def fit_traits(profiles, slots, whole_in_use=False):
    if whole_in_use:
        return set()
    fitting = mig.fitting(slots, profiles)
    return {fit_trait(p) for p in profiles if p.id in fitting}


def request_vector(group):
    """{rc: amount} of a device-profile group's resources:* keys."""
    vector = {}
    for key, value in group.items():
        if key.startswith('resources'):
            rc = key.split(':', 1)[1]
            vector[rc] = int(value)
    return vector


def share_memory_mb(gpu, margin_mb):
    """MiB a share pool of `gpu` can hand out: NVML's total less what the
    driver reserves (memory info v2 `reserved`, KAI #2212) less a safety
    margin; rounded so that shares never exceed the card.
    """
    total = gpu.memory_total // MIB
    reserved = -(-(gpu.memory_reserved or 0) // MIB)
    return max(0, total - reserved - margin_mb)


def share_inventories(gpu, slots, margin_mb, fenced=False):
    """The `_share` provider of a GPU in a share mode. Percent and memory
    are never oversubscribed (allocation_ratio 1.0).
    """
    invs = {
        CORE_PERCENT: {'total': 100, 'min_unit': 1, 'max_unit': 100,
                       'step_size': 1},
        MEMORY_MB: {'total': share_memory_mb(gpu, margin_mb),
                    'min_unit': 1, 'step_size': 1},
        SHARE_SLOT: {'total': slots, 'min_unit': 1, 'max_unit': 1,
                     'step_size': 1},
    }
    for inv in invs.values():
        inv.setdefault('max_unit', inv['total'])
        inv['allocation_ratio'] = 1.0
        inv['reserved'] = inv['total'] if fenced else 0
    return {rc: inv for rc, inv in invs.items() if inv['total'] > 0}
