# SPDX-License-Identifier: Apache-2.0
"""A device's phase and management state, settled by the agent before each
report from what the driver observed and what the conductor knows.

Phase says what the hardware can do (Pending, Initializing, Ready,
Reconfiguring, Passthrough, Failed, Lost). Management state says who holds
it: Managed (a binding of ours), Excluded (an operator said so), Orphaned
(held by something that is not ours: a passthrough binding or MIG
instances with no claim, after a grace period), Unclaimed (free, healthy,
nothing to do) and Unknown, the fail-safe answer whenever there is no
established one (no word from the conductor yet, occupancy unreadable, a
driver binding we do not understand, an orphan timer still running).

Only a Ready device that is Managed or Unclaimed, or a Passthrough one
(on a VFIO driver, ready to be handed to a VM whole) that is Unclaimed, is
offered to Placement; anything else is fenced (reserved = total,
allocations kept).  A driver must propose a phase: a device without one
is Pending (nothing says it is usable).
"""

import dataclasses

PHASES = ('Pending', 'Initializing', 'Ready', 'Reconfiguring', 'Passthrough',
          'Failed', 'Lost')
STATES = ('Managed', 'Excluded', 'Orphaned', 'Unclaimed', 'Unknown')
MODES = ('Compute', 'Passthrough', 'Unbound', 'Unknown')
OFFERED_STATES = ('Managed', 'Unclaimed')
# phase -> the management states in which Placement may hand it out.
OFFERED = {'Ready': OFFERED_STATES, 'Passthrough': ('Unclaimed',)}
ORPHAN_AFTER = 120.0     # seconds an unclaimed foreign holding may last


@dataclasses.dataclass
class Facts:
    """What the agent knows about one device when it classifies it."""
    claimed: bool = None          # None: no word from the conductor yet
    excluded: bool = False
    unowned_since: float = None   # when an unclaimed holding was first seen


def condition(type_, status, reason, message=''):
    return {'type': type_, 'status': status, 'reason': reason,
            'message': message}


def _holding(obs, claimed):
    """Why the device looks held by someone else, or None."""
    if claimed:
        return None
    if obs.get('mode') == 'Passthrough' and not obs.get('adopted'):
        return 'bound to %s with no claim' % obs.get('driver')
    if obs.get('orphan_instances'):
        return '%d MIG instance(s) with no claim' % obs['orphan_instances']
    return None


def classify(device, facts, now, orphan_after=ORPHAN_AFTER):
    """Set device.phase, .management_state and .conditions in place.

    Returns the new `unowned_since` (a timer start, or None).
    """
    obs = device.observations or {}
    phase = device.phase
    conditions = list(obs.get('conditions', []))
    if phase is None:
        phase = 'Pending'
        conditions.append(condition(
            'DriverReady', 'Unknown', 'NoPhaseProposed',
            'the driver did not say what the device can do'))
    unowned_since = None
    if phase == 'Ready' and obs.get('mode') == 'Passthrough':
        # On a VFIO driver it is no CUDA device, claimed or not.
        phase = 'Passthrough'
    if facts.excluded:
        state, reason = 'Excluded', 'ExcludedByOperator'
    elif facts.claimed is None:
        state, reason = 'Unknown', 'NoClaimInformation'
    elif not obs.get('occupancy_known', True):
        state, reason = 'Unknown', 'OccupancyUnknown'
    elif obs.get('mode') == 'Unknown':
        state, reason = 'Unknown', 'UnknownDriverBinding'
    elif facts.claimed:
        state, reason = 'Managed', 'Claimed'
    else:
        holding = _holding(obs, facts.claimed)
        if holding is None:
            state, reason = 'Unclaimed', 'NoClaim'
        else:
            unowned_since = (facts.unowned_since
                             if facts.unowned_since is not None else now)
            if now - unowned_since >= orphan_after:
                state, reason = 'Orphaned', 'NoOwner'
            else:
                state, reason = 'Unknown', 'OrphanPending'
            conditions.append(condition(
                'Ownership', 'False', reason, holding))
    device.phase = phase
    device.management_state = state
    conditions.append(condition('Managed', str(state == 'Managed'), reason))
    device.conditions = conditions
    return unowned_since


def offered(device):
    """Whether Placement may hand out this device now."""
    return device.management_state in OFFERED.get(device.phase, ())
