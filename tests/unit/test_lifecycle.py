# SPDX-License-Identifier: Apache-2.0
"""The lifecycle rules of `cyborg.common.lifecycle`, one table row a rule.

Each row of CASES is: what the driver observed (its proposed phase and
`observations`), what the agent knows (`Facts`: claimed, excluded, when an
unowned holding was first seen) and how long ago that was → the phase, the
management state, the reason (of the `Managed` condition, and of the
`Ownership` condition when there is one) and the orphan timer `classify`
returns. docs/gpu-lifecycle.md is the prose form of this table.

These rows document today's rules. Issue 17 (lifecycle rules per the GPU
glossary) will change the rows marked `# issue 17`:
- a GPU on `vfio-pci` will be in phase Passthrough whether claimed or not
  (today Ready until claimed, adopted or not);
- a device with no proposed phase will no longer be Ready by default
  (GPUs NVML cannot see: Pending/Failed with the reason; Initializing while
  the MIG mode or the driver is changing: set by the driver);
- orphaned MIG instances on a Compute-mode GPU are the one deliberate
  extension to the glossary that issue 17 will decide on and document.
"""

import types

import pytest

from cyborg.common import lifecycle

NOW = 10_000.0
AFTER = lifecycle.ORPHAN_AFTER          # 120 s

COMPUTE = {'mode': 'Compute', 'driver': 'nvidia'}
VFIO = {'mode': 'Passthrough', 'driver': 'vfio-pci'}
VFIO_ADOPTED = dict(VFIO, adopted=True)
UNBOUND = {'mode': 'Unbound', 'driver': None}
UNKNOWN_DRIVER = {'mode': 'Unknown', 'driver': 'nouveau'}
MIG_ORPHANS = dict(COMPUTE, orphan_instances=2)
NO_OCCUPANCY = dict(COMPUTE, occupancy_known=False)

NO_WORD = lifecycle.Facts(claimed=None)
FREE = lifecycle.Facts(claimed=False)
CLAIMED = lifecycle.Facts(claimed=True)
EXCLUDED_FREE = lifecycle.Facts(claimed=False, excluded=True)
EXCLUDED_CLAIMED = lifecycle.Facts(claimed=True, excluded=True)
EXCLUDED_NO_WORD = lifecycle.Facts(claimed=None, excluded=True)


def seen(seconds_ago, claimed=False):
    """An unowned holding first seen `seconds_ago` before NOW."""
    return lifecycle.Facts(claimed=claimed, unowned_since=NOW - seconds_ago)


VFIO_HOLDING = 'bound to vfio-pci with no claim'
MIG_HOLDING = '2 MIG instance(s) with no claim'

