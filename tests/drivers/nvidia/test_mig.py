# SPDX-License-Identifier: Apache-2.0
"""MIG allocator and Placement model: properties over random claim/release
sequences on every shipped GPU model, plus the packing choices."""

import hypothesis
from hypothesis import strategies as st
import pytest

from cyborg.drivers.nvidia import mig
from cyborg.drivers.nvidia import resources
from tests.drivers.nvidia import geometry


class PlacementSim:
    """Placement's capacity check for one provider, fed by the agent's
    published inventories and traits, and the realised instances.
    """

    def __init__(self, profiles):
        self.profiles = profiles
        self.slots = []          # realised MIG instances
        self.whole = False
        self.usage = dict.fromkeys(resources.totals(profiles), 0)

    def publish(self):
        self.invs = resources.inventories(self.profiles, self.slots,
                                          whole_in_use=self.whole)
        self.traits = resources.fit_traits(self.profiles, self.slots,
                                           self.whole)

    def grants(self, vector, trait=None):
        if trait is not None and trait not in self.traits:
            return False
        for rc, amount in vector.items():
            inv = self.invs[rc]
            if amount > inv['max_unit'] or self.usage[rc] + amount > (
                    inv['total'] - inv['reserved']):
                return False
        return True

    def allocate(self, vector, sign=1):
        for rc, amount in vector.items():
            self.usage[rc] += sign * amount


def assert_consistent(profiles, slots):
    taken = []
    for slot in slots:
        taken.extend(range(slot.start, slot.start + slot.size))
    assert len(taken) == len(set(taken)), 'overlapping placements %s' % slots
    by_id = {p.id: p for p in profiles}
    full = mig.full_profile(profiles)
    for attr in ('decoders', 'jpegs', 'ofas', 'copy_engines'):
        assert sum(getattr(by_id[s.profile_id], attr) for s in slots) \
            <= getattr(full, attr)
    for p in profiles:
        assert sum(1 for s in slots if s.profile_id == p.id) \
            <= p.max_instances
        assert all(s.start in p.placements for s in slots
                   if s.profile_id == p.id)


ops = st.lists(st.tuples(st.sampled_from(['claim', 'claim', 'release',
                                          'whole']),
                         st.integers(0, 50)), max_size=60)


@pytest.mark.parametrize('model', geometry.MODELS)
@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(ops=ops)
def test_sequential_claims_never_overlap_nor_fail_to_place(model, ops):
    profiles = geometry.profiles(model)
    total = resources.totals(profiles)
    sim = PlacementSim(profiles)
    held = []          # (slot or 'whole', vector)
    for op, n in ops:
        sim.publish()
        if op == 'release' and held:
            slot, vector = held.pop(n % len(held))
            if slot == 'whole':
                sim.whole = False
            else:
                sim.slots.remove(slot)
            sim.allocate(vector, -1)
        elif op == 'whole':
            if sim.grants(total):
                assert not sim.slots and not sim.whole
                sim.whole = True
                sim.allocate(total)
                held.append(('whole', total))
        elif op == 'claim':
            profile = profiles[n % len(profiles)]
            vector = resources.profile_vector(profile)
            if not sim.grants(vector, resources.fit_trait(profile)):
                continue
            start = mig.choose_start(profile, sim.slots, profiles)
            # Placement granted it, so a legal placement must exist.
            assert start is not None, (profile.name, sim.slots)
            slot = mig.Slot(profile.id, start, profile.slices)
            sim.slots.append(slot)
            sim.allocate(vector)
            held.append((slot, vector))
        assert_consistent(profiles, sim.slots)
        assert not (sim.whole and sim.slots)
        for rc, used in sim.usage.items():
            assert used <= total[rc]


