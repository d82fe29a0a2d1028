# SPDX-License-Identifier: Apache-2.0
"""What the cyborg-aio tests (test_aio*.py) share: the compute node name
the `aio` fixture (conftest.py) configures, and looking at what an aio
made.
"""

import requests

NODE = 'aio-test-node'


def compute_node(placement):
    """The compute node resource provider of NODE in `placement`."""
    resp = requests.get(placement + '/resource_providers',
                        params={'name': NODE},
                        headers={'X-Auth-Token': 'admin'}, timeout=10)
    assert resp.status_code == 200, resp.text
    providers = resp.json()['resource_providers']
    assert len(providers) == 1, providers
    return providers[0]


def demo_arqs(api):
    """Every ARQ the API at `api` lists."""
    resp = requests.get(api + '/accelerator_requests', timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()['arqs']