# id: (proposed phase, observations, facts) ->
#     (phase, management state, reason, ownership message or None,
#      returned timer start or None)
CASES = {
    # --- no word from the conductor yet: fail-safe Unknown ---------------
    'first-pass-no-claim-information':
        (('Ready', COMPUTE, NO_WORD),
         ('Ready', 'Unknown', 'NoClaimInformation', None, None)),
    'no-word-beats-a-foreign-holding':
        (('Ready', VFIO, NO_WORD),
         ('Ready', 'Unknown', 'NoClaimInformation', None, None)),
    # --- an operator's exclusion wins over everything ---------------------
    'excluded-free':
        (('Ready', COMPUTE, EXCLUDED_FREE),
         ('Ready', 'Excluded', 'ExcludedByOperator', None, None)),
    'excluded-wins-over-a-claim':
        (('Ready', COMPUTE, EXCLUDED_CLAIMED),
         ('Ready', 'Excluded', 'ExcludedByOperator', None, None)),
    'excluded-wins-over-no-word':
        (('Ready', COMPUTE, EXCLUDED_NO_WORD),
         ('Ready', 'Excluded', 'ExcludedByOperator', None, None)),
    'excluded-wins-over-unreadable-occupancy':
        (('Ready', NO_OCCUPANCY, EXCLUDED_FREE),
         ('Ready', 'Excluded', 'ExcludedByOperator', None, None)),
    'excluded-stops-the-orphan-timer':
        (('Ready', VFIO, lifecycle.Facts(claimed=False, excluded=True,
                                         unowned_since=NOW - 60)),
         ('Ready', 'Excluded', 'ExcludedByOperator', None, None)),
    # --- what the agent cannot tell: Unknown ------------------------------
    'occupancy-unreadable':
        (('Ready', NO_OCCUPANCY, FREE),
         ('Ready', 'Unknown', 'OccupancyUnknown', None, None)),
    'occupancy-unreadable-beats-a-claim':
        (('Ready', NO_OCCUPANCY, CLAIMED),
         ('Ready', 'Unknown', 'OccupancyUnknown', None, None)),
    'driver-binding-not-understood':
        (('Ready', UNKNOWN_DRIVER, FREE),
         ('Ready', 'Unknown', 'UnknownDriverBinding', None, None)),
    'driver-binding-not-understood-beats-a-claim':
        (('Ready', UNKNOWN_DRIVER, CLAIMED),
         ('Ready', 'Unknown', 'UnknownDriverBinding', None, None)),
    # --- a binding of ours: Managed ---------------------------------------
    'claimed-compute':
        (('Ready', COMPUTE, CLAIMED),
         ('Ready', 'Managed', 'Claimed', None, None)),
    'claimed-passthrough-becomes-phase-passthrough':
        (('Ready', VFIO, CLAIMED),
         ('Passthrough', 'Managed', 'Claimed', None, None)),
    'claimed-passthrough-failed-stays-failed':
        (('Failed', VFIO, CLAIMED),
         ('Failed', 'Managed', 'Claimed', None, None)),
    'claim-ends-the-orphan-wait':
        (('Ready', MIG_ORPHANS, seen(60, claimed=True)),
         ('Ready', 'Managed', 'Claimed', None, None)),
    # --- free and ours: Unclaimed, never orphaned -------------------------
    'free-compute':
        (('Ready', COMPUTE, FREE),
         ('Ready', 'Unclaimed', 'NoClaim', None, None)),
    'free-compute-stays-unclaimed-however-long':
        (('Ready', COMPUTE, seen(10 * AFTER)),
         ('Ready', 'Unclaimed', 'NoClaim', None, None)),
    'free-unbound':
        (('Pending', UNBOUND, FREE),
         ('Pending', 'Unclaimed', 'NoClaim', None, None)),
    # issue 17: an adopted vfio-pci GPU will be phase Passthrough.
    'adopted-passthrough-is-ours':
        (('Ready', VFIO_ADOPTED, FREE),
         ('Ready', 'Unclaimed', 'NoClaim', None, None)),
    'failed-free-keeps-its-phase':
        (('Failed', COMPUTE, FREE),
         ('Failed', 'Unclaimed', 'NoClaim', None, None)),
    'lost-free-keeps-its-phase':
        (('Lost', COMPUTE, FREE),
         ('Lost', 'Unclaimed', 'NoClaim', None, None)),
    # issue 17: no proposed phase will no longer mean Ready.
    'no-proposed-phase-is-ready':
        ((None, {}, FREE),
         ('Ready', 'Unclaimed', 'NoClaim', None, None)),
    # issue 17: as above (drivers without lifecycle data: fake, pci).
    'no-observations-is-ready-and-unclaimed':
        ((None, None, FREE),
         ('Ready', 'Unclaimed', 'NoClaim', None, None)),
    # --- held by something that is not ours: wait, then Orphaned ----------
    # issue 17: an unclaimed vfio-pci GPU will be phase Passthrough.
    'foreign-passthrough-first-seen-starts-the-wait':
        (('Ready', VFIO, FREE),
         ('Ready', 'Unknown', 'OrphanPending', VFIO_HOLDING, NOW)),
    # issue 17: as above.
    'foreign-passthrough-still-waiting':
        (('Ready', VFIO, seen(AFTER - 0.1)),
         ('Ready', 'Unknown', 'OrphanPending', VFIO_HOLDING,
          NOW - AFTER + 0.1)),
    # issue 17: as above.
    'foreign-passthrough-orphaned-at-exactly-the-wait':
        (('Ready', VFIO, seen(AFTER)),
         ('Ready', 'Orphaned', 'NoOwner', VFIO_HOLDING, NOW - AFTER)),
    # issue 17: as above.
    'foreign-passthrough-orphaned-later':
        (('Ready', VFIO, seen(3 * AFTER)),
         ('Ready', 'Orphaned', 'NoOwner', VFIO_HOLDING, NOW - 3 * AFTER)),
    # issue 17: orphaned MIG instances are the extension it decides on.
    'mig-orphans-first-seen-start-the-wait':
        (('Ready', MIG_ORPHANS, FREE),
         ('Ready', 'Unknown', 'OrphanPending', MIG_HOLDING, NOW)),
    # issue 17: as above.
    'mig-orphans-orphaned-after-the-wait':
        (('Ready', MIG_ORPHANS, seen(AFTER)),
         ('Ready', 'Orphaned', 'NoOwner', MIG_HOLDING, NOW - AFTER)),
    # issue 17: as above.
    'failed-gpu-with-mig-orphans-keeps-its-phase':
        (('Failed', MIG_ORPHANS, seen(AFTER)),
         ('Failed', 'Orphaned', 'NoOwner', MIG_HOLDING, NOW - AFTER)),
}


