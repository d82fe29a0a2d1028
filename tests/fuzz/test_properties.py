# SPDX-License-Identifier: Apache-2.0
"""Property tests for the two parsers that take structured client input:
device-profile request groups and bind/unbind PATCH documents.

Any input gives a valid result or our 400 (exception.Invalid), never
another exception; through the API, any body gives a 2xx or a 4xx, and a
refused request leaves the database exactly as it was.
"""

import json

import hypothesis
from hypothesis import strategies as st
import pytest
import sqlalchemy as sa
import webob

from cyborg.api import app as api_app
from cyborg.api.controllers import arqs as arq_api
from cyborg.api.controllers import device_profiles as dp_api
from cyborg.common import exception
from cyborg.common import gpu_classes
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import models
from tests.functional import seed
from tests.fuzz import conftest

SETTINGS = hypothesis.settings(
    max_examples=max(50, conftest.EXAMPLES * 10), derandomize=True,
    database=None, deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck))

# --- device-profile groups ---------------------------------------------------

_json_scalars = (st.none() | st.booleans() | st.floats(allow_nan=False)
                 | st.integers() | st.text(max_size=20))
json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)

_names = (st.sampled_from(dp_api.STANDARD_RCS + (
    'CUSTOM_GPU_MEM_SLICE', 'CUSTOM_FPGA_XILINX', 'CUSTOM_X', 'GPU',
    'CUSTOM_ A', '', 'custom_x', 'VCPU')) | st.text(max_size=12))
_keys = st.builds(
    lambda prefix, name: prefix + name,
    st.sampled_from(('resources:', 'trait:', 'accel:', 'resource:', '',
                     'TRAIT:')),
    _names)
_amounts = (st.integers(min_value=-2, max_value=2 ** 33)
            | st.sampled_from(('1', ' 2 ', '0', '-1', '1.5', '１', '1_0',
                               '9' * 5000, 'required', 'forbidden', '')))
group_values = _amounts | st.text(max_size=12)
groups = st.dictionaries(_keys, group_values, max_size=6)
good_groups = st.dictionaries(
    st.sampled_from(('resources:PGPU', 'resources:CUSTOM_GPU_MEM_SLICE',
                     'trait:CUSTOM_NVIDIA_H200', 'accel:note')),
    st.sampled_from(('1', '2', 3, 'required', 'forbidden')), min_size=1)


@SETTINGS
@hypothesis.given(groups)
def test_group_parser_gives_a_canonical_group_or_invalid(group):
    try:
        out = dp_api._normalize_group(group)
    except exception.Invalid:
        return
    for key, value in out.items():
        assert dp_api.KEY_RE.match(key)
        assert isinstance(value, str)
        if not key.startswith('accel:'):
            # accel: keys are kept as sent, as in Cyborg.
            assert ' ' not in key
        if key.startswith('trait:'):
            assert value in dp_api.TRAIT_VALUES
        elif key.startswith('resources:'):
            assert 1 <= int(value) <= dp_api.MAX_AMOUNT
            assert value == str(int(value))
    # Canonical: parsing the result again changes nothing, and what
    # ARQ creation later does with it cannot fail.
    assert dp_api._normalize_group(out) == out
    assert gpu_classes.accelerators_in_group(out) >= 0
    assert all(n >= 0 for n in arq_api.units_per_group([out]))


@SETTINGS
@hypothesis.given(json_values | st.fixed_dictionaries(
    {'name': st.sampled_from(('p', 'bad name', '')) | json_values},
    optional={'groups': st.lists(groups | json_values, max_size=3),
              'description': json_values, 'uuid': json_values,
              'extra': json_values}))
def test_profile_validation_gives_groups_or_invalid(profile):
    try:
        out = dp_api.validate(profile)
    except exception.Invalid:
        return
    assert isinstance(out, list) and out
    assert all(isinstance(g, dict) for g in out)


# --- bind/unbind PATCH documents ---------------------------------------------

_paths = st.sampled_from(arq_api.BIND_PATHS + ('/project_id', '/state',
                                               'hostname', '/', ''))
_values = (st.sampled_from(('compute-1', seed.GPU_RP, seed.BOUND_INSTANCE,
                            '01000000-0000-4000-8000-0000000000aa', '',
                            'x' * 256)) | json_values)
ops = st.fixed_dictionaries(
    {'op': st.sampled_from(('add', 'remove', 'replace', 'ADD', '')),
     'path': _paths},
    optional={'value': _values})


@SETTINGS
@hypothesis.given(st.lists(ops, min_size=1, max_size=5), st.booleans())
def test_patch_parser_gives_a_bind_an_unbind_or_invalid(arq_ops, project):
    try:
        kind, values = arq_api._parse_patch(arq_ops, project)
    except exception.Invalid:
        return
    assert {op['op'] for op in arq_ops} == {kind}
    if kind == 'remove':
        assert values is None
    else:
        assert {'hostname', 'device_rp_uuid', 'instance_uuid'} <= set(values)


# --- through the API: 2xx or 4xx, and nothing half-written -------------------

