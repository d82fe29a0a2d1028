# SPDX-License-Identifier: Apache-2.0
"""docs/openapi.yaml against the code, so that the two cannot drift.

- it is a valid OpenAPI document;
- its operations are exactly those the policy rules declare (plus the
  unauthenticated `/`, `/v2` and `/metrics`);
- its request-body schemas are the objects of cyborg/api/schemas, and each
  operation documents the schemas its handler really validates with;
- its query parameters are exactly those each handler accepts;
- the app's answers validate against its response schemas, microversion
  by microversion.

What a handler validates and accepts is recorded by wrapping
`base.validate` and `base.query` while the real app (SQLite, seeded as the
gabbi inventory fixture does) serves each documented operation.
"""

import copy
import json
import os
import re
import urllib.parse

import jsonschema
import openapi_spec_validator
import pytest
import referencing
import referencing.jsonschema
import webob
import yaml

from cyborg.api import app as api_app
from cyborg.api.controllers import base
from cyborg.api.schemas import arqs
from cyborg.api.schemas import attributes
from cyborg.api.schemas import deployables
from cyborg.api.schemas import device_profiles
from cyborg.api.schemas import devices
from cyborg.conf import CONF
from cyborg import policies
from tests.functional import seed

DOC_PATH = os.path.join(os.path.dirname(__file__), '..', '..', 'docs',
                        'openapi.yaml')
with open(DOC_PATH) as f:
    DOC = yaml.safe_load(f)

METHODS = ('get', 'put', 'post', 'delete', 'options', 'head', 'patch',
           'trace')
PUBLIC = {('GET', '/'), ('GET', '/v2'), ('GET', '/metrics')}

# Components that are copies of the code's request schemas.
REQUEST_SCHEMAS = {
    'DeviceProfileCreateRequest': device_profiles.CREATE,
    'DeviceProfileFields': device_profiles.PROFILE,
    'ArqCreateRequest': arqs.CREATE,
    'ArqPatchRequest': arqs.PATCH,
    'ArqBindValues': arqs.BIND_VALUES,
    'DeviceShareRequest': devices.SHARE,
    'DeployableProgramRequest': deployables.PROGRAM,
    'AttributeFields': attributes.ATTRIBUTE,
    'AttributeCreateRequest': attributes.CREATE,
}
SCHEMA_MODULES = (arqs, attributes, deployables, device_profiles, devices)

# A seeded resource for each collection's {uuid} (see seed.py).
PATH_VALUES = {
    'device_profiles': seed.BOUND_PROFILE,
    'accelerator_requests': seed.BOUND_ARQ,
    'devices': seed.GPU_DEVICE,
    'deployables': seed.GPU_DEPLOYABLE,
    'attributes': seed.GPU_RC_ATTRIBUTE,
}
LATEST = '2.6'


def _operations():
    """(METHOD, path, operation object) of every documented operation."""
    for path, item in DOC['paths'].items():
        for method in METHODS:
            if method in item:
                yield method.upper(), path, item[method]


OPERATIONS = sorted(_operations(), key=lambda o: (o[1], o[0]))
V2_OPERATIONS = [o for o in OPERATIONS if (o[0], o[1]) not in PUBLIC]


def _ids(ops):
    return ['%s %s' % (m, p) for m, p, _ in ops]


def _normalize(path):
    """`/v2/x/{uuid_or_name}?value=` → `/v2/x/{}`."""
    return re.sub(r'\{[^}]*\}', '{}', path.split('?')[0])


def _resolve(node):
    """Follow a local $ref (#/...) to the object it names."""
    while isinstance(node, dict) and '$ref' in node:
        target = DOC
        for part in node['$ref'].lstrip('#/').split('/'):
            target = target[part.replace('~1', '/').replace('~0', '~')]
        node = target
    return node


def _parameters(path, operation):
    params = DOC['paths'][path].get('parameters', []) + \
        operation.get('parameters', [])
    return [_resolve(p) for p in params]


def _query_names(path, operation):
    return {p['name'] for p in _parameters(path, operation)
            if p['in'] == 'query'}


def _concrete(path):
    parts = path.split('/')
    for i, part in enumerate(parts):
        if part.startswith('{'):
            parts[i] = PATH_VALUES[parts[i - 1]]
    return '/'.join(parts)


def _min_version(operation):
    return operation.get('x-min-microversion', '2.0')


def _version_tuple(text):
    return tuple(int(p) for p in text.split('.'))


def _example_body(operation):
    body = operation.get('requestBody')
    if body is None:
        return None
    return _resolve(body)['content']['application/json']['example']


# --- the document itself ----------------------------------------------------

def test_is_a_valid_openapi_document():
    assert DOC['openapi'].startswith('3.')
    openapi_spec_validator.validate(copy.deepcopy(DOC))


def test_operation_ids_are_unique():
    ids = [o['operationId'] for _, _, o in OPERATIONS]
    assert len(ids) == len(set(ids))


# --- operations vs the policy rules -----------------------------------------

