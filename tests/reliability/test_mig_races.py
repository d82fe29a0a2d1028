# SPDX-License-Identifier: Apache-2.0
"""Two MIG claims that Placement grants against the same publication,
bound at the same instant (issue 17, item 6).

Placement sees counts, not positions: between one publication of what
fits and the next, it can grant two claims that each fit alone and not
together.  Hypothesis draws a layout of claimed instances on an H200 and
two profiles; when the agent's published inventories and fit traits let
Placement grant both, two threads bind them through the real driver over
the fake NVML at once (a barrier).  Every failure must be one the model
cannot avoid -- no pair of placements holds both -- never one our choice
of placement caused, and nothing may overlap.  The failure rate is a
figure (tests/reliability/figures.py); the exhaustive count over every
layout is `python tools/mig_race_figures.py h200` (docs/nvidia-gpus.md).
"""

import collections
import json

import hypothesis
from hypothesis import strategies as st
import pytest

from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import driver as nvidia
from cyborg.drivers.nvidia import mig
from cyborg.drivers.nvidia import resources
from cyborg.objects import device as records
from cyborg_emulators.nvidia import fake_sysfs
from tests import racing
from tests.reliability import figures

GPU = '0000:1b:00.0'
TALLY = collections.Counter()


@pytest.fixture(scope='module')
def host(tmp_path_factory):
    host = fake_sysfs.FakeGpuHost({'iommu': True, 'gpus': [{
        'model': 'h200', 'pci_address': GPU, 'mig_mode': 1}]},
        root=str(tmp_path_factory.mktemp('mig-races')))
    host.install()
    yield host
    host.uninstall()
    figures.record('race: two MIG claims granted together (H200)',
                   **dict(sorted(TALLY.items())))


def _group(profile):
    group = {'resources:%s' % rc: str(n)
             for rc, n in resources.profile_vector(profile).items()}
    group['trait:%s' % resources.fit_trait(profile)] = 'required'
    return group


def _handle(uuid, profile):
    return {'uuid': uuid, 'attach_type': 'PCI',
            'attach_info': json.dumps(records.pci_info(GPU)),
            'request_group': _group(profile)}


def _granted(dep, usage, a, b):
    """Placement's answer to both claims against one publication."""
    invs = dep.inventories
    va, vb = resources.profile_vector(a), resources.profile_vector(b)
    for profile, vector in ((a, va), (b, vb)):
        if resources.fit_trait(profile) not in dep.traits:
            return False
        if any(n > invs[rc]['max_unit'] for rc, n in vector.items()):
            return False
    return all(usage[rc] + va.get(rc, 0) + vb.get(rc, 0)
               <= invs[rc]['total'] - invs[rc]['reserved']
               for rc in set(va) | set(vb))


def _possible(profiles, slots, a, b):
    """Whether any two placements hold both (in either order)."""
    for first, second in ((a, b), (b, a)):
        for start in mig.legal_starts(first, slots, profiles):
            after = slots + [mig.Slot(first.id, start, first.slices)]
            if mig.legal_starts(second, after, profiles):
                return True
    return False


@hypothesis.settings(max_examples=200, deadline=None,
                     suppress_health_check=[
                         hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(layout=st.lists(st.tuples(st.integers(0, 20),
                                            st.integers(0, 20)),
                                  max_size=6),
                  pair=st.tuples(st.integers(0, 20), st.integers(0, 20)))
def test_two_granted_claims_fail_only_when_the_model_cannot_hold_both(
        host, layout, pair):
    CONF.set_override('sysfs_root', host.root, group='nvidia')
    uuid = host.nvml.gpu_info()[0]['uuid']
    host.nvml.reset_gpu(uuid)
    drv = nvidia.NvidiaDriver(backend=nvml.PynvmlBackend(retry_delay=0),
                              sysfs=host.sysfs)
    drv.state.backend.open()
    [gpu] = drv.state.backend.gpus()
    profiles = list(gpu.profiles)
    slots, held = [], []
    for n, pick in layout:            # instances bound earlier
        profile = profiles[n % len(profiles)]
        starts = mig.legal_starts(profile, slots, profiles)
        if not starts:
            continue
        start = starts[pick % len(starts)]
        host.nvml.create_gi(uuid, profile.id, start)
        slots.append(mig.Slot(profile.id, start, profile.slices))
        held.append({'uuid': 'held-%d' % len(held), 'attach_info':
                     json.dumps(dict(records.pci_info(GPU),
                                     mig_profile=profile.name,
                                     mig_start=start))})
    drv.reconcile({GPU: held})
    [device] = drv.discover()
    dep = device.deployables[0]
    usage = collections.Counter()
    by_id = {p.id: p for p in profiles}
    for slot in slots:
        usage.update(resources.profile_vector(by_id[slot.profile_id]))
    # Claims for profiles the publication says fit (the others Placement
    # refuses on the fit trait alone).
    fitting = [p for p in profiles if resources.fit_trait(p) in dep.traits]
    if not fitting:
        TALLY['nothing_fits'] += 1
        return
    a, b = (fitting[n % len(fitting)] for n in pair)
    if not _granted(dep, usage, a, b):
        TALLY['not_granted'] += 1
        return
    TALLY['granted_pairs'] += 1
    outcomes = racing.race([
        lambda: drv.prepare(GPU, _handle('a', a)),
        lambda: drv.prepare(GPU, _handle('b', b))])
    failed = [e for kind, e in outcomes if kind == 'error']
    for error in failed:
        assert isinstance(error, base.PrepareError), error
    placed = [info for kind, info in outcomes if kind == 'ok']
    live = drv.state.backend.instances(uuid)
    assert len(live) == len(slots) + len(placed)      # nothing extra
    taken = [s for i in live for s in range(i.start, i.start + i.size)]
    assert len(taken) == len(set(taken))               # no overlap
    if failed:
        TALLY['pairs_with_a_failure'] += 1
        # Placement granted what no placement can hold: the model's limit,
        # not a placement we chose badly.
        assert not _possible(profiles, slots, a, b), (
            [p.name for p in (a, b)], slots, failed)
