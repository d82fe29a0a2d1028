# SPDX-License-Identifier: Apache-2.0
"""The embedded Placement (cyborg_aio.placement, what cyborg-aio and the
tests serve) on SQLite under concurrent writes: every transaction takes
the write lock up front, so writers queue instead of failing.

Before, oslo.db's own `begin` listener ran first (SQLAlchemy's engine
events ignore insert=True) and began every transaction deferred: a
transaction that had read and then wrote after another writer committed
got "database is locked" at once, a 500 (CI, test_aio_h200, a PUT of a
provider's traits during the demo's binds).
"""

import threading
import uuid

import requests

from cyborg_harness import placement

THREADS = 4
ROUNDS = 15


def test_concurrent_trait_and_inventory_updates_never_500(
        placement_service):
    url = placement_service.url
    headers = dict(placement.HEADERS, **{
        'OpenStack-API-Version': 'placement 1.39'})
    tag = uuid.uuid4().hex[:8].upper()
    providers = [placement.register_node(url, 'embedded-%s-%d' % (tag, i))
                 for i in range(THREADS)]
    failures = []

    def put(session, path, body=None):
        r = session.put(url + path, json=body, headers=headers, timeout=60)
        if r.status_code >= 500:
            failures.append((path, r.status_code, r.text[:300]))
        return r

    def generation(session, rp):
        return session.get(url + '/resource_providers/' + rp,
                           headers=headers, timeout=60).json()['generation']

    def update(i):
        rp = providers[i]
        with requests.Session() as session:
            for j in range(ROUNDS):
                trait = 'CUSTOM_EMB_%s_%d_%d' % (tag, i, j)
                rc = 'CUSTOM_EMB_%s_%d' % (tag, i)
                put(session, '/traits/' + trait)
                put(session, '/resource_classes/' + rc)
                put(session, '/resource_providers/%s/traits' % rp, {
                    'resource_provider_generation': generation(session, rp),
                    'traits': [trait]})
                put(session, '/resource_providers/%s/inventories' % rp, {
                    'resource_provider_generation': generation(session, rp),
                    'inventories': {rc: {'total': j + 1}}})

    threads = [threading.Thread(target=update, args=(i,))
               for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert failures == []
    # Each provider ends with what its last round wrote.
    for i, rp in enumerate(providers):
        traits = requests.get(url + '/resource_providers/%s/traits' % rp,
                              headers=headers, timeout=60).json()['traits']
        assert traits == ['CUSTOM_EMB_%s_%d_%d' % (tag, i, ROUNDS - 1)]
        inventories = requests.get(
            url + '/resource_providers/%s/inventories' % rp,
            headers=headers, timeout=60).json()['inventories']
        assert inventories['CUSTOM_EMB_%s_%d' % (tag, i)]['total'] == ROUNDS