ARQ_UUIDS = ['0aa00000-0000-4000-8000-0000000000%02d' % i for i in (10, 11)]


@pytest.fixture
def api(sqlite_database):
    seed.inventory()
    # Two unbound ARQs of one profile, for the patches to aim at.
    with db_api.writer() as session:
        profile = session.execute(sa.select(
            models.DeviceProfile.__table__.c.id)).scalar()
        for uuid in ARQ_UUIDS:
            session.execute(models.ExtendedAcceleratorRequest.__table__
                            .insert().values(uuid=uuid, state='Initial',
                                             device_profile_id=profile,
                                             device_profile_group_id=0,
                                             project_id='project-a'))
    return api_app.setup_app(CONF)


def _snapshot():
    """Every row of every table, to compare before and after."""
    with db_api.reader() as session:
        return {table.name: sorted(
            repr(tuple(row)) for row in session.execute(table.select()))
            for table in models.Base.metadata.sorted_tables}


def _request(app, method, path, body):
    request = webob.Request.blank(path, method=method, headers={
        'OpenStack-API-Version': 'accelerator 2.4'})
    request.body = json.dumps(body).encode()
    request.content_type = 'application/json'
    return request.get_response(app)


def _check_refusal_wrote_nothing(app, method, path, body):
    before = _snapshot()
    response = _request(app, method, path, body)
    hypothesis.event("%s %d" % (method, response.status_int))
    assert response.status_int < 500, response.text
    if response.status_int >= 400:
        assert json.loads(response.json['error_message'])['faultstring']
        assert _snapshot() == before
    return response


_patch_keys = st.sampled_from(ARQ_UUIDS + [
    seed.BOUND_ARQ, '0aa00000-0000-4000-8000-0000000000ff', 'not-a-uuid',
    ARQ_UUIDS[0].replace('-', '').upper()])
_good = {'/hostname': st.sampled_from(('compute-1', 'compute-2')),
         '/device_rp_uuid': st.sampled_from((seed.GPU_RP, seed.FPGA_RP)),
         '/instance_uuid': st.sampled_from((
             '01000000-0000-4000-8000-0000000000aa',
             '01000000-0000-4000-8000-0000000000bb', seed.BOUND_INSTANCE))}
# Mostly well-formed binds and unbinds of the seeded ARQs, so that
# patches get through to the database and the state machine.
_bind_ops = st.builds(
    lambda values: [{'op': 'add', 'path': path, 'value': value}
                    for path, value in values.items()],
    st.fixed_dictionaries(_good))
_unbind_ops = st.lists(st.builds(
    lambda path: {'op': 'remove', 'path': path},
    st.sampled_from(arq_api.BIND_PATHS)), min_size=1, max_size=3)
_well_formed = st.builds(
    lambda uuids, arq_ops: {uuid: arq_ops for uuid in uuids},
    st.lists(st.sampled_from(ARQ_UUIDS + [seed.BOUND_ARQ]), min_size=1,
             max_size=3, unique=True),
    _bind_ops | _unbind_ops)
patch_documents = (_well_formed | st.dictionaries(
    _patch_keys, st.lists(ops, min_size=1, max_size=4), max_size=3)
    | json_values)


@SETTINGS
@hypothesis.given(patch_documents)
def test_patch_bodies_answer_4xx_and_write_nothing_when_refused(api, body):
    _check_refusal_wrote_nothing(api, 'PATCH', '/v2/accelerator_requests',
                                 body)


@SETTINGS
@hypothesis.given(st.lists(
    st.fixed_dictionaries({'name': st.sampled_from(('fuzzed', 'seeded-gpu',
                                                    'bad name'))},
                          optional={'groups': st.lists(
                              good_groups | groups, max_size=2),
                                    'description': json_values}),
    min_size=0, max_size=2) | json_values)
def test_profile_bodies_answer_4xx_and_write_nothing_when_refused(api, body):
    response = _check_refusal_wrote_nothing(
        api, 'POST', '/v2/device_profiles', body)
    if response.status_int == 201:
        # Accepted once; delete it so that the next example may be too.
        assert _request(api, 'DELETE', '/v2/device_profiles/fuzzed',
                        None).status_int == 204


def test_a_profile_asking_for_too_many_accelerators_is_refused(api):
    """Regression: `resources:FPGA: 100000000` made ARQ creation insert
    one row per accelerator (minutes, gigabytes) before answering.
    """
    profile = [{'name': 'huge', 'groups': [{'resources:FPGA': 10 ** 8}]}]
    assert _request(api, 'POST', '/v2/device_profiles',
                    profile).status_int == 201
    before = _snapshot()
    response = _request(api, 'POST', '/v2/accelerator_requests',
                        {'device_profile_name': 'huge'})
    assert response.status_int == 400
    assert 'at most 1000' in response.json['error_message']
    assert _snapshot() == before
    too_big = [{'name': 'huger', 'groups': [{'resources:FPGA': 2 ** 31}]}]
    assert _request(api, 'POST', '/v2/device_profiles',
                    too_big).status_int == 400
