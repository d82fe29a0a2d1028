# SPDX-License-Identifier: Apache-2.0
"""What the fuzzers found, on every database backend: each was a 500
(or, for the first, minutes of inserts) and is now a 4xx that writes
nothing."""

import json

import pytest
import webob

from cyborg.api import app as api_app
from cyborg.conf import CONF
from tests.functional import seed
from tests.fuzz import test_properties

_PROFILE = {'name': 'p', 'groups': [{'resources:PGPU': 1}]}

CASES = [
    # schemathesis, MySQL and PostgreSQL: an id past the integer column.
    ('POST', '/v2/attributes', {'deployable_id': 11358822892.0,
                                'key': 'k', 'value': 'v'}, None, 400),
    ('POST', '/v2/attributes', {'deployable_id': '99999999999999999999',
                                'key': 'k', 'value': 'v'}, None, 400),
    # PostgreSQL stores no NUL; no database stores a lone surrogate.
    ('POST', '/v2/device_profiles', '[{"name": "p", "description": '
     '"a\\u0000", "groups": [{"resources:PGPU": 1}]}]', None, 400),
    ('POST', '/v2/device_profiles', '[{"name": "p", "description": '
     '"\\udc00", "groups": [{"resources:PGPU": 1}]}]', None, 400),
    ('PATCH', '/v2/accelerator_requests', '{"%s": [{"op": "add", "path": '
     '"/hostname", "value": "h\\u0000"}, {"op": "add", "path": '
     '"/device_rp_uuid", "value": "%s"}, {"op": "add", "path": '
     '"/instance_uuid", "value": "%s"}]}' % (
         test_properties.ARQ_UUIDS[0], seed.GPU_RP, seed.BOUND_INSTANCE),
     None, 400),
    ('GET', '/v2/device_profiles?name=%00', None, None, 400),
    ('GET', '/v2/accelerator_requests?instance=%ff', None, None, 400),
    # schemathesis: webob's form parsing while pecan routes.
    ('POST', '/v2/device_profiles', [_PROFILE], 'multipart/form-data', 415),
    ('POST', '/v2/device_profiles', [_PROFILE],
     'application/x-www-form-urlencoded; charset=latin-1', 400),
    # pecan parsing the JSON body itself while routing.
    ('POST', '/v2/device_profiles', '[' * 50000, None, 400),
    # A profile asking for 10^8 FPGAs made 10^8 ARQ rows.
    ('POST', '/v2/device_profiles', [{'name': 'huge', 'groups': [
        {'resources:FPGA': 2 ** 31}]}], None, 400),
]


@pytest.fixture
def api(database):
    seed.inventory()
    return api_app.setup_app(CONF)


@pytest.mark.parametrize('method,path,body,content_type,status', CASES)
def test_refused_with_a_4xx_and_nothing_written(
        api, method, path, body, content_type, status):
    request = webob.Request.blank(path, method=method, headers={
        'OpenStack-API-Version': 'accelerator 2.4'})
    if body is not None:
        request.body = (body if isinstance(body, str)
                        else json.dumps(body)).encode()
    request.content_type = content_type or 'application/json'
    before = test_properties._snapshot()
    response = request.get_response(api)
    assert response.status_int == status, response.text
    assert json.loads(response.json['error_message'])['faultstring']
    assert test_properties._snapshot() == before
