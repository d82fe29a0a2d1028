# SPDX-License-Identifier: Apache-2.0
"""cyborg.api.quickcheck: never accepts a body jsonschema refuses, and
accepts the ordinary valid bodies (so that jsonschema is skipped for
them); errors keep jsonschema's message (controllers.base.validate).
"""

import hypothesis
from hypothesis import strategies as st
import jsonschema
import pytest

from cyborg.api.controllers import base
from cyborg.api import quickcheck
from cyborg.api.schemas import arqs
from cyborg.api.schemas import attributes
from cyborg.api.schemas import deployables
from cyborg.api.schemas import device_profiles
from cyborg.api.schemas import devices
from cyborg.common import exception

SCHEMAS = {
    'dp-create': device_profiles.CREATE,
    'dp-profile': device_profiles.PROFILE,
    'arq-create': arqs.CREATE,
    'arq-patch': arqs.PATCH,
    'arq-bind-values': arqs.BIND_VALUES,
    'attribute-create': attributes.CREATE,
    'deployable-program': deployables.PROGRAM,
    'device-share': devices.SHARE,
}

UUID = '8f2b4d6c-3a1e-4c5b-9d7e-0f1a2b3c4d5e'
_strings = st.sampled_from((
    '', 'x', 'add', 'replace', 'remove', '/program', '/hw_name', 'none',
    'mps', 'time-slice', UUID, UUID.upper(), UUID.replace('-', ''),
    UUID + '\n', '{%s}' % UUID, 'urn:uuid:' + UUID, UUID[:-1] + 'g',
    '12', '0', 'a' * 256, 'a' * 65536, 'name', 'groups', 'description',
    'uuid', 'device_profile_name', 'hostname', 'device_rp_uuid',
    'instance_uuid', 'project_id', 'op', 'path', 'value', 'image_uuid',
    'deployable_id', 'key', 'attribute', 'mode', 'slots',
    'resources:PGPU', 'trait:CUSTOM_X')) | st.text(max_size=6)
_scalars = (st.none() | st.booleans() | st.integers(-3, 60)
            | st.sampled_from((0.0, 1.0, 1.5, 2 ** 31, -1)) | _strings)
VALUES = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(_strings, inner, max_size=4),
    max_leaves=12)

SETTINGS = hypothesis.settings(
    max_examples=500, derandomize=True, database=None, deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck))


def _valid(schema, value):
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=jsonschema.FormatChecker()).is_valid(
        value)


@pytest.mark.parametrize('name', sorted(SCHEMAS))
@SETTINGS
@hypothesis.given(value=VALUES)
def test_never_accepts_what_jsonschema_refuses(name, value):
    schema = SCHEMAS[name]
    if quickcheck.compile(schema)(value):
        assert _valid(schema, value), value


PROFILE = {'name': 'gpu-small', 'description': 'one GPU',
           'groups': [{'resources:PGPU': '1', 'resources:CUSTOM_X': 2,
                       'trait:CUSTOM_NVIDIA': 'required'}]}


@pytest.mark.parametrize('name, value', [
    ('dp-create', [PROFILE]),
    ('dp-profile', PROFILE),
    ('dp-profile', dict(PROFILE, uuid=UUID, description=None)),
    ('arq-create', {'device_profile_name': 'gpu-small'}),
    ('arq-create', {'device_profile_name': 'gpu', 'image_uuid': 'x'}),
    ('arq-patch', {'/' + UUID: [{'op': 'add', 'path': '/hostname',
                                 'value': 'h1'}]}),
    ('arq-bind-values', {'hostname': 'h1', 'device_rp_uuid': UUID,
                         'instance_uuid': UUID, 'project_id': 'p'}),
    ('deployable-program', [{'op': 'add', 'path': '/program',
                             'value': [{'image_uuid': UUID}]}]),
    ('device-share', {'mode': 'mps', 'slots': 4}),
])
def test_ordinary_bodies_pass_quickly(name, value):
    assert _valid(SCHEMAS[name], value)
    assert quickcheck.compile(SCHEMAS[name])(value)


@pytest.mark.parametrize('schema', [
    {'oneOf': [{'type': 'string'}, {'type': 'integer'}]},
    {'type': 'object', 'patternProperties': {'^a': {'type': 'string'}}},
    {'type': 'string', 'format': 'date-time'},
    {'enum': [1, 2]},
    {'type': 'integer', 'minimum': 1.5},
])
def test_what_it_does_not_understand_goes_to_jsonschema(schema):
    assert quickcheck.compile(schema)('x') is False
    assert quickcheck.compile(schema)(1) is False


@pytest.mark.parametrize('value', [
    {'a': 1},
    'x',
    1.0,
    2 ** 40,
    [{'name': 'x', 'groups': [{'resources:PGPU': 1.5}]}],
])
def test_a_float_or_an_odd_value_is_left_to_jsonschema(value):
    schema = {'type': 'integer', 'minimum': 1, 'maximum': 2 ** 31}
    if type(value) is int and value <= 2 ** 31:
        pytest.skip('valid')
    assert quickcheck.compile(schema)(value) is False


@pytest.mark.parametrize('body, message', [
    ({'name': 'x', 'groups': [], 'bad': 1},
     "Invalid input: Additional properties are not allowed ('bad' was "
     "unexpected)"),
    ({'name': 'x', 'groups': [{'resources:PGPU': 1.5}]},
     'Invalid input for groups/0/resources:PGPU: 1.5 is not of type '
     "'string', 'integer'"),
    ({'name': 'x', 'groups': [], 'uuid': UUID + '\n'},
     'Invalid input for uuid: %r is not a %r' % (UUID + '\n', 'uuid')),
])
def test_errors_are_jsonschemas(body, message):
    with pytest.raises(exception.Invalid) as e:
        base.validate(body, device_profiles.PROFILE)
    assert str(e.value.message) == message
