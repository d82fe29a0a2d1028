# SPDX-License-Identifier: Apache-2.0
"""A Nova-flow boot and delete through the real Keystone.

cyborg-aio --auth-strategy keystone: the API and Placement validate tokens
with keystonemiddleware; the conductor calls Placement and Nova as the
`cyborg` service user. This process plays Nova: it asks our API with the
booting user's token (member of project A) plus Nova's own token as
X-Service-Token (keystoneauth's ServiceTokenAuthWrapper, as Nova's
[service_user] send_service_user_token does), Placement as Nova's service
user, and serves the external events API behind keystonemiddleware,
wanting the service role as Nova's policy does.
"""

import json

from keystoneauth1 import identity
import pytest
import requests

from nova_cyborg_client import context as nova_context
from nova_cyborg_client import events
from nova_cyborg_client import flow
from tests.nova import conftest
from tests.nova import test_flow


@pytest.fixture(scope='module')
def keystone_stack(tmp_path_factory, real_keystone):
    stack = conftest.Stack(tmp_path_factory.mktemp('keystone-stack'),
                           'nova-keystone-node',
                           config_extra=real_keystone.cyborg_config(),
                           extra_args=['--auth-strategy', 'keystone'])
    real_keystone.set_endpoint('accelerator', stack.api)
    real_keystone.set_endpoint('placement', stack.placement)
    real_keystone.set_endpoint('compute', stack.nova.server.url)
    yield stack
    stack.stop()


def _events_authtoken(keystone):
    """keystonemiddleware's options for the events API, as a paste file
    would give them: Nova validates tokens as its own service user.
    """
    options = dict(keystone.auth('nova'), auth_type='password',
                   www_authenticate_uri=keystone.auth_url)
    return options


@pytest.fixture
def stack(keystone_stack, real_keystone, conf):
    keystone_stack.nova.receiver = events.Receiver(
        authtoken_conf=_events_authtoken(real_keystone))
    conftest.point_at(conf, api=keystone_stack.api,
                      placement=keystone_stack.placement)
    return keystone_stack


def _nova(keystone):
    """Nova's service user, for its service token and for Placement."""
    return identity.Password(**keystone.auth('nova'))


def _admin(keystone):
    return {'X-Auth-Token': keystone.token('admin')}


def _events_post(stack, headers):
    body = {'events': [{'name': events.EVENT_NAME, 'tag': 'x',
                        'server_uuid': '5b1a7ad0-3d7e-4a9a-8f1e-000000000001',
                        'status': 'completed'}]}
    return requests.post(stack.nova.server.url + events.PATH,
                         data=json.dumps(body), timeout=30,
                         headers=dict(headers, **{
                             'Content-Type': 'application/json',
                             'OpenStack-API-Version': 'compute 2.82'}))


def test_boot_and_delete_with_user_and_service_tokens(stack, real_keystone):
    admin = _admin(real_keystone)
    name, groups = test_flow.GPU
    if not requests.get(stack.api + '/device_profiles',
                        params={'name': name}, headers=admin,
                        timeout=30).json()['device_profiles']:
        resp = requests.post(stack.api + '/device_profiles', headers=admin,
                             json=[{'name': name, 'groups': groups}],
                             timeout=30)
        assert resp.status_code == 201, resp.text
    project_a = real_keystone.project_id('member_a')
    user = nova_context.RequestContext(
        auth_token=real_keystone.token('member_a'), project_id=project_a,
        user_id=real_keystone.user_ids['member-a'],
        service_auth=_nova(real_keystone))
    placement = nova_context.RequestContext(
        auth_token=real_keystone.token('nova'))
    runner = flow.FlowRunner(stack.nova.receiver, user,
                             placement_context=placement,
                             binding_timeout=120)

    result = runner.boot(test_flow._flavor(name))
    instance = result.instance.uuid
    # Bound: the conductor's event reached the events API through
    # keystonemiddleware, with the service role.
    assert [a['state'] for a in result.arqs] == ['Bound']
    arqs = requests.get(stack.api + '/accelerator_requests', headers=admin,
                        params={'instance': instance}, timeout=30).json()
    assert [a['project_id'] for a in arqs['arqs']] == [project_a]

    runner.delete(instance, test_flow._flavor(name))
    arqs = requests.get(stack.api + '/accelerator_requests', headers=admin,
                        params={'instance': instance}, timeout=30).json()
    assert arqs['arqs'] == []
    allocations = requests.get(
        '%s/allocations/%s' % (stack.placement, instance), timeout=30,
        headers=dict(admin, **{'OpenStack-API-Version': 'placement 1.36'}))
    assert allocations.json()['allocations'] == {}


def test_the_events_api_wants_a_service_token(stack, real_keystone):
    assert _events_post(stack, {}).status_code == 401
    refused = _events_post(stack, {
        'X-Auth-Token': real_keystone.token('member_a')})
    assert refused.status_code == 403
    assert events.EVENTS_POLICY in refused.text
    # Nova's own service user may (the instance is unknown: 404 inside).
    accepted = _events_post(stack, {
        'X-Auth-Token': real_keystone.token('cyborg')})
    assert accepted.status_code == 207, accepted.text


def test_without_the_service_token_nova_cannot_bind(stack, real_keystone):
    """The user's token alone (Nova without [service_user]) may create an
    ARQ but not bind it: binding is the service role's.
    """
    admin = _admin(real_keystone)
    member = {'X-Auth-Token': real_keystone.token('member_a')}
    name = test_flow.GPU[0]
    created = requests.post(stack.api + '/accelerator_requests',
                            headers=member, timeout=30,
                            json={'device_profile_name': name})
    if created.status_code == 400:  # profile made by the boot test only
        requests.post(stack.api + '/device_profiles', headers=admin,
                      json=[{'name': name, 'groups': test_flow.GPU[1]}],
                      timeout=30)
        created = requests.post(stack.api + '/accelerator_requests',
                                headers=member, timeout=30,
                                json={'device_profile_name': name})
    assert created.status_code == 201, created.text
    arq = created.json()['arqs'][0]['uuid']
    patch = {arq: [
        {'op': 'add', 'path': '/hostname', 'value': stack.node},
        {'op': 'add', 'path': '/device_rp_uuid',
         'value': '5b1a7ad0-3d7e-4a9a-8f1e-0000000000ff'},
        {'op': 'add', 'path': '/instance_uuid',
         'value': '5b1a7ad0-3d7e-4a9a-8f1e-000000000002'}]}
    refused = requests.patch(stack.api + '/accelerator_requests',
                             headers=member, json=patch, timeout=30)
    assert refused.status_code == 403, refused.text
    deleted = requests.delete(stack.api + '/accelerator_requests/' + arq,
                              headers=member, timeout=30)
    assert deleted.status_code == 204, deleted.text
