# SPDX-License-Identifier: Apache-2.0
"""nova-cyborg-flow --create-compute-node: the compute node's provider as
nova-compute makes it, against the real Placement.
"""

import uuid

import requests

from nova_cyborg_client import compute_node
from nova_cyborg_client import flow

HEADERS = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'placement 1.36'}


def _get(placement, path):
    resp = requests.get(placement.url + path, headers=HEADERS, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_create_compute_node_alone(placement_service, capsys):
    name = 'smoke-%s' % uuid.uuid4().hex[:8]
    argv = ['--placement', placement_service.url,
            '--create-compute-node', name]
    assert flow.main(argv) == 0
    first = capsys.readouterr().out
    assert first.startswith('compute node %s: provider ' % name)
    assert first.rstrip().endswith('(created)')
    [rp] = _get(placement_service,
                '/resource_providers?name=%s' % name)['resource_providers']
    assert rp['uuid'] in first
    inventories = _get(placement_service, '/resource_providers/%s/'
                       'inventories' % rp['uuid'])['inventories']
    assert {rc: inv['total'] for rc, inv in inventories.items()} == {
        rc: inv['total'] for rc, inv in compute_node.INVENTORY.items()}
    traits = _get(placement_service,
                  '/resource_providers/%s/traits' % rp['uuid'])['traits']
    assert traits == ['COMPUTE_ACCELERATORS']

    # Again: found, same uuid, nothing rewritten (same generation).
    assert flow.main(argv) == 0
    second = capsys.readouterr().out
    assert second == first.replace('(created)', '(found)')
    again = _get(placement_service, '/resource_providers/%s' % rp['uuid'])
    assert again['generation'] == rp['generation']


def test_booting_needs_the_api(capsys):
    assert flow.main(['--placement', 'http://127.0.0.1:9',
                      '--profile', 'p']) == 2
    assert '--api is needed' in capsys.readouterr().err
    assert flow.main(['--placement', 'http://127.0.0.1:9']) == 2
    assert '--create-compute-node' in capsys.readouterr().err


def test_placement_refusal_is_one_line(placement_service, capsys):
    # noauth2 Placement: any token but "admin" is a plain user, who may
    # not create providers.
    assert flow.main(['--placement', placement_service.url,
                      '--token', 'not-admin',
                      '--create-compute-node', 'refused']) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith('nova-cyborg-flow: Placement GET '
                           '/resource_providers?name=refused answered 403')
