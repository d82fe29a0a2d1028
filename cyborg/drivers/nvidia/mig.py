# SPDX-License-Identifier: Apache-2.0
"""MIG geometry: which placements are free, which one to take, and what
Placement may still offer. Pure functions over the profiles NVML reported
and the GPU instances that exist; no NVML calls here.

The rules (contract/gpu-sharing.md §2.3): a GPU instance occupies the
memory slices [start, start+size); live instances never overlap; a start
must be one NVML lists for the profile; per-profile instance counts and
the GPU's engine totals (decoders, JPEG, OFA, copy engines) bound what
fits.
"""

import dataclasses
import functools


@dataclasses.dataclass(frozen=True)
class Slot:
    """A GPU instance as the allocator sees it: profile and placement."""
    profile_id: int
    start: int
    size: int


def full_profile(profiles):
    """The profile spanning the whole GPU (most memory slices, then most
    SMs): its engine counts are the GPU's totals.
    """
    return max(profiles, key=lambda p: (p.slices, p.compute_slices,
                                        p.multiprocessors))


def slice_count(profiles):
    """Memory slices of the GPU (8 on A100/H100/H200)."""
    return max(start + p.slices for p in profiles for start in p.placements)


def _engines(profile):
    return (profile.decoders, profile.jpegs, profile.ofas,
            profile.copy_engines)


def occupied(slots):
    taken = set()
    for slot in slots:
        taken.update(range(slot.start, slot.start + slot.size))
    return taken


def legal_starts(profile, slots, profiles):
    """Starts at which `profile` can be created next to `slots` now."""
    by_id = {p.id: p for p in profiles}
    if sum(1 for s in slots if s.profile_id == profile.id) \
            >= profile.max_instances:
        return []
    totals = _engines(full_profile(profiles))
    used = [sum(_engines(by_id[s.profile_id])[i] for s in slots
                if s.profile_id in by_id) for i in range(4)]
    wanted = _engines(profile)
    if any(used[i] + wanted[i] > totals[i] for i in range(4) if wanted[i]):
        return []
    taken = occupied(slots)
    return [start for start in profile.placements
            if not taken & set(range(start, start + profile.slices))]


def fitting(slots, profiles):
    """Profiles that could still be created, by id."""
    return {p.id for p in profiles if legal_starts(p, slots, profiles)}


def largest_block(slots, profiles):
    """The most memory slices one new instance could still take: what the
    provider's MEM_SLICE max_unit says, so Placement stops offering sizes
    that no longer fit anywhere.
    """
    sizes = [p.slices for p in profiles if legal_starts(p, slots, profiles)]
    return max(sizes, default=0)


def _score(slots, profiles):
    """How much room a layout leaves: the biggest block first, then how
    many profiles still fit, then how many placements remain.
    """
    return (largest_block(slots, profiles),
            len(fitting(slots, profiles)),
            sum(len(legal_starts(p, slots, profiles)) for p in profiles))


def choose_start(profile, slots, profiles):
    """The legal start that keeps the most room for what may come next
    (like a buddy allocator: small instances fill from the top, leaving the
    aligned low halves that only 4g/7g can use). None when nothing fits.
    """
    starts = legal_starts(profile, slots, profiles)
    if not starts:
        return None
    slot_of = lambda start: Slot(profile.id, start, profile.slices)  # noqa
    return max(starts, key=lambda start: (
        _score(list(slots) + [slot_of(start)], profiles), start))


def match_profile(profiles, mem_slices, compute_slices=None, ofa=0):
    """The MIG profile a request vector names: its memory slices, its SM
    slices when given, and the media extensions (+me) when OFA is asked
    for. None when no profile has that shape.
    """
    candidates = [p for p in profiles if p.slices == mem_slices
                  and (compute_slices is None
                       or p.compute_slices == compute_slices)
                  and bool(p.ofas) == bool(ofa)]
    if not candidates and not ofa:
        # A request that does not mention OFA takes a profile without one
        # if any, else the one with it (e.g. a full-size 7g).
        candidates = [p for p in profiles if p.slices == mem_slices
                      and (compute_slices is None
                           or p.compute_slices == compute_slices)]
    return min(candidates, key=lambda p: (p.ofas, p.multiprocessors),
               default=None)


def _vector(profile):
    return {'slices': profile.slices, 'compute': profile.compute_slices,
            'decoders': profile.decoders, 'jpegs': profile.jpegs,
            'ofas': profile.ofas, 'copy_engines': profile.copy_engines}


@functools.lru_cache(maxsize=None)
def _most_added(profiles, key):
    """{resource: the most of it any set of new instances could still
    take} next to the instances `key` ((profile id, start), sorted).
    """
    by_id = {p.id: p for p in profiles}
    slots = [Slot(pid, start, by_id[pid].slices) for pid, start in key]
    best = {}
    for profile in profiles:
        for start in legal_starts(profile, slots, profiles):
            after = _most_added(profiles, tuple(sorted(
                key + ((profile.id, start),))))
            for name, amount in _vector(profile).items():
                best[name] = max(best.get(name, 0),
                                 after.get(name, 0) + amount)
    return best


def most_added(slots, profiles):
    """The most of each resource ('slices', 'compute', 'decoders',
    'jpegs', 'ofas', 'copy_engines') that instances created next to
    `slots` could still take together, whatever they are: what Placement
    may still hand out without granting claims that cannot all be placed
    for want of room (slices no legal placement can reach, SM slices two
    3g leave stranded).  Exhaustive over the legal layouts (a few thousand
    on an 8-slice GPU), cached.
    """
    return _most_added(tuple(profiles), tuple(sorted(
        (s.profile_id, s.start) for s in slots)))