def _policy_operations():
    out = {}
    for rule in policies.list_rules():
        for operation in getattr(rule, 'operations', None) or []:
            key = (operation['method'], _normalize(operation['path']))
            out.setdefault(key, set()).add(rule.name)
    return out


def test_operations_are_the_policy_operations():
    documented = {(m, _normalize(p)) for m, p, _ in OPERATIONS}
    assert documented - PUBLIC == set(_policy_operations())
    assert PUBLIC <= documented


def test_each_operation_names_its_policy_rule():
    declared = _policy_operations()
    for method, path, operation in V2_OPERATIONS:
        rule = operation['x-openstack-policy']
        assert rule in declared[(method, _normalize(path))], (method, path)
        assert '`%s`' % rule in operation['description']


def test_public_operations_need_no_token():
    for method, path, operation in OPERATIONS:
        if (method, path) in PUBLIC:
            assert operation['security'] == [], path
        else:
            assert 'security' not in operation, path
    scheme = DOC['components']['securitySchemes']['keystone']
    assert (scheme['in'], scheme['name']) == ('header', 'X-Auth-Token')
    assert DOC['security'] == [{'keystone': []}]


# --- request schemas vs cyborg/api/schemas -----------------------------------

def test_request_schema_components_equal_the_code():
    components = DOC['components']['schemas']
    for name, schema in REQUEST_SCHEMAS.items():
        assert components[name] == schema, name


def test_every_code_schema_is_documented():
    documented = [id(s) for s in REQUEST_SCHEMAS.values()]
    for module in SCHEMA_MODULES:
        for name, value in vars(module).items():
            if (name.isupper() and not name.startswith('_')
                    and isinstance(value, dict)):
                assert id(value) in documented, \
                    '%s.%s is not in docs/openapi.yaml' % (
                        module.__name__, name)


# --- against the running app -------------------------------------------------

@pytest.fixture
def api(sqlite_database):
    seed.inventory()
    return api_app.setup_app(CONF)


def _call(app, method, path, body=None, version=LATEST, query=None):
    if query:
        path += '?' + urllib.parse.urlencode(query)
    request = webob.Request.blank(
        path, method=method,
        headers={'OpenStack-API-Version': 'accelerator %s' % version})
    if body is not None:
        request.body = json.dumps(body).encode()
        request.content_type = 'application/json'
    return request.get_response(app)


def _path_for(method, path, operation):
    """A concrete path; a PATCH of one ARQ must patch the ARQ its body
    names.
    """
    example = _example_body(operation)
    if path == '/v2/accelerator_requests/{uuid}' and method == 'PATCH':
        return path.replace('{uuid}', next(iter(example)))
    return _concrete(path)


class _Recorder:
    def __init__(self, monkeypatch):
        self.queries = []
        self.schemas = []
        query, validate = base.query, base.validate

        def recording_query(*allowed):
            self.queries.append(allowed)
            return query(*allowed)

        def recording_validate(data, schema):
            self.schemas.append(schema)
            return validate(data, schema)
        monkeypatch.setattr(base, 'query', recording_query)
        monkeypatch.setattr(base, 'validate', recording_validate)


def _fault(response):
    body = response.json
    _validator('#/components/schemas/Error').validate(body)
    fault = json.loads(body['error_message'])
    _validator('#/components/schemas/Fault').validate(fault)
    return fault


@pytest.mark.parametrize('method, path, operation', V2_OPERATIONS,
                         ids=_ids(V2_OPERATIONS))
def test_query_parameters_are_those_the_handler_accepts(
        api, monkeypatch, method, path, operation):
    recorder = _Recorder(monkeypatch)
    response = _call(api, method, _path_for(method, path, operation),
                     _example_body(operation))
    assert response.status_int < 500, response.text
    assert len(recorder.queries) == 1, recorder.queries
    assert set(recorder.queries[0]) == _query_names(path, operation)


@pytest.mark.parametrize('method, path, operation', V2_OPERATIONS,
                         ids=_ids(V2_OPERATIONS))
def test_unknown_query_parameters_are_refused(api, method, path, operation):
    response = _call(api, method, _path_for(method, path, operation),
                     _example_body(operation), query={'zz_unknown': '1'})
    assert response.status_int == 400
    assert _fault(response)['faultstring'] == 'Unknown argument: "zz_unknown"'
    assert '400' in operation['responses']


@pytest.mark.parametrize('method, path, operation', V2_OPERATIONS,
                         ids=_ids(V2_OPERATIONS))
def test_documented_query_parameters_are_not_refused(
        api, method, path, operation):
    # One at a time (`arqs` and `instance` exclude each other); values
    # may be refused, but never the parameter itself.
    for name in _query_names(path, operation):
        response = _call(api, method, _path_for(method, path, operation),
                         _example_body(operation), query={name: 'x'})
        assert response.status_int < 500, response.text
        if response.status_int == 400:
            assert 'Unknown argument' not in _fault(response)['faultstring']


BODY_OPERATIONS = [o for o in V2_OPERATIONS if 'requestBody' in o[2]]


def _refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == '$ref':
                yield value.rsplit('/', 1)[-1]
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


