# SPDX-License-Identifier: Apache-2.0
"""A 100 KB invalid value is quoted in part, never echoed back whole.

Each request below is refused; its error message quotes at most the first
100 characters of the offending value (and says how long it was), or
does not quote it at all.
"""

import json
import re

import pytest
import webob

from cyborg.api import app as api_app
from cyborg.conf import CONF
from tests.functional import seed

BIG = 100_000
ARQ = seed.BOUND_ARQ


def _bind(**values):
    ops = {'hostname': 'compute-1', 'device_rp_uuid': seed.GPU_RP,
           'instance_uuid': '01000000-0000-4000-8000-0000000000aa'}
    ops.update(values)
    return {ARQ: [{'op': 'add', 'path': '/' + k, 'value': v}
                  for k, v in ops.items()]}


def _profile(**fields):
    return [dict({'name': 'big', 'groups': [{'resources:PGPU': '1'}]},
                 **fields)]


CASES = {
    'description': ('POST', '/v2/device_profiles',
                    _profile(description='d' * BIG)),
    'description list': ('POST', '/v2/device_profiles',
                         _profile(description=['d'] * BIG)),
    'profile name': ('POST', '/v2/device_profiles', _profile(name='n' * BIG)),
    'unexpected key': ('POST', '/v2/device_profiles',
                       _profile(**{'k' * BIG: 1})),
    'trait name': ('POST', '/v2/device_profiles', _profile(
        groups=[{'trait:CUSTOM_' + 'T' * BIG: 'required'}])),
    'trait value': ('POST', '/v2/device_profiles', _profile(
        groups=[{'trait:CUSTOM_T': 'r' * BIG}])),
    'resource class': ('POST', '/v2/device_profiles', _profile(
        groups=[{'resources:CUSTOM_' + 'R' * BIG: '1'}])),
    'resource amount': ('POST', '/v2/device_profiles', _profile(
        groups=[{'resources:PGPU': '9' * BIG}])),
    'arq profile name': ('POST', '/v2/accelerator_requests',
                         {'device_profile_name': 'p' * BIG}),
    'bind hostname': ('PATCH', '/v2/accelerator_requests',
                      _bind(hostname='h' * BIG)),
    'bind uuid': ('PATCH', '/v2/accelerator_requests',
                  _bind(instance_uuid='i' * BIG)),
    'patch path': ('PATCH', '/v2/accelerator_requests',
                   {ARQ: [{'op': 'remove', 'path': '/' + 'x' * BIG}]}),
    'patch key': ('PATCH', '/v2/accelerator_requests',
                  {'a' * BIG: [{'op': 'remove', 'path': '/hostname'}]}),
    'attribute value': ('POST', '/v2/attributes', {
        'deployable_id': seed.GPU_DEPLOYABLE, 'key': 'k', 'value': 'v' * BIG}),
    'attribute deployable': ('POST', '/v2/attributes', {
        'deployable_id': 'z' * BIG, 'key': 'k', 'value': 'v'}),
    'query parameter': ('GET', '/v2/devices?%s=1' % ('q' * BIG), None),
    'query value': ('GET', '/v2/accelerator_requests?bind_state=%s'
                    % ('s' * BIG), None),
}


@pytest.fixture
def api(sqlite_database):
    seed.inventory()
    return api_app.setup_app(CONF)


@pytest.mark.parametrize('case', sorted(CASES))
def test_a_huge_value_is_quoted_in_part(api, case):
    method, path, body = CASES[case]
    request = webob.Request.blank(path, method=method)
    if body is not None:
        request.body = json.dumps(body).encode()
        request.content_type = 'application/json'
    response = request.get_response(api)
    assert 400 <= response.status_int < 500, response.status
    message = json.loads(response.json['error_message'])['faultstring']
    # Each value above repeats one character: no message holds more than
    # 100 of them in a row.
    assert not re.search(r'(.)\1{100}', message), message[:1000]
    assert len(message) <= 300, message
