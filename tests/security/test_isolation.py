# SPDX-License-Identifier: Apache-2.0
"""Who may do what, with real tokens: keystonemiddleware validating them
against a real Keystone on loopback (cyborg_harness.keystone), the policy
defaults (OpenStack's secure-RBAC personas), the project scoping of ARQs.

The matrix has a row for every operation of docs/openapi.yaml (a new
operation without a row fails `test_every_documented_operation_has_a_row`)
and a column for every kind of caller (tests/security/conftest.py's
`callers`):

  anonymous   no token                      bad_token  an unknown token
  admin       admin of the admin project    system_admin  the same, system
  member_a    member of project A           reader_a   reader of project A
  member_b    member of project B           service    Nova's own token
  nova_a/b    member A/B's token with Nova's service token (how Nova calls)

Project A owns the seeded ARQs: a Bound and a BindFailed one of one
instance, and an unbound (Initial) one.
"""

import json

import pytest
import sqlalchemy as sa
import webob

from cyborg.db import api as db_api
from cyborg.db import models
from tests.functional import seed
from tests.security import fake_keystone
from tests.unit import test_openapi

A_UNBOUND = '0aa00000-0000-4000-8000-0000000000a1'
MISSING = '0aa00000-0000-4000-8000-00000000dead'
NEW_INSTANCE = '01000000-0000-4000-8000-0000000000a2'
VERSION = {'OpenStack-API-Version': 'accelerator 2.6'}

CALLERS = ('anonymous', 'bad_token', 'admin', 'system_admin', 'member_a',
           'reader_a', 'member_b', 'service', 'nova_a', 'nova_b')
AUTHENTICATED = [c for c in CALLERS if c not in ('anonymous', 'bad_token')]


def expect(default=403, **statuses):
    """401 without a valid token; 403 for a system-scoped token (every
    rule is for project-scoped tokens); `default` for every other caller
    unless named.
    """
    out = {'anonymous': 401, 'bad_token': 401}
    out.update({c: default for c in AUTHENTICATED})
    out['system_admin'] = 403
    out.update(statuses)
    return out


def public(status=200):
    return {c: status for c in CALLERS}


ADMIN_ONLY = expect(403)
ADMIN_OR_SERVICE = dict(expect(403), admin=200, service=200, nova_a=200,
                        nova_b=200)
PROFILE = [{'name': 'made-here', 'groups': [{'resources:PGPU': 1}]}]


def _bind(uuid, instance=NEW_INSTANCE):
    return {uuid: [
        {'op': 'add', 'path': '/hostname', 'value': 'compute-1'},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': seed.GPU_RP},
        {'op': 'add', 'path': '/instance_uuid', 'value': instance}]}


_ARQS = '/v2/accelerator_requests'
_DEV = '/v2/devices/' + seed.GPU_DEVICE

