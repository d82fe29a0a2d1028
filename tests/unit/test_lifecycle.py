# SPDX-License-Identifier: Apache-2.0
"""The lifecycle rules of `cyborg.common.lifecycle`, one table row a rule.

Each row of CASES is: what the driver observed (its proposed phase and
`observations`), what the agent knows (`Facts`: claimed, excluded, when an
unowned holding was first seen) and how long ago that was → the phase, the
management state, the reason (of the `Managed` condition, and of the
`Ownership` condition when there is one) and the orphan timer `classify`
returns. docs/gpu-lifecycle.md is the prose form of this table.

The rules follow the GPU glossary (issue 17):
- a GPU on a VFIO driver is in phase Passthrough whether claimed or not;
- a device with no proposed phase is Pending, with a condition saying so
  (drivers propose their phases: the NVIDIA driver's Pending/Failed for
  GPUs NVML cannot see and Initializing while the MIG mode or the driver
  changes are in tests/drivers/nvidia/test_phase.py; fake and pci propose
  Ready);
- orphaned MIG instances on a Compute-mode GPU are the one deliberate
  extension to the glossary (docs/gpu-lifecycle.md, "Orphaned MIG
  instances"): they orphan the GPU like a foreign VFIO binding does.
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
VARIANT_VFIO = {'mode': 'Passthrough', 'driver': 'nvgrace-gpu-vfio-pci'}
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
        (('Passthrough', VFIO, NO_WORD),
         ('Passthrough', 'Unknown', 'NoClaimInformation', None, None)),
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
        (('Passthrough', VFIO, lifecycle.Facts(claimed=False, excluded=True,
                                               unowned_since=NOW - 60)),
         ('Passthrough', 'Excluded', 'ExcludedByOperator', None, None)),
    # --- what the agent cannot tell: Unknown ------------------------------
    'occupancy-unreadable':
        (('Ready', NO_OCCUPANCY, FREE),
         ('Ready', 'Unknown', 'OccupancyUnknown', None, None)),
    'occupancy-unreadable-beats-a-claim':
        (('Ready', NO_OCCUPANCY, CLAIMED),
         ('Ready', 'Unknown', 'OccupancyUnknown', None, None)),
    'driver-binding-not-understood':
        (('Failed', UNKNOWN_DRIVER, FREE),
         ('Failed', 'Unknown', 'UnknownDriverBinding', None, None)),
    'driver-binding-not-understood-beats-a-claim':
        (('Failed', UNKNOWN_DRIVER, CLAIMED),
         ('Failed', 'Unknown', 'UnknownDriverBinding', None, None)),
    # --- a binding of ours: Managed ---------------------------------------
    'claimed-compute':
        (('Ready', COMPUTE, CLAIMED),
         ('Ready', 'Managed', 'Claimed', None, None)),
    'claimed-passthrough':
        (('Passthrough', VFIO, CLAIMED),
         ('Passthrough', 'Managed', 'Claimed', None, None)),
    'ready-on-vfio-is-passthrough-whatever-the-driver-said':
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
    'adopted-passthrough-is-ours':
        (('Passthrough', VFIO_ADOPTED, FREE),
         ('Passthrough', 'Unclaimed', 'NoClaim', None, None)),
    'free-on-a-vfio-variant-driver':
        (('Passthrough', dict(VARIANT_VFIO, adopted=True), FREE),
         ('Passthrough', 'Unclaimed', 'NoClaim', None, None)),
    'initializing-free':
        (('Initializing', COMPUTE, FREE),
         ('Initializing', 'Unclaimed', 'NoClaim', None, None)),
    'reconfiguring-free':
        (('Reconfiguring', COMPUTE, FREE),
         ('Reconfiguring', 'Unclaimed', 'NoClaim', None, None)),
    'failed-free-keeps-its-phase':
        (('Failed', COMPUTE, FREE),
         ('Failed', 'Unclaimed', 'NoClaim', None, None)),
    'lost-free-keeps-its-phase':
        (('Lost', COMPUTE, FREE),
         ('Lost', 'Unclaimed', 'NoClaim', None, None)),
    'no-proposed-phase-is-pending':
        ((None, {}, FREE),
         ('Pending', 'Unclaimed', 'NoClaim', None, None)),
    'no-observations-and-no-phase-is-pending':
        ((None, None, FREE),
         ('Pending', 'Unclaimed', 'NoClaim', None, None)),
    'ready-without-observations':
        (('Ready', None, FREE),
         ('Ready', 'Unclaimed', 'NoClaim', None, None)),
    # --- held by something that is not ours: wait, then Orphaned ----------
    'foreign-passthrough-first-seen-starts-the-wait':
        (('Passthrough', VFIO, FREE),
         ('Passthrough', 'Unknown', 'OrphanPending', VFIO_HOLDING, NOW)),
    'foreign-passthrough-still-waiting':
        (('Passthrough', VFIO, seen(AFTER - 0.1)),
         ('Passthrough', 'Unknown', 'OrphanPending', VFIO_HOLDING,
          NOW - AFTER + 0.1)),
    'foreign-passthrough-orphaned-at-exactly-the-wait':
        (('Passthrough', VFIO, seen(AFTER)),
         ('Passthrough', 'Orphaned', 'NoOwner', VFIO_HOLDING, NOW - AFTER)),
    'foreign-passthrough-orphaned-later':
        (('Passthrough', VFIO, seen(3 * AFTER)),
         ('Passthrough', 'Orphaned', 'NoOwner', VFIO_HOLDING,
          NOW - 3 * AFTER)),
    # The one deliberate extension to the glossary: MIG instances nobody
    # claims on a Compute-mode GPU orphan it too (docs/gpu-lifecycle.md).
    'mig-orphans-first-seen-start-the-wait':
        (('Ready', MIG_ORPHANS, FREE),
         ('Ready', 'Unknown', 'OrphanPending', MIG_HOLDING, NOW)),
    'mig-orphans-orphaned-after-the-wait':
        (('Ready', MIG_ORPHANS, seen(AFTER)),
         ('Ready', 'Orphaned', 'NoOwner', MIG_HOLDING, NOW - AFTER)),
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
    no_phase = [] if phase is not None else [lifecycle.condition(
        'DriverReady', 'Unknown', 'NoPhaseProposed',
        'the driver did not say what the device can do')]
    assert device.conditions == no_phase + ownership + [managed]
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


# docs/gpu-lifecycle.md, "What Placement is offered": only these three.
DOCUMENTED_OFFERED = {('Ready', 'Managed'), ('Ready', 'Unclaimed'),
                      ('Passthrough', 'Unclaimed')}
# phase x management state (all 35 pairs) -> offered to Placement
OFFERED = [(phase, state, (phase, state) in DOCUMENTED_OFFERED)
           for phase in lifecycle.PHASES for state in lifecycle.STATES]


@pytest.mark.parametrize('phase,state,offered', OFFERED,
                         ids=['%s-%s' % row[:2] for row in OFFERED])
def test_only_ready_and_ours_is_offered(phase, state, offered):
    device = types.SimpleNamespace(phase=phase, management_state=state)

    assert lifecycle.offered(device) is offered
