# SPDX-License-Identifier: Apache-2.0
"""Share pools: a GPU shared by capacity (MPS or time-slice) and the same
GPU used whole or as MIG instances exclude each other through Placement.

A driver reports a GPU in a share mode with a second deployable,
`<address>_share` (percent, MiB and slots), and a `share` observation. The
agent only lets that provider exist while it holds the GPU's *pool
consumer*: an allocation of every inventory of the GPU's own provider
(memory and compute slices, engines), made with one atomic PUT. Placement
refuses it while any whole/MIG allocation exists (the GPU is in use), and
while it exists Placement refuses every whole/MIG claim: no window in
which both kinds of claim can land on one card.

Leaving a share mode: the share provider is fenced (reserved = total); it
is deleted, then the pool allocation, only once Placement shows no share
allocation on it (until then: condition `Share` False, `ShareInUse`).

The contract (§4.4) draws the share provider as a child of the GPU's;
ProviderSync puts every deployable directly under the compute node, so it
is a sibling here. Exclusion does not depend on the tree: it comes from
the pool consumer's allocation on the GPU provider.
"""

import uuid

from oslo_log import log

from cyborg.agent import providers
from cyborg.common import lifecycle
from cyborg.placement import client as placement

LOG = log.getLogger(__name__)

SUFFIX = '_share'
MODES = ('mps', 'time-slice')
POOL_PROJECT = 'cyborg-gpu-pool'
POOL_USER = 'cyborg-gpu-pool'
CONSUMER_TYPE = 'GPU_POOL'


def pool_consumer(gpu_rp_uuid):
    """The pool consumer of a GPU provider (stable across restarts)."""
    return str(uuid.uuid5(uuid.UUID(gpu_rp_uuid), 'pool'))


def _split(device):
    """(the GPU's own deployable, its share deployable or None)."""
    own = [d for d in device.deployables if not d.name.endswith(SUFFIX)]
    share = [d for d in device.deployables if d.name.endswith(SUFFIX)]
    return (own[0] if own else None), (share[0] if share else None)


def _wants(obs):
    return bool(obs) and obs.get('mode') in MODES and obs.get('ready', True) \
        and not obs.get('draining')


