# SPDX-License-Identifier: Apache-2.0
"""A request leaves nothing for the cyclic garbage collector: what it made
is freed by reference counting when the server drops its environ, so a
server's workers do not stop every few dozen requests to collect the
environs, requests, responses and contexts of earlier ones (gunicorn's
sync worker and cheroot drop the environ; uWSGI also clears it).
"""

import gc
import json

import pytest
import webob

from cyborg.api import app as api_app
from cyborg.conf import CONF
from tests import wsgi_calls

MISSING = '00000000-0000-0000-0000-000000000000'


def _call(app, method, path, body=None, headers=None):
    response = wsgi_calls.call(app, method, path, body, headers)
    return response.status_int, response.body


def unreachable_after(app, method, path, body=None, headers=None):
    """(status, the objects one request left in reference cycles)."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        status, _ = _call(app, method, path, body, headers)
        gc.collect()
        left = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return status, left


@pytest.fixture
def app(sqlite_database):
    return api_app.setup_app(CONF)


@pytest.fixture
def profile(app):
    status, data = _call(app, 'POST', '/v2/device_profiles', [
        {'name': 'garbage', 'groups': [{'resources:FPGA': '1'}]}])
    assert status == 201
    return json.loads(data)['uuid']


@pytest.mark.parametrize('method, path, body, expected', [
    ('GET', '/', None, 200),
    ('GET', '/v2', None, 200),
    ('GET', '/v2/device_profiles', None, 200),
    ('GET', '/v2/device_profiles/{profile}', None, 200),
    ('GET', '/v2/device_profiles/' + MISSING, None, 404),
    ('POST', '/v2/device_profiles', [{'name': 'more', 'groups': [
        {'resources:FPGA': '1'}]}], 201),
    ('POST', '/v2/device_profiles', [{'name': 'bad', 'groups': [
        {'nope': '1'}]}], 400),
    ('POST', '/v2/accelerator_requests',
     {'device_profile_name': 'garbage'}, 201),
    ('GET', '/v2/accelerator_requests?instance=' + MISSING, None, 200),
    ('DELETE', '/v2/accelerator_requests?arqs=' + MISSING, None, 404),
    ('DELETE', '/v2/device_profiles/{profile}', None, 204),
    ('PUT', '/v2/device_profiles', None, 405),
    ('GET', '/v2/nothing', None, 404),
])
def test_a_request_leaves_no_cycles(app, profile, method, path, body,
                                    expected):
    path = path.format(profile=profile)
    # The first calls fill what is kept across requests (compiled
    # statements, remembered decisions): not garbage.
    if method in ('GET', 'PUT'):
        _call(app, method, path, body)
    status, left = unreachable_after(app, method, path, body)
    assert status == expected
    assert left == [], sorted({type(o).__name__ for o in left})


def test_pecans_locals_made_the_cycle(app, profile):
    # What the app breaks: pecan keeps its request (which keeps the
    # environ) in the environ. Without the break a profile's GET leaves
    # its environ, request and response behind.
    environ = webob.Request.blank('/v2/device_profiles/' + profile).environ
    list(app(environ, lambda *a: None))
    assert 'pecan.locals' not in environ
    pecan_app = api_app._pecan_app()
    environ = webob.Request.blank('/v2/device_profiles/' + profile).environ
    super(api_app._Pecan, pecan_app).__call__(environ, lambda *a: None)
    assert environ['pecan.locals']['request'].environ is environ
