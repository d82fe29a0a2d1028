# SPDX-License-Identifier: Apache-2.0
"""The compute node's resource provider, as nova-compute reports it.

Cyborg's agent hangs its device providers under the compute node's
provider, found by the hypervisor nodename; nova-compute creates that
provider. Where no nova-compute runs (a lab, a smoke test of a distributed
deployment: `nova-cyborg-flow --create-compute-node NAME`) this makes it
the same way: named after the node, with a VCPU / MEMORY_MB / DISK_GB
inventory and the COMPUTE_ACCELERATORS trait that nova-compute reports
when its virt driver supports accelerators. Nothing is written when all of
it is there already; a provider that exists keeps its uuid.
"""

import uuid

# Room for a few small instances (the flow's flavors default to 1 VCPU,
# 512 MiB, 1 GiB).
INVENTORY = {
    'VCPU': {'total': 32},
    'MEMORY_MB': {'total': 131072, 'reserved': 512},
    'DISK_GB': {'total': 1000},
}
TRAITS = frozenset(['COMPUTE_ACCELERATORS'])
_DEFAULTS = {'reserved': 0, 'min_unit': 1, 'step_size': 1,
             'allocation_ratio': 1.0}


def _records(inventory):
    """Inventory records with Placement's defaults, as GET returns them."""
    return {rc: dict(_DEFAULTS, max_unit=record['total'], **record)
            for rc, record in inventory.items()}


def ensure(client, name, inventory=None, traits=TRAITS):
    """Find or create the provider `name` (client: placement.
    PlacementClient) and give it `inventory` and `traits` where they
    differ; returns (provider uuid, created?).
    """
    wanted = _records(INVENTORY if inventory is None else inventory)
    rp = client.provider_by_name(name)
    created = rp is None
    if created:
        rp = client.create_provider(str(uuid.uuid4()), name)
    rp_uuid = rp['uuid']
    generation, current = client.get_inventories(rp_uuid)
    if current != wanted:
        client.put_inventories(rp_uuid, generation, wanted)
    generation, current = client.get_traits(rp_uuid)
    if not current >= traits:
        client.put_traits(rp_uuid, generation, current | traits)
    return rp_uuid, created