# (METHOD, documented path): [(case name, method, concrete path, body,
# {caller: status})]
MATRIX = {
    ('GET', '/'): [('versions', 'GET', '/', None, public())],
    ('GET', '/v2'): [('v2 document', 'GET', '/v2', None, public())],
    ('GET', '/metrics'): [('metrics', 'GET', '/metrics', None, public())],
    # Device profiles: global; read by any role, written by admins.
    ('GET', '/v2/device_profiles'): [
        ('list profiles', 'GET', '/v2/device_profiles', None, expect(200))],
    ('GET', '/v2/device_profiles/{uuid_or_name}'): [
        ('show a profile', 'GET', '/v2/device_profiles/seeded-gpu', None,
         expect(200))],
    ('POST', '/v2/device_profiles'): [
        ('create a profile', 'POST', '/v2/device_profiles', PROFILE,
         expect(403, admin=201))],
    ('DELETE', '/v2/device_profiles'): [
        ('delete profiles by name', 'DELETE',
         '/v2/device_profiles?value=seeded-gpu', None,
         expect(403, admin=409))],
    ('DELETE', '/v2/device_profiles/{uuid_or_name}'): [
        ('delete a profile', 'DELETE',
         '/v2/device_profiles/' + seed.BOUND_PROFILE, None,
         expect(403, admin=409))],
    # ARQs: readers read their project's; members create and delete
    # unbound ones; binding, and deleting bound ones, needs the service
    # role (Nova); other projects get 404, as for a missing uuid.
    ('GET', _ARQS): [
        ('list ARQs', 'GET', _ARQS, None, expect(200)),
        ('list an instance\'s ARQs', 'GET',
         _ARQS + '?instance=' + seed.BOUND_INSTANCE, None, expect(200))],
    ('GET', _ARQS + '/{uuid}'): [
        ('show A\'s ARQ', 'GET', _ARQS + '/' + seed.BOUND_ARQ, None,
         expect(200, member_b=404, service=404, nova_b=404))],
    ('POST', _ARQS): [
        ('create ARQs', 'POST', _ARQS,
         {'device_profile_name': 'seeded-gpu'},
         expect(201, reader_a=403))],
    ('PATCH', _ARQS): [
        ('bind A\'s ARQ', 'PATCH', _ARQS, _bind(A_UNBOUND),
         expect(403, service=404, nova_a=202, nova_b=404)),
        ('unbind A\'s ARQ', 'PATCH', _ARQS,
         {seed.BOUND_ARQ: [{'op': 'remove', 'path': '/hostname'}]},
         expect(403, service=404, nova_a=202, nova_b=404))],
    ('PATCH', _ARQS + '/{uuid}'): [
        ('bind A\'s ARQ by its URL', 'PATCH', _ARQS + '/' + A_UNBOUND,
         _bind(A_UNBOUND),
         expect(403, service=404, nova_a=202, nova_b=404))],
    ('DELETE', _ARQS): [
        ('delete A\'s unbound ARQ', 'DELETE', _ARQS + '?arqs=' + A_UNBOUND,
         None, expect(204, reader_a=403, member_b=404, service=404,
                      nova_b=404)),
        ('delete A\'s bound ARQ', 'DELETE', _ARQS + '?arqs=' + seed.BOUND_ARQ,
         None, expect(403, member_b=404, service=404, nova_a=204,
                      nova_b=404)),
        ('delete an instance\'s ARQs', 'DELETE',
         _ARQS + '?instance=' + seed.BOUND_INSTANCE, None,
         expect(403, service=204, nova_a=204, nova_b=204))],
    ('DELETE', _ARQS + '/{uuid}'): [
        ('delete A\'s unbound ARQ by its URL', 'DELETE',
         _ARQS + '/' + A_UNBOUND, None,
         expect(204, reader_a=403, member_b=404, service=404, nova_b=404)),
        ('delete A\'s bound ARQ by its URL', 'DELETE',
         _ARQS + '/' + seed.BOUND_ARQ, None,
         expect(403, member_b=404, service=404, nova_a=204, nova_b=404))],
    # Hardware inventory: admins and services read it, admins change it.
    ('GET', '/v2/devices'): [
        ('list devices', 'GET', '/v2/devices', None, ADMIN_OR_SERVICE)],
    ('GET', '/v2/devices/{uuid}'): [
        ('show a device', 'GET', _DEV, None, ADMIN_OR_SERVICE)],
    ('POST', '/v2/devices/{uuid}/disable'): [
        ('disable a device', 'POST', _DEV + '/disable', None,
         expect(403, admin=200))],
    ('POST', '/v2/devices/{uuid}/enable'): [
        ('enable a device', 'POST', _DEV + '/enable', None,
         expect(403, admin=200))],
    ('POST', '/v2/devices/{uuid}/exclude'): [
        ('exclude a device', 'POST', _DEV + '/exclude', None,
         expect(403, admin=200))],
    ('POST', '/v2/devices/{uuid}/include'): [
        ('include a device', 'POST', _DEV + '/include', None,
         expect(403, admin=200))],
    ('POST', '/v2/devices/{uuid}/reclaim'): [
        ('reclaim a device', 'POST', _DEV + '/reclaim', None,
         expect(403, admin=202))],
    ('POST', '/v2/devices/{uuid}/reset'): [
        # The seeded GPU is Ready: an admin passes the policy and hears
        # why it cannot be reset.
        ('reset a device', 'POST', _DEV + '/reset', None,
         expect(403, admin=409))],
    ('POST', '/v2/devices/{uuid}/share'): [
        ('share a device', 'POST', _DEV + '/share',
         {'mode': 'time-slice', 'slots': 4}, expect(403, admin=200))],
    ('GET', '/v2/deployables'): [
        ('list deployables', 'GET', '/v2/deployables', None,
         ADMIN_OR_SERVICE)],
    ('GET', '/v2/deployables/{uuid}'): [
        ('show a deployable', 'GET', '/v2/deployables/' + seed.GPU_DEPLOYABLE,
         None, ADMIN_OR_SERVICE)],
    ('PATCH', '/v2/deployables/{uuid}/program'): [
        ('program a deployable', 'PATCH',
         '/v2/deployables/%s/program' % seed.GPU_DEPLOYABLE,
         [{'op': 'replace', 'path': '/program', 'value': [
             {'image_uuid': '5d2c3b44-2f4e-4b55-8a3c-8e0f3b2a9c10'}]}],
         expect(403, admin=409))],
    ('GET', '/v2/attributes'): [
        ('list attributes', 'GET', '/v2/attributes', None,
         ADMIN_OR_SERVICE)],
    ('GET', '/v2/attributes/{uuid}'): [
        ('show an attribute', 'GET',
         '/v2/attributes/' + seed.GPU_RC_ATTRIBUTE, None, ADMIN_OR_SERVICE)],
    ('POST', '/v2/attributes'): [
        ('create an attribute', 'POST', '/v2/attributes',
         {'deployable_id': None, 'key': 'k', 'value': 'v'},
         expect(403, admin=400))],
    ('DELETE', '/v2/attributes/{uuid}'): [
        ('delete an attribute', 'DELETE',
         '/v2/attributes/' + seed.GPU_RC_ATTRIBUTE, None,
         expect(403, admin=204))],
}

