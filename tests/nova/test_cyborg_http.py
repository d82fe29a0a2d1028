# SPDX-License-Identifier: Apache-2.0
"""The accelerator client's typed errors: which HTTP failure becomes which
error, and that each message carries the service's own reason.
"""

import json

import pytest

from nova_cyborg_client import context as nova_context
from nova_cyborg_client import cyborg
from nova_cyborg_client import cyborg_http
from nova_cyborg_client import exception

CTX = nova_context.RequestContext()


def _fault(status, reason):
    """A failure as Cyborg's API writes it (cyborg/api/errors.py)."""
    return status, {'error_message': json.dumps(
        {'faultcode': 'Client' if status < 500 else 'Server',
         'faultstring': reason, 'debuginfo': None})}


@pytest.mark.parametrize('status, error', [
    (400, cyborg_http.BadRequest),
    (401, cyborg_http.NotAuthorized),
    (403, cyborg_http.NotAuthorized),
    (404, cyborg_http.NotFound),
    (405, cyborg_http.HTTPError),
    (406, cyborg_http.HTTPError),
    (409, cyborg_http.Conflict),
    (500, cyborg_http.ServerError),
    (503, cyborg_http.ServerError),
])
def test_status_to_error(stub, status, error):
    reason = 'the reason for %d' % status
    stub.routes[('GET', '/device_profiles')] = _fault(status, reason)
    api = cyborg_http.AcceleratorAPI(CTX)
    with pytest.raises(error) as e:
        api.request('GET', '/device_profiles', params={'name': 'dp'})
    assert type(e.value) is error
    assert e.value.status == status
    assert e.value.reason == reason
    assert str(e.value) == 'GET /device_profiles: HTTP %d: %s' % (status,
                                                                  reason)
    assert isinstance(e.value, cyborg_http.HTTPError)
    assert isinstance(e.value, cyborg_http.CyborgError)


def test_reason_without_cyborg_fault_body(stub):
    # A proxy's page: its text, blanks squeezed; an empty body: the status
    # line's phrase (the stub's is X).
    api = cyborg_http.AcceleratorAPI(CTX)
    stub.routes[('GET', '/device_profiles')] = (502, b'Bad\n  gateway')
    with pytest.raises(cyborg_http.ServerError) as e:
        api.request('GET', '/device_profiles')
    assert e.value.reason == 'Bad gateway'
    stub.routes[('GET', '/device_profiles')] = (502, None)
    with pytest.raises(cyborg_http.ServerError) as e:
        api.request('GET', '/device_profiles')
    assert e.value.reason == 'X'
    stub.routes[('GET', '/device_profiles')] = (
        400, {'error_message': 'not a JSON fault'})
    with pytest.raises(cyborg_http.BadRequest) as e:
        api.request('GET', '/device_profiles')
    assert e.value.reason == 'not a JSON fault'


def test_long_reason_is_cut(stub):
    stub.routes[('POST', '/accelerator_requests')] = _fault(400, 'x' * 5000)
    with pytest.raises(cyborg_http.BadRequest) as e:
        cyborg_http.AcceleratorAPI(CTX).request(
            'POST', '/accelerator_requests', body={})
    assert e.value.reason == 'x' * cyborg_http.REASON_LIMIT + '...'


def test_unreachable(conf):
    conf.set_override('endpoint_override', 'http://127.0.0.1:9/v2',
                      group='cyborg')
    with pytest.raises(cyborg_http.Unreachable) as e:
        cyborg_http.AcceleratorAPI(CTX).request('GET', '/device_profiles')
    assert e.value.status is None
    assert str(e.value).startswith(
        'GET /device_profiles: could not reach the accelerator service (')


def test_success_bodies(stub):
    api = cyborg_http.AcceleratorAPI(CTX)
    stub.routes[('DELETE', '/accelerator_requests')] = (204, None)
    assert api.request('DELETE', '/accelerator_requests') is None
    stub.routes[('GET', '/accelerator_requests/u')] = (200, b'<html>')
    with pytest.raises(cyborg_http.InvalidBody) as e:
        api.request('GET', '/accelerator_requests/u')
    assert str(e.value) == ('GET /accelerator_requests/u: HTTP 200 with a '
                            'body that is not JSON')


# -- what Nova's callers see: Nova's exceptions, reason included -------------

@pytest.mark.parametrize('status, error', [
    (400, cyborg_http.BadRequest),
    (403, cyborg_http.NotAuthorized),
    (404, cyborg_http.NotFound),
    (409, cyborg_http.Conflict),
    (500, cyborg_http.ServerError),
])
def test_client_calls_raise_novas_exceptions(stub, status, error):
    reason = 'service says no (%d)' % status
    for method in ('GET', 'POST', 'PATCH', 'DELETE'):
        stub.routes[(method, '/accelerator_requests')] = _fault(status,
                                                                reason)
    stub.routes[('GET', '/device_profiles')] = _fault(status, reason)
    stub.routes[('GET', '/accelerator_requests/u1')] = _fault(status, reason)
    client = cyborg.get_client(CTX)
    calls = [
        (exception.DeviceProfileError,
         lambda: client.get_device_profile_groups('dp')),
        (exception.AcceleratorRequestOpFailed,
         lambda: client.create_arqs('dp')),
        (exception.AcceleratorRequestBindingFailed,
         lambda: client.bind_arqs({'u1': {'hostname': 'h'}})),
        (exception.AcceleratorRequestOpFailed,
         lambda: client.get_arqs_for_instance('i')),
        (exception.AcceleratorRequestOpFailed,
         lambda: client.get_arq_by_uuid('u1')),
        (exception.AcceleratorRequestOpFailed,
         lambda: client.delete_arqs_for_instance('i')),
    ]
    for nova_error, call in calls:
        with pytest.raises(nova_error) as e:
            call()
        assert reason in str(e.value)
        assert 'HTTP %d' % status in str(e.value)
        assert type(e.value.__cause__) is error
    # Best effort: logged, not raised.
    client.delete_arqs_by_uuid(['u1'])


def test_binding_failure_names_the_arqs(stub):
    stub.routes[('PATCH', '/accelerator_requests')] = _fault(
        400, 'ARQ u1 is already bound')
    with pytest.raises(exception.AcceleratorRequestBindingFailed) as e:
        cyborg.get_client(CTX).bind_arqs({'u1': {}, 'u2': {}})
    assert e.value.arqs == ['u1', 'u2']
    assert str(e.value) == (
        'Failed to bind accelerator requests: PATCH /accelerator_requests: '
        'HTTP 400: ARQ u1 is already bound (ARQs u1,u2)')