def _device(phase, observations):
    return types.SimpleNamespace(phase=phase, observations=observations,
                                 management_state=None, conditions=None)


@pytest.mark.parametrize('given,expected', CASES.values(), ids=CASES.keys())
def test_classify(given, expected):
    phase, observations, facts = given
    want_phase, want_state, want_reason, holding, want_timer = expected
    device = _device(phase, observations)

    timer = lifecycle.classify(device, facts, NOW)

    assert (device.phase, device.management_state) == (want_phase,
                                                       want_state)
    managed = lifecycle.condition('Managed', str(want_state == 'Managed'),
                                  want_reason)
    ownership = [] if holding is None else [
        lifecycle.condition('Ownership', 'False', want_reason, holding)]
    assert device.conditions == ownership + [managed]
    assert timer == want_timer


def test_every_state_and_reason_in_the_table_is_a_known_one():
    """The table covers every management state the module declares."""
    states = {expected[1] for _, expected in CASES.values()}
    assert states == set(lifecycle.STATES)
    phases = {expected[0] for _, expected in CASES.values()}
    assert phases <= set(lifecycle.PHASES)


def test_observed_conditions_come_first_and_are_not_mutated():
    observed = [lifecycle.condition('DriverReady', 'True', 'NvidiaBound'),
                lifecycle.condition('Healthy', 'True', 'NoFault')]
    device = _device('Ready', dict(COMPUTE, conditions=observed))

    lifecycle.classify(device, CLAIMED, NOW)

    assert device.conditions == observed + [
        lifecycle.condition('Managed', 'True', 'Claimed')]
    assert len(device.observations['conditions']) == 2


@pytest.mark.parametrize('since,state', [
    (NOW - 29.9, 'Unknown'),
    (NOW - 30.0, 'Orphaned'),
], ids=['before', 'at'])
def test_the_wait_is_a_parameter(since, state):
    device = _device('Ready', VFIO)
    facts = lifecycle.Facts(claimed=False, unowned_since=since)

    lifecycle.classify(device, facts, NOW, orphan_after=30.0)

    assert device.management_state == state


# docs/gpu-lifecycle.md, "What Placement is offered": only these two.
DOCUMENTED_OFFERED = {('Ready', 'Managed'), ('Ready', 'Unclaimed')}
# phase x management state (all 35 pairs) -> offered to Placement
OFFERED = [(phase, state, (phase, state) in DOCUMENTED_OFFERED)
           for phase in lifecycle.PHASES for state in lifecycle.STATES]


@pytest.mark.parametrize('phase,state,offered', OFFERED,
                         ids=['%s-%s' % row[:2] for row in OFFERED])
def test_only_ready_and_ours_is_offered(phase, state, offered):
    device = types.SimpleNamespace(phase=phase, management_state=state)

    assert lifecycle.offered(device) is offered