@pytest.mark.parametrize('method, path, operation', BODY_OPERATIONS,
                         ids=_ids(BODY_OPERATIONS))
def test_request_bodies_are_the_schemas_the_handler_validates(
        api, monkeypatch, method, path, operation):
    """The example is valid input, and the body schema is the one the
    handler checks the body with; every other schema it checks with is
    named in the request body.
    """
    recorder = _Recorder(monkeypatch)
    response = _call(api, method, _path_for(method, path, operation),
                     _example_body(operation))
    assert response.status_int < 500, response.text
    if response.status_int == 400:
        assert not _fault(response)['faultstring'].startswith(
            'Invalid input'), response.text
    names = {id(s): n for n, s in REQUEST_SCHEMAS.items()}
    used = [names.get(id(s)) for s in recorder.schemas]
    assert used and None not in used, recorder.schemas
    body = _resolve(operation['requestBody'])
    schema = body['content']['application/json']['schema']
    top = schema['allOf'][0] if 'allOf' in schema else schema
    assert top == {'$ref': '#/components/schemas/' + used[0]}
    mentioned = set(_refs(schema)) | {
        n for n in REQUEST_SCHEMAS if n in body.get('description', '')}
    assert set(used) <= mentioned


@pytest.mark.parametrize('method, path, operation', [
    o for o in V2_OPERATIONS if _min_version(o[2]) != '2.0'],
    ids=_ids([o for o in V2_OPERATIONS if _min_version(o[2]) != '2.0']))
def test_operations_need_their_microversion(api, method, path, operation):
    major, minor = _version_tuple(_min_version(operation))
    response = _call(api, method, _path_for(method, path, operation),
                     _example_body(operation),
                     version='%d.%d' % (major, minor - 1))
    assert response.status_int == 404
    _fault(response)


# --- responses vs the response schemas ---------------------------------------

_REGISTRY = referencing.Registry().with_resource(
    'urn:openapi', referencing.Resource.from_contents(
        DOC, default_specification=referencing.jsonschema.DRAFT202012))


def _validator(pointer):
    return jsonschema.Draft202012Validator(
        {'$ref': 'urn:openapi' + pointer}, registry=_REGISTRY,
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def _pointer(*parts):
    return '#/' + '/'.join(p.replace('~', '~0').replace('/', '~1')
                           for p in parts)


def _expected_keys(component, version):
    """The properties a response object has at `version`."""
    properties = DOC['components']['schemas'][component]['properties']
    return {name for name, prop in properties.items()
            if _version_tuple(prop.get('x-min-microversion', '2.0'))
            <= _version_tuple(version)}


GETS = [o for o in OPERATIONS if o[0] == 'GET']


@pytest.mark.parametrize('version', ['2.0', '2.3', '2.4', '2.5', '2.6'])
@pytest.mark.parametrize('method, path, operation', GETS, ids=_ids(GETS))
def test_responses_match_their_schemas(api, method, path, operation,
                                       version):
    response = _call(api, 'GET', _concrete(path), version=version)
    assert response.status_int == 200, response.text
    content = operation['responses']['200']['content']
    if 'text/plain' in content:
        assert response.content_type == 'text/plain'
        return
    assert response.content_type == 'application/json'
    body = response.json
    _validator(_pointer('paths', path, 'get', 'responses', '200', 'content',
                        'application/json', 'schema')).validate(body)
    if path.startswith('/v2/devices'):
        found = body['devices'] if 'devices' in body else [body]
        assert found
        for device in found:
            assert set(device) == _expected_keys('Device', version)
    if path.startswith('/v2/accelerator_requests'):
        found = body['arqs'] if 'arqs' in body else [body]
        assert found
        for arq in found:
            assert set(arq) == _expected_keys('ARQ', version)
    if path != '/':
        assert response.headers['OpenStack-API-Version'] == \
            'accelerator ' + version
        for header in _resolve(operation['responses']['200'])['headers']:
            assert header in response.headers


def test_lists_are_not_empty(api):
    """The seeded inventory fills every list the schemas are checked on."""
    for path in ('/v2/device_profiles', '/v2/accelerator_requests',
                 '/v2/devices', '/v2/deployables', '/v2/attributes'):
        body = _call(api, 'GET', path).json
        assert all(body[key] for key in body), path


@pytest.mark.parametrize('method, path, operation',
                         [o for o in V2_OPERATIONS if '{uuid}' in o[1]],
                         ids=_ids([o for o in V2_OPERATIONS
                                   if '{uuid}' in o[1]]))
def test_unknown_resources_are_documented_404s(api, method, path,
                                               operation):
    unknown = path.replace('{uuid}', '00000000-0000-4000-8000-0000000000ff')
    body = _example_body(operation)
    if method == 'PATCH' and path.startswith('/v2/accelerator_requests'):
        body = {'00000000-0000-4000-8000-0000000000ff':
                next(iter(body.values()))}
    response = _call(api, method, unknown, body)
    assert response.status_int == 404, response.text
    _fault(response)
    assert '404' in operation['responses']