@pytest.mark.parametrize('model', geometry.MODELS)
@hypothesis.settings(max_examples=100, deadline=None)
@hypothesis.given(picks=st.lists(st.integers(0, 50), min_size=2, max_size=8))
def test_concurrent_claims_fail_cleanly_never_overlap(model, picks):
    """Claims granted against one published layout (before the agent
    republishes) may not all place; the losers fail, nothing overlaps.
    """
    profiles = geometry.profiles(model)
    sim = PlacementSim(profiles)
    sim.publish()
    granted = []
    for n in picks:
        profile = profiles[n % len(profiles)]
        vector = resources.profile_vector(profile)
        if sim.grants(vector, resources.fit_trait(profile)):
            sim.allocate(vector)
            granted.append(profile)
    for profile in granted:
        start = mig.choose_start(profile, sim.slots, profiles)
        if start is not None:
            sim.slots.append(mig.Slot(profile.id, start, profile.slices))
        assert_consistent(profiles, sim.slots)


def _profile(model, name):
    return next(p for p in geometry.profiles(model) if p.name == name)


def test_small_instances_fill_from_the_top():
    profiles = geometry.profiles('h200')
    one = _profile('h200', '1g.18gb')
    assert mig.choose_start(one, [], profiles) == 6
    slots = [mig.Slot(one.id, 6, 1)]
    # The aligned low half stays free for a 4g, which only fits at 0.
    four = _profile('h200', '4g.71gb')
    assert mig.choose_start(four, slots, profiles) == 0
    three = _profile('h200', '3g.71gb')
    assert mig.choose_start(three, slots, profiles) == 0


def test_fragmented_layout_lowers_max_unit_and_fit_traits():
    profiles = geometry.profiles('h200')
    one = _profile('h200', '1g.18gb')
    slots = [mig.Slot(one.id, 0, 1), mig.Slot(one.id, 4, 1)]
    invs = resources.inventories(profiles, slots)
    assert invs[resources.MEM_SLICE]['max_unit'] == 2
    traits = resources.fit_traits(profiles, slots)
    assert 'CUSTOM_MIG_FIT_2G_35GB' in traits
    assert 'CUSTOM_MIG_FIT_3G_71GB' not in traits
    assert 'CUSTOM_MIG_FIT_7G_141GB' not in traits


def test_full_layout_fences_leftover_slice():
    """7 × 1g leaves memory slice 7 free, but nothing can use it."""
    profiles = geometry.profiles('h200')
    one = _profile('h200', '1g.18gb')
    slots = [mig.Slot(one.id, s, 1) for s in range(7)]
    invs = resources.inventories(profiles, slots)
    assert invs[resources.MEM_SLICE]['reserved'] == 8
    assert resources.fit_traits(profiles, slots) == set()


def test_orphans_are_reserved():
    profiles = geometry.profiles('h200')
    three = _profile('h200', '3g.71gb')
    orphan = mig.Slot(three.id, 4, 4)
    invs = resources.inventories(profiles, [orphan], [orphan])
    assert invs[resources.MEM_SLICE]['reserved'] == 4
    assert invs[resources.COMPUTE_SLICE]['reserved'] == 3
    assert invs[resources.NVDEC]['reserved'] == 3


def test_me_profile_takes_the_only_ofa():
    profiles = geometry.profiles('h200')
    me = _profile('h200', '1g.18gb+me')
    slots = [mig.Slot(me.id, 6, 1)]
    assert mig.legal_starts(me, slots, profiles) == []
    assert mig.legal_starts(_profile('h200', '7g.141gb'), [],
                            profiles) == [0]


@pytest.mark.parametrize('mem,compute,ofa,name', [
    (1, 1, 0, '1g.18gb'), (1, 1, 1, '1g.18gb+me'), (2, 1, 0, '1g.35gb'),
    (2, 2, 0, '2g.35gb'), (4, 3, 0, '3g.71gb'), (4, 4, 0, '4g.71gb'),
    (8, 7, 1, '7g.141gb'), (8, 7, 0, '7g.141gb'), (3, None, 0, None)])
def test_request_vector_names_a_profile(mem, compute, ofa, name):
    found = mig.match_profile(geometry.profiles('h200'), mem, compute, ofa)
    assert (found.name if found else None) == name


def test_non_mig_gpu_is_one_whole_slice():
    assert resources.totals(()) == {resources.MEM_SLICE: 1,
                                    resources.COMPUTE_SLICE: 1}
    assert resources.inventories((), [])[resources.MEM_SLICE]['total'] == 1
