# SPDX-License-Identifier: Apache-2.0
"""This host's accelerator resource providers in Placement.

The agent owns one child provider per deployable under the compute-node
provider (which Nova owns and we never modify). `ProviderSync` compares the
wanted tree with what it last wrote and touches Placement only where they
differ: a pass in which nothing changed makes no Placement call at all.
"""

import re
import time
import uuid

from oslo_log import log

from cyborg.common import pci
from cyborg.placement import client as placement

LOG = log.getLogger(__name__)

RP_NAMESPACE = uuid.UUID('6d1b7c1e-3f0a-5b8e-9a57-5cbd1f2f7a10')
_TRAIT_CHARS = re.compile(r'[^A-Z0-9_]')


def provider_uuid(nodename, deployable_name):
    """Deterministic, and unique per host (unlike Cyborg's uuid3(name))."""
    return str(uuid.uuid5(RP_NAMESPACE, '%s_%s' % (nodename,
                                                   deployable_name)))


def _trait(*parts):
    return 'CUSTOM_' + _TRAIT_CHARS.sub('_', '_'.join(parts).upper())


def device_traits(device):
    """Vendor/product traits in both families that real profiles use."""
    vendor = pci.vendor_name(device.vendor)
    traits = {placement.OWNER_TRAIT}
    if device.product_id:
        product = device.product_id.upper()
        traits.add(_trait(vendor, product))                   # Cyborg today
        traits.add(_trait(device.type, vendor))               # older family
        traits.add(_trait(device.type, 'PRODUCT_ID', product))
    return traits


def wanted_providers(nodename, devices, fenced_cpids=()):
    """{rp_uuid: {name, traits, inventories}} for a discovery result.

    fenced_cpids: control-path keys of devices in maintenance, whose
    inventory is kept but fully reserved.
    """
    wanted = {}
    for device in devices:
        fenced = device.cpid_key in fenced_cpids
        for dep in device.deployables:
            if dep.num_accelerators < 1:
                continue  # Placement refuses total=0: no provider then.
            wanted[provider_uuid(nodename, dep.name)] = {
                'name': '%s_%s' % (nodename, dep.name),
                'traits': frozenset(device_traits(device) | set(dep.traits)),
                'inventories': dep.placement_inventories(fenced),
            }
    return wanted


class ComputeNodeNotFound(Exception):
    pass