CASES = [(name, method, path, body, statuses)
         for cases in MATRIX.values()
         for name, method, path, body, statuses in cases]


def test_every_documented_operation_has_a_row():
    documented = {(m, p) for m, p, _ in test_openapi.OPERATIONS}
    assert documented == set(MATRIX)


def test_every_row_has_every_caller():
    for cases in MATRIX.values():
        for name, _, _, _, statuses in cases:
            assert set(statuses) == set(CALLERS), name


def _seed(project_a):
    """The gabbi inventory, its ARQs moved into project A (Keystone makes
    up project ids), and one unbound ARQ of A.
    """
    seed.inventory()
    arqs = models.ExtendedAcceleratorRequest.__table__
    with db_api.writer() as session:
        session.execute(arqs.update().where(
            arqs.c.project_id == seed.BOUND_PROJECT).values(
                project_id=project_a))
        profile = session.execute(sa.select(
            models.DeviceProfile.__table__.c.id)).scalar()
        session.execute(models.ExtendedAcceleratorRequest.__table__.insert()
                        .values(uuid=A_UNBOUND, state='Initial',
                                device_profile_id=profile,
                                device_profile_group_id=0,
                                project_id=project_a))


@pytest.fixture(scope='session')
def projects(real_keystone):
    return {'a': real_keystone.project_id('member_a'),
            'b': real_keystone.project_id('member_b')}


@pytest.fixture
def api(real_keystone_api, projects):
    _seed(projects['a'])
    return real_keystone_api


@pytest.fixture
def reseed(sqlite_database, projects):
    def reseed():
        sqlite_database.truncate()
        _seed(projects['a'])
    return reseed


def call(app, headers, method, path, body=None):
    """One request with `headers` (a caller's, from `callers`)."""
    request = webob.Request.blank(path, method=method,
                                  headers=dict(VERSION, **headers))
    if body is not None:
        request.body = json.dumps(body).encode()
        request.content_type = 'application/json'
    return request.get_response(app)


def _fault(response):
    return json.loads(response.json['error_message'])['faultstring']


