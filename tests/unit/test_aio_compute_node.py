# SPDX-License-Identifier: Apache-2.0
"""The keystoneauth helper against the real Placement (noauth2), and the
compute-node provider the embedded stack creates (nova_cyborg_client's)."""

import uuid

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
import pytest

from cyborg.common import ksa
from cyborg.conf import CONF
from cyborg.conf import opts
from cyborg.placement import client as placement_client
from nova_cyborg_client import compute_node
from nova_cyborg_client import placement as nova_placement
from nova_cyborg_client import scheduler


@pytest.fixture
def adapter(placement_service):
    CONF.set_override('auth_type', 'none', group='placement')
    CONF.set_override('endpoint_override', placement_service.url,
                      group='placement')
    return ksa.get_adapter('placement', raise_exc=False)


def test_noauth_sends_the_admin_token(adapter):
    assert isinstance(adapter.auth, ksa.NoAuth2)
    assert adapter.session.get_auth_headers(adapter.auth) == {
        'X-Auth-Token': 'admin'}
    # Listing providers is admin-only in Placement: the token made us admin.
    resp = adapter.get('/resource_providers')
    assert resp.status_code == 200, resp.text


def test_password_auth_is_left_alone():
    conf = cfg.ConfigOpts()  # password opts must not leak into CONF
    opts.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override('auth_type', 'password', group='nova')
    conf.register_opts(ks_loading.get_auth_plugin_conf_options('password'),
                       group='nova')
    conf.set_override('auth_url', 'http://keystone.example/v3', group='nova')
    conf.set_override('username', 'nova', group='nova')
    assert not isinstance(ksa.get_auth('nova', conf), ksa.NoAuth2)


def test_compute_node_created_once(adapter):
    """As cyborg-aio makes it: the Nova side's compute_node.ensure on a
    keystoneauth adapter of our own [placement] options.
    """
    client = placement_client.PlacementClient(adapter)
    nova_client = nova_placement.PlacementClient(adapter=ksa.get_adapter(
        'placement', raise_exc=False,
        default_microversion=scheduler.PLACEMENT_MICROVERSION))
    name = 'compute-%s' % uuid.uuid4().hex[:8]
    rp_uuid, created = compute_node.ensure(nova_client, name)
    assert created

    rp = client.provider(rp_uuid)
    assert rp['name'] == name
    _, inv = client.inventories(rp_uuid)
    assert {rc: inv[rc]['total'] for rc in inv} == {
        'VCPU': 32, 'MEMORY_MB': 131072, 'DISK_GB': 1000}
    assert 'COMPUTE_ACCELERATORS' in client.traits(rp_uuid)[1]

    # Found again by name, and nothing written when nothing changed.
    assert compute_node.ensure(nova_client, name) == (rp_uuid, False)
    assert client.provider(rp_uuid)['generation'] == rp['generation']