class ProviderSync:

    def __init__(self, client, nodename):
        self.client = client
        self.nodename = nodename
        self.root_uuid = None
        self._written = None     # what Placement held after our last pass
        self._seen = {}          # rp uuid → (generation, what we left there)

    def find_compute_node(self):
        rp = self.client.provider_by_name(self.nodename)
        if rp is None:
            raise ComputeNodeNotFound(
                'No resource provider named %r in Placement: is nova-compute '
                'running on this host, and does [agent] '
                'resource_provider_name match its hypervisor nodename?'
                % self.nodename)
        self.root_uuid = rp['uuid']
        return self.root_uuid

    def wait_for_compute_node(self, max_delay=60.0, stop=None,
                              sleep=time.sleep):
        """Look the compute node up, backing off while it is absent."""
        delay = 1.0
        while True:
            try:
                return self.find_compute_node()
            except (ComputeNodeNotFound, placement.PlacementError) as e:
                LOG.warning('%s; retrying in %.0fs', e, delay)
            if stop is not None and stop.is_set():
                raise ComputeNodeNotFound('stopped while waiting')
            sleep(delay)
            delay = min(delay * 2, max_delay)

    def sync(self, wanted, full=False):
        """Bring Placement in line with `wanted`; returns the write count."""
        if not full and wanted == self._written:
            return 0
        if self.root_uuid is None:
            self.find_compute_node()
        self._written = None
        writes = 0
        skipped = False
        existing = {rp['uuid']: rp for rp in self.client.tree(self.root_uuid)}
        ours = {rp['uuid'] for rp in self.client.tree(
            self.root_uuid, required=placement.OWNER_TRAIT)}
        for rp_uuid, want in sorted(wanted.items()):
            done = self._sync_one(rp_uuid, want, existing, ours)
            if done is None:
                skipped = True
            else:
                writes += done
        for rp_uuid in sorted(ours - set(wanted)):
            writes += self._retire(rp_uuid)
        # A skipped provider is looked at again on the next pass.
        self._written = None if skipped else wanted
        return writes

    def _sync_one(self, rp_uuid, want, existing, ours):
        """Writes made for one provider; None when it is not ours."""
        writes = 0
        if (rp_uuid in ours and self._seen.get(rp_uuid)
                == (existing[rp_uuid]['generation'], want)):
            # Nobody changed it since we left it as wanted: no need to read
            # its traits and inventories (full resyncs stay cheap).
            return 0
        if rp_uuid not in existing:
            rp = self.client.create_provider(rp_uuid, want['name'],
                                             self.root_uuid)
            writes += 1
            generation = rp['generation']
            current_traits, current_inv = set(), {}
        else:
            generation, current_traits = self.client.traits(rp_uuid)
            if rp_uuid not in ours and not self._half_made(
                    existing[rp_uuid], current_traits):
                LOG.error('Provider %s (%s) lacks %s: another service owns '
                          'it, leaving it alone', rp_uuid, want['name'],
                          placement.OWNER_TRAIT)
                return None
            generation, current_inv = self.client.inventories(rp_uuid)
        self.client.ensure_traits(want['traits'])
        for rc in want['inventories']:
            self.client.ensure_resource_class(rc)
        if set(want['traits']) != current_traits:
            generation = self._retry(rp_uuid, generation, lambda g: (
                self.client.put_traits(rp_uuid, g, want['traits'])),
                lambda: self.client.traits(rp_uuid)[0])
            writes += 1
        inventories = {rc: dict(current_inv.get(rc, {}), **inv)
                       for rc, inv in want['inventories'].items()}
        fitted = self._fit_fences(rp_uuid, inventories)
        if fitted != current_inv:
            # Fences are fitted again after each read of the generation:
            # to the allocations of the generation the PUT names.
            generation = self._retry(rp_uuid, generation, lambda g: (
                self.client.put_inventories(
                    rp_uuid, g, self._fit_fences(rp_uuid, inventories))),
                lambda: self.client.inventories(rp_uuid)[0])
            writes += 1
        self._seen[rp_uuid] = (generation, want)
        return writes

    def _fit_fences(self, rp_uuid, inventories):
        """Fenced inventories (reserved = total) reserve only what the
        provider's allocations leave free: nothing more fits, and
        Placement sees no usage above capacity. One GET of the usages,
        only for a provider with a fence.
        """
        if not any(inv.get('reserved', 0) >= inv['total']
                   for inv in inventories.values()):
            return inventories
        return placement.fit_fences(inventories,
                                    self.client.usages(rp_uuid))

    def _half_made(self, rp, traits):
        """One of ours whose creation stopped before its traits were set:
        our uuid (from our own namespace), under our compute node, and no
        service's OWNER_* trait. Adopt it rather than strand it.
        """
        if rp['parent_provider_uuid'] != self.root_uuid:
            return False
        if any(t.startswith('OWNER_') for t in traits):
            return False
        LOG.warning('Provider %s was left half-created by an earlier pass; '
                    'completing it', rp['uuid'])
        return True

    @staticmethod
    def _retry(rp_uuid, generation, write, reread, attempts=5):
        for _ in range(attempts):
            try:
                return write(generation)
            except placement.GenerationConflict:
                LOG.info('Provider %s changed under us; re-reading', rp_uuid)
                generation = reread()
        raise placement.GenerationConflict(
            'PUT', rp_uuid, 409, 'gave up after %d attempts' % attempts)

    def _retire(self, rp_uuid):
        """A device vanished: delete its provider, or fence it while
        allocations still hold it.
        """
        try:
            self.client.delete_provider(rp_uuid)
            LOG.info('Deleted provider %s of a vanished device', rp_uuid)
            return 1
        except placement.PlacementError as e:
            if e.status != 409:
                raise
        LOG.warning('Provider %s belongs to a vanished device but still has '
                    'allocations; fencing it (no free capacity) until they '
                    'are gone', rp_uuid)
        changed = self.client.update_inventories(
            rp_uuid, lambda inv: placement.fence(
                inv, True, self.client.usages(rp_uuid)))
        return 1 if changed else 0