class SharePools:

    def __init__(self, client, nodename):
        self.client = client
        self.nodename = nodename
        self.requested = {}   # cpid key → {mode, slots} (from the conductor)
        self.held = set()     # GPU deployable names whose pool we hold
        self._known = set()   # names whose pool state was read at start
        self.outcomes = {}    # GPU deployable name → Share condition

    def set_requested(self, share):
        changed = share != self.requested
        self.requested = dict(share)
        return changed

    def modes_by_name(self, devices):
        """What operators asked, keyed the way drivers name GPUs."""
        out = {}
        for device in devices:
            own, _ = _split(device)
            wanted = self.requested.get(device.cpid_key)
            if own is not None and wanted:
                out[own.name] = wanted
        return out

    # Before the report: what the pool state lets us publish --------------

    def filter(self, devices):
        """Drop the share deployable of a GPU whose pool we do not hold
        (a draining one is kept: bindings still hold shares); add the
        `Share` condition. Returns devices.
        """
        for device in devices:
            own, share = _split(device)
            if own is None:
                continue
            obs = (device.observations or {}).get('share')
            if share is not None and not (obs or {}).get('draining') \
                    and not self._holds(own):
                device.deployables = [own] + [
                    d for d in device.deployables
                    if d is not own and d is not share]
            condition = self._condition(device, own, obs)
            if condition is not None:
                device.conditions = list(device.conditions or []) + [
                    condition]
        return devices

    def _holds(self, own):
        if own.name not in self._known and own.rp_uuid:
            # After a restart: the pool allocation is in Placement.
            try:
                allocations, _ = self.client.allocations(
                    pool_consumer(own.rp_uuid))
            except placement.PlacementError as e:
                LOG.warning('Cannot read the share pool of %s: %s',
                            own.name, e)
                return False
            self._known.add(own.name)
            if allocations:
                self.held.add(own.name)
        return own.name in self.held

    def _condition(self, device, own, obs):
        requested = self.requested.get(device.cpid_key)
        if own.name in self.outcomes:
            return self.outcomes[own.name]
        if obs is None:
            if requested and requested.get('mode') in MODES:
                return lifecycle.condition(
                    'Share', 'False', 'Unsupported',
                    'driver %s cannot share this device'
                    % own.driver_name)
            return None
        if not obs.get('ready', True):
            return lifecycle.condition('Share', 'False', 'Unsupported',
                                       obs.get('why', ''))
        if _wants(obs):
            if own.name in self.held:
                return lifecycle.condition('Share', 'True', 'Pooled',
                                           self._describe(obs))
            return lifecycle.condition('Share', 'False', 'Pending',
                                       'share pool not set up yet')
        return None

    @staticmethod
    def _describe(obs):
        text = '%s, %d slots' % (obs['mode'], obs['slots'])
        if obs.get('enforcer'):
            text += ', enforced by the %s' % obs['enforcer']
        return text

    # After Placement sync: take or give back pools ------------------------

    def apply(self, devices):
        """Take the pool of each GPU that should be shared, dissolve the
        pools of GPUs that should not. True when the share providers to
        publish (or a condition) changed.
        """
        changed = False
        for device in devices:
            own, share = _split(device)
            if own is None or not own.rp_uuid:
                continue
            obs = (device.observations or {}).get('share') or {}
            before = self.outcomes.get(own.name)
            if _wants(obs) and own.name not in self.held:
                outcome = self._take(own, obs)
            elif not _wants(obs) and own.name in self.held:
                outcome = self._dissolve(own, share is not None)
            elif _wants(obs):
                outcome = lifecycle.condition('Share', 'True', 'Pooled',
                                              self._describe(obs))
            else:
                outcome = None
            if outcome is None:
                self.outcomes.pop(own.name, None)
            else:
                self.outcomes[own.name] = outcome
            changed = changed or outcome != before
        return changed

    def _take(self, own, obs):
        rp = own.rp_uuid
        try:
            _, inventories = self.client.inventories(rp)
            whole = {rc: inv['total'] for rc, inv in inventories.items()}
            self.client.put_allocations(
                pool_consumer(rp), {rp: whole}, POOL_PROJECT, POOL_USER,
                consumer_type=CONSUMER_TYPE)
        except placement.PlacementError as e:
            if e.status != 409:
                LOG.warning('Could not make GPU %s a share pool: %s',
                            own.name, e)
                return lifecycle.condition('Share', 'False', 'Pending',
                                           str(e)[:200])
            used = {rc: n for rc, n in self._usages(rp).items() if n}
            if used:
                LOG.info('GPU %s stays whole/MIG: in use (%s)', own.name,
                         used)
                return lifecycle.condition(
                    'Share', 'False', 'GpuInUse',
                    'whole-GPU or MIG allocations hold it: %s'
                    % ', '.join('%s=%d' % kv for kv in sorted(used.items())))
            return lifecycle.condition(
                'Share', 'False', 'GpuUnavailable',
                'Placement refused the pool allocation (GPU fenced?)')
        self.held.add(own.name)
        self._known.add(own.name)
        LOG.info('GPU %s is a share pool (%s)', own.name,
                 self._describe(obs))
        return lifecycle.condition('Share', 'True', 'Pooled',
                                   self._describe(obs))

    def _usages(self, rp):
        try:
            return self.client.usages(rp)
        except placement.PlacementError:
            return {}

    def _dissolve(self, own, draining):
        in_use = lifecycle.condition(
            'Share', 'False', 'ShareInUse',
            'share mode is off; the share provider is fenced until its '
            'shares are freed')
        if draining:
            return in_use        # bindings still hold shares
        rp = providers.provider_uuid(self.nodename, own.name + SUFFIX)
        if self.client.provider(rp) is not None:
            try:
                self.client.update_inventories(
                    rp, lambda inv: placement.fence(inv, True,
                                                    self._usages(rp)))
            except placement.NotFound:
                pass
            if any(self._usages(rp).values()):
                return in_use
            try:
                self.client.delete_provider(rp)
            except placement.PlacementError as e:
                if e.status != 409:
                    raise
                return in_use
        self.client.delete_allocations(pool_consumer(own.rp_uuid))
        self.held.discard(own.name)
        LOG.info('GPU %s is no longer a share pool', own.name)
        return None