@pytest.mark.parametrize('method,path,body,statuses',
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matrix(api, reseed, callers, method, path, body, statuses):
    """Each caller in turn; the database is seeded afresh after any
    request that may have changed it.
    """
    wrong = []
    for caller, status in statuses.items():
        response = call(api, callers[caller], method, path, body)
        got = response.status_int
        if got != status:
            wrong.append('%s: %d, not %d: %s'
                         % (caller, got, status, response.text[:300]))
        elif status == 401 and not response.headers.get(
                'WWW-Authenticate', '').startswith('Keystone uri='):
            wrong.append('%s: 401 without WWW-Authenticate' % caller)
        elif status == 403 and not _fault(response):
            wrong.append('%s: 403 without a fault message' % caller)
        if method != 'GET' and got < 300:
            reseed()
    assert not wrong, '\n'.join(wrong)


# --- errors do not reveal existence ------------------------------------------

_PROBES = [
    ('GET', _ARQS + '/{}', None),
    ('DELETE', _ARQS + '/{}', None),
    ('DELETE', _ARQS + '?arqs={}', None),
    ('PATCH', _ARQS, 'bind'),
    ('PATCH', _ARQS + '/{}', 'bind'),
    ('PATCH', _ARQS, 'unbind'),
]


@pytest.mark.parametrize('caller', ['member_b', 'nova_b', 'service'])
@pytest.mark.parametrize('method,path,body', _PROBES)
@pytest.mark.parametrize('target', [seed.BOUND_ARQ, A_UNBOUND])
def test_another_projects_arq_answers_as_a_missing_one(
        api, callers, caller, method, path, body, target):
    def probe(uuid):
        data = {'bind': _bind(uuid), 'unbind': {uuid: [
            {'op': 'remove', 'path': '/hostname'}]}, None: None}[body]
        response = call(api, callers[caller], method, path.format(uuid),
                        data)
        text = response.text.replace(uuid, '<uuid>')
        return response.status_int, text

    assert probe(target) == probe(MISSING)


# --- microversion 2.5: state_reason stays with its project -------------------

V2_5 = {'OpenStack-API-Version': 'accelerator 2.5'}
FAILED_REASON = 'no free attach handle'


def call_2_5(app, headers, method, path):
    """As `call`, at microversion 2.5 (the ARQ's `state_reason`)."""
    return call(app, dict(headers, **V2_5), method, path)


@pytest.mark.parametrize('caller', ['admin', 'member_a', 'reader_a',
                                    'nova_a'])
def test_state_reason_is_shown_to_the_arqs_project(api, callers, caller):
    response = call_2_5(api, callers[caller], 'GET',
                        _ARQS + '/' + seed.FAILED_ARQ)
    assert response.status_int == 200, response.text
    assert response.json['state'] == 'BindFailed'
    assert response.json['state_reason'] == FAILED_REASON


@pytest.mark.parametrize('caller', ['member_b', 'nova_b', 'service'])
def test_state_reason_of_another_project_answers_as_a_missing_one(
        api, callers, caller):
    """At 2.5 another project's BindFailed ARQ is a 404 word for word as
    a missing uuid, and its reason is in none of the caller's lists.
    """
    def probe(uuid):
        response = call_2_5(api, callers[caller], 'GET', _ARQS + '/' + uuid)
        return response.status_int, response.text.replace(uuid, '<uuid>')

    assert probe(seed.FAILED_ARQ) == probe(MISSING)
    assert probe(MISSING)[0] == 404
    listed = call_2_5(api, callers[caller], 'GET', _ARQS)
    assert listed.status_int == 200, listed.text
    assert seed.FAILED_ARQ not in {a['uuid'] for a in listed.json['arqs']}
    assert FAILED_REASON not in listed.text


# --- lists are scoped to the caller's project --------------------------------

def _uuids(response):
    assert response.status_int == 200, response.text
    return sorted(a['uuid'] for a in response.json['arqs'])


A_ARQS = sorted([seed.BOUND_ARQ, seed.FAILED_ARQ, A_UNBOUND])


@pytest.mark.parametrize('query', [
    '', '?instance=' + seed.BOUND_INSTANCE,
    '?instance=%s&bind_state=resolved' % seed.BOUND_INSTANCE,
    '?limit=1', '?marker=' + seed.BOUND_ARQ])
def test_lists_show_only_the_callers_project(api, callers, projects, query):
    created = call(api, callers['member_b'], 'POST', _ARQS,
                   {'device_profile_name': 'seeded-gpu',
                    'project_id': projects['a']})
    assert created.status_int == 201
    b_arq = created.json['arqs'][0]
    # The project comes from the token, never from the body.
    assert b_arq['project_id'] == projects['b']
    seen = {caller: call(api, callers[caller], 'GET', _ARQS + query)
            for caller in ('admin', 'member_a', 'reader_a', 'member_b',
                           'nova_a', 'service')}
    for caller in ('member_a', 'reader_a', 'nova_a'):
        assert set(_uuids(seen[caller])) <= set(A_ARQS)
    assert set(_uuids(seen['member_b'])) <= {b_arq['uuid']}
    assert _uuids(seen['service']) == []
    if not query:
        assert _uuids(seen['member_a']) == A_ARQS
        assert _uuids(seen['member_b']) == [b_arq['uuid']]
        assert _uuids(seen['admin']) == sorted(A_ARQS + [b_arq['uuid']])
    if 'instance' in query:
        assert _uuids(seen['member_b']) == []


def _arq_rows():
    with db_api.reader() as session:
        return sorted(tuple(r) for r in session.execute(sa.select(
            models.ExtendedAcceleratorRequest.__table__)))


@pytest.mark.parametrize('caller', ['member_b', 'nova_b', 'service'])
def test_other_projects_change_nothing_of_a(api, callers, caller):
    """Every write B (or Nova for B) can aim at A's ARQs leaves them as
    they were, whatever it answers.
    """
    before = _arq_rows()
    for method, path, body in [
            ('DELETE', _ARQS + '?instance=' + seed.BOUND_INSTANCE, None),
            ('DELETE', _ARQS + '?arqs=' + A_UNBOUND, None),
            ('DELETE', _ARQS + '/' + seed.BOUND_ARQ, None),
            ('PATCH', _ARQS, _bind(A_UNBOUND)),
            ('PATCH', _ARQS, {seed.BOUND_ARQ: [
                {'op': 'remove', 'path': '/hostname'}]})]:
        assert call(api, callers[caller], method, path,
                    body).status_int < 500
    assert _arq_rows() == before


# --- the service role --------------------------------------------------------

def test_a_service_token_without_the_service_role_is_refused(api, callers):
    """Nova's service token must carry the service role (keystone
    middleware's service_token_roles_required, as Cyborg sets it).
    """
    before = _arq_rows()
    response = call(api, callers['not_a_service_a'], 'PATCH', _ARQS,
                    _bind(A_UNBOUND))
    assert response.status_int == 401
    assert _arq_rows() == before


def test_setting_the_project_in_a_bind_is_for_admins_only(api, callers,
                                                          projects):
    body = _bind(A_UNBOUND)
    body[A_UNBOUND].append({'op': 'add', 'path': '/project_id',
                            'value': projects['b']})
    response = call(api, callers['nova_a'], 'PATCH', _ARQS, body)
    assert response.status_int == 403
    assert 'cyborg:arq:update_project_id' in _fault(response)


def test_bind_message_names_the_compute_api(api, callers):
    response = call(api, callers['member_a'], 'PATCH', _ARQS,
                    _bind(A_UNBOUND))
    assert response.status_int == 403
    assert 'service token' in _fault(response)


def test_oversized_bodies_are_refused_before_token_validation(
        keystone_api, keystone):
    """The size limit sits outside keystonemiddleware: a huge body costs
    no call to Keystone, with a token or without (the fake Keystone, which
    counts the validations it answers).
    """
    validated = len(keystone.validations())
    for headers in ({}, {'X-Auth-Token': 'tok-unknown-0000'},
                    {'X-Auth-Token': fake_keystone.MEMBER_A.token}):
        request = webob.Request.blank(_ARQS, method='POST', headers=dict(
            VERSION, **headers))
        request.environ['CONTENT_LENGTH'] = str(64 * 1024 * 1024)
        assert request.get_response(keystone_api).status_int == 413
    assert len(keystone.validations()) == validated
