# SPDX-License-Identifier: Apache-2.0
"""What the fixture puts into our service for Nova's tests (no Nova
imports: tests/unit/test_nova_functional.py checks it against our API
and database without Nova installed)."""


def device_profiles(trait):
    """The profiles Nova's fixture serves, as requests to our API."""
    group = {'resources:FPGA': '1', 'trait:' + trait: 'required'}
    return [
        {'name': 'fakedev-dp', 'groups': [group]},
        {'name': 'fakedev-dp-port', 'groups': [group]},
    ]


def seeded_devices(placement_get, trait):
    """{compute node name: [device spec]} from the providers with `trait`
    (what the test created), for service.py's report.
    """
    found = placement_get('/resource_providers?required=%s' % trait)
    roots = {}
    hosts = {}
    for rp in found['resource_providers']:
        root = rp['root_provider_uuid']
        if root not in roots:
            roots[root] = placement_get('/resource_providers/%s'
                                        % root)['name']
        inventories = placement_get('/resource_providers/%s/inventories'
                                    % rp['uuid'])['inventories']
        for rc, inv in sorted(inventories.items()):
            hosts.setdefault(roots[root], []).append({
                'name': rp['name'], 'rp_uuid': rp['uuid'],
                'resource_class': rc, 'total': inv['total'],
                'traits': [trait]})
    return hosts
