# SPDX-License-Identifier: Apache-2.0
"""The compute-node resource provider, made the way nova-compute makes it.

In the embedded mode no nova-compute runs, yet the agent hangs its device
providers under the compute node's provider (found by the hypervisor
nodename, [DEFAULT] host). So the stack creates it: named after the host,
with a fresh uuid the first time (later starts find it by name, Placement's
database being kept in the state directory), a VCPU/MEMORY_MB/DISK_GB
inventory and the COMPUTE_ACCELERATORS trait nova-compute reports when its
driver supports accelerators. Nothing is written when all of it is already
there.
"""

import uuid

INVENTORY = {
    'VCPU': {'total': 32, 'allocation_ratio': 1.0},
    'MEMORY_MB': {'total': 131072, 'reserved': 512,
                  'allocation_ratio': 1.0},
    'DISK_GB': {'total': 1000, 'allocation_ratio': 1.0},
}
TRAITS = ('COMPUTE_ACCELERATORS',)


def _full(inventory):
    """Inventory records with Placement's defaults filled in, to compare."""
    defaults = {'reserved': 0, 'min_unit': 1, 'step_size': 1,
                'allocation_ratio': 1.0}
    out = {}
    for rc, record in inventory.items():
        full = dict(defaults, max_unit=record['total'])
        full.update(record)
        out[rc] = full
    return out


def ensure(client, name, inventory=None, traits=TRAITS):
    """Find or create the provider `name`, then set its inventory and traits
    where they differ. `client` is a cyborg.placement.client.PlacementClient.
    Returns the provider uuid.
    """
    inventory = _full(INVENTORY if inventory is None else inventory)
    rp = client.provider_by_name(name)
    if rp is None:
        rp = client.create_provider(str(uuid.uuid4()), name, None)
    rp_uuid = rp['uuid']

    generation, current = client.inventories(rp_uuid)
    if current != inventory:
        generation = client.put_inventories(rp_uuid, generation, inventory)
    generation, current = client.traits(rp_uuid)
    if not current.issuperset(traits):
        client.put_traits(rp_uuid, generation, current.union(traits))
    return rp_uuid
