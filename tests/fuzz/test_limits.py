# SPDX-License-Identifier: Apache-2.0
"""Oversized and unparseable requests are refused early, with a 4xx.

In the app: a body over [api] max_request_body_size → 413 without being
read; JSON nested past json's limit, strings no database can store, query
strings that are not UTF-8, multipart bodies → 400/415 (each was a 500);
a path or mount prefix that is not UTF-8 → 400 saying so, before routing.
On the wire: cheroot (cyborg-aio, the embedded servers) and gunicorn
(cyborg-api) bound the request line and headers.
"""

import io
import json
import logging
import socket
import urllib.parse

import pytest
import webob

from cyborg.api import app as api_app
from cyborg.api import service as api_service
from cyborg.common import wsgi_server
from cyborg.conf import CONF

LIMIT = 1024 * 1024


class Unreadable(io.RawIOBase):
    """A request body that fails the test if anyone reads it."""

    def read(self, *args):
        raise AssertionError('the body was read')

    readinto = readline = read


@pytest.fixture
def api(sqlite_database):
    return api_app.setup_app(CONF)


def _request(path='/v2/device_profiles', method='POST', body=None,
             content_type='application/json', **environ):
    request = webob.Request.blank(path, method=method, headers={
        'OpenStack-API-Version': 'accelerator 2.4'})
    if body is not None:
        request.body = body
    if content_type:
        request.content_type = content_type
    request.environ.update(environ)
    return request


def _fault(response):
    return json.loads(response.json['error_message'])['faultstring']


def test_the_default_limit_is_one_mebibyte():
    assert CONF.api.max_request_body_size == LIMIT


def test_a_declared_oversized_body_is_refused_unread(api):
    request = _request()
    request.environ.update({'CONTENT_LENGTH': str(LIMIT + 1),
                            'wsgi.input': Unreadable()})
    response = request.get_response(api)
    assert response.status_int == 413
    assert 'larger than 1048576 bytes' in _fault(response)


def test_the_limit_is_configurable(sqlite_database):
    CONF.set_override('max_request_body_size', 2048, group='api')
    app = api_app.setup_app(CONF)
    body = json.dumps([{'name': 'x' * 3000}]).encode()
    assert _request(body=body).get_response(app).status_int == 413


def test_a_chunked_body_is_cut_off_past_the_limit(api):
    request = _request()
    request.environ.pop('CONTENT_LENGTH', None)
    request.environ.update({'wsgi.input': io.BytesIO(b'[' * (LIMIT * 3)),
                            'wsgi.input_terminated': True})
    response = request.get_response(api)
    assert response.status_int == 413
    assert request.environ['wsgi.input'].tell() == LIMIT + 1


def test_a_chunked_body_under_the_limit_is_served(api):
    body = json.dumps([{'name': 'chunked', 'groups': [
        {'resources:PGPU': 1}]}]).encode()
    request = _request()
    request.environ.pop('CONTENT_LENGTH', None)
    request.environ.update({'wsgi.input': io.BytesIO(body),
                            'wsgi.input_terminated': True})
    assert request.get_response(api).status_int == 201


@pytest.mark.parametrize('content_length', ['-5', 'abc'])
def test_a_malformed_content_length_is_a_400(api, content_length):
    request = _request(body=b'[]')
    request.environ['CONTENT_LENGTH'] = content_length
    assert request.get_response(api).status_int == 400


@pytest.mark.parametrize('bomb', [b'[' * 100000, b'{"a":' * 100000,
                                  b'[' * 5000 + b']' * 5000])
@pytest.mark.parametrize('path,method', [
    ('/v2/device_profiles', 'POST'), ('/v2/accelerator_requests', 'PATCH'),
    ('/v2/accelerator_requests', 'POST'), ('/v2/attributes', 'POST')])
def test_json_nesting_bombs_are_a_400(api, bomb, path, method):
    response = _request(path, method, bomb).get_response(api)
    assert response.status_int == 400
    assert 'Malformed JSON' in _fault(response)


@pytest.mark.parametrize('text', ['\\u0000', 'a\\u0000', '\\ud800',
                                  '\\udfff x'])
def test_unstorable_strings_are_a_400(api, text):
    body = ('[{"name": "p", "description": "%s", '
            '"groups": [{"resources:PGPU": 1}]}]' % text).encode()
    response = _request(body=body).get_response(api)
    assert response.status_int == 400
    assert 'NUL' in _fault(response)


def test_a_surrogate_pair_is_an_ordinary_character(api):
    body = (b'[{"name": "p", "description": "\\ud83d\\ude00", '
            b'"groups": [{"resources:PGPU": 1}]}]')
    assert _request(body=body).get_response(api).status_int == 201


def _client_fault(response):
    """The faultstring of a Cyborg 400 body."""
    assert response.status_int == 400, response.text
    fault = json.loads(response.json['error_message'])
    assert fault['faultcode'] == 'Client'
    return fault['faultstring']


@pytest.mark.parametrize('path,query', [
    ('/v2/device_profiles', 'name=%ff'), ('/v2/accelerator_requests',
                                          'instance=%c3%28'),
    ('/v2/device_profiles', 'name=%00'), ('/v2/device_profiles/%00', ''),
    ('/v2/devices', '%fe=1'),
    # Paths that are not UTF-8 once percent-decoded, with and without a
    # query string to parse.
    ('/v2/device_profiles/%ff', ''), ('/v2/%c3%28', ''), ('/%ff', ''),
    ('/v2/device_profiles%ff', 'name=a')])
def test_bad_query_strings_and_paths_are_a_400(api, path, query):
    request = _request(path, 'GET', content_type=None)
    request.environ['QUERY_STRING'] = query
    # PATH_INFO as a WSGI server hands it on: percent-decoded, its bytes
    # as latin-1 characters (PEP 3333).
    request.environ['PATH_INFO'] = urllib.parse.unquote(path, 'latin-1')
    assert _client_fault(request.get_response(api))


NOT_UTF8 = 'The URL path is not UTF-8 once percent-decoded.'


@pytest.mark.parametrize('method', ['GET', 'POST', 'DELETE'])
@pytest.mark.parametrize('environ', [
    {'PATH_INFO': b'/v2/device_profiles/\xff'.decode('latin-1')},
    {'PATH_INFO': '/v2/device_profiles/\xc3\x28'},
    # The mount prefix comes from the server, or from a client's
    # X-Forwarded-Prefix when [oslo_middleware]
    # enable_proxy_headers_parsing is on; handlers read it for links.
    {'SCRIPT_NAME': '/cyborg\xff'},
    # Past latin-1: no server hands such a path on (httpx's
    # WSGITransport does, for %FF), and webob fails on it too.
    {'PATH_INFO': '/v2/device_profiles/\ufffd'}])
def test_a_path_that_is_not_utf8_is_a_400_before_routing(
        api, method, environ, caplog):
    request = _request('/v2/device_profiles', method,
                       body=b'[]' if method == 'POST' else None)
    request.environ.update(environ)
    assert _client_fault(request.get_response(api)) == NOT_UTF8
    # The client's mistake: no traceback in the log.
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize('environ', [
    {'PATH_INFO': b'/v2/device_profiles/\xff'.decode('latin-1')},
    {'SCRIPT_NAME': '/cyborg\xff'},
    {'PATH_INFO': '/v2/device_profiles/\ufffd'}])
def test_without_the_guard_such_a_path_is_still_a_400(
        sqlite_database, monkeypatch, environ, caplog):
    # An api-paste.ini may leave the `parseable` filter out: the request
    # object itself refuses what webob cannot decode.
    monkeypatch.setattr(api_app, 'STEPS', tuple(
        step for step in api_app.STEPS if step[0] != 'parseable'))
    app = api_app.setup_app(CONF)
    request = _request('/v2/device_profiles', 'GET', content_type=None)
    request.environ.update(environ)
    assert _client_fault(request.get_response(app)) == NOT_UTF8
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize('name', ['\u00e9', '\u20ac'])
def test_a_utf8_path_is_routed(api, name):
    request = _request('/v2/device_profiles', 'GET', content_type=None)
    request.environ['PATH_INFO'] = (
        '/v2/device_profiles/' + name.encode().decode('latin-1'))
    response = request.get_response(api)
    assert response.status_int == 404
    assert _fault(response) == ('Device Profile not found with name=%s'
                                % name)


@pytest.mark.parametrize('content_type', [
    'multipart/form-data', 'multipart/form-data; boundary=zz',
    'multipart/mixed'])
def test_multipart_bodies_are_a_415(api, content_type):
    response = _request(body=b'[]', content_type=content_type
                        ).get_response(api)
    assert response.status_int == 415


def test_a_form_in_another_charset_is_a_400(api):
    response = _request(
        body=b'a=\xff', content_type='application/x-www-form-urlencoded; '
                                     'charset=utf-16').get_response(api)
    assert response.status_int == 400


def test_a_form_encoded_json_body_still_works(api):
    """curl -d sends JSON as application/x-www-form-urlencoded."""
    body = json.dumps([{'name': 'curl', 'groups': [
        {'resources:PGPU': 1}]}]).encode()
    response = _request(
        body=body, content_type='application/x-www-form-urlencoded'
    ).get_response(api)
    assert response.status_int == 201


# --- on the wire -------------------------------------------------------------

@pytest.fixture
def served_api(api):
    server = wsgi_server.ThreadedServer('api-limits-test', api)
    server.start()
    yield server
    server.stop()


def _exchange(server, raw):
    """Send raw bytes; the status line of the answer."""
    with socket.create_connection((server.host, server.port),
                                  timeout=30) as conn:
        try:
            conn.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass   # refused before all of it was sent
        answer = conn.makefile('rb').readline()
    return answer.decode('latin-1').strip()


def test_cheroot_refuses_a_declared_oversized_body_without_it(served_api):
    # Nothing of the body is sent: the answer comes from the headers.
    status = _exchange(served_api, (
        'POST /v2/device_profiles HTTP/1.1\r\nHost: x\r\n'
        'Content-Type: application/json\r\n'
        'Content-Length: %d\r\n\r\n' % (LIMIT * 100)).encode())
    assert status.startswith('HTTP/1.1 413')


def test_cheroot_cuts_off_an_oversized_chunked_body(served_api):
    chunk = b'[' * 65536
    body = b''.join(b'%x\r\n%s\r\n' % (len(chunk), chunk)
                    for _ in range(20)) + b'0\r\n\r\n'
    status = _exchange(served_api, (
        b'POST /v2/device_profiles HTTP/1.1\r\nHost: x\r\n'
        b'Content-Type: application/json\r\n'
        b'Transfer-Encoding: chunked\r\n\r\n' + body))
    assert status.startswith('HTTP/1.1 413')


def test_cheroot_refuses_oversized_headers(served_api):
    status = _exchange(served_api, (
        'GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n'
        % ('a' * wsgi_server.MAX_HEADER_BYTES)).encode())
    assert status.startswith('HTTP/1.1 413')


def test_cheroot_refuses_an_oversized_request_line(served_api):
    status = _exchange(served_api, (
        'GET /v2/devices?x=%s HTTP/1.1\r\nHost: x\r\n\r\n'
        % ('a' * wsgi_server.MAX_HEADER_BYTES)).encode())
    assert status.startswith('HTTP/1.1 414')


@pytest.mark.parametrize('path', ['/v2/device_profiles/%FF',
                                  '/v2/device_profiles/\xff', '/%C3%28'])
def test_cheroot_hands_on_a_path_that_is_not_utf8_to_be_refused(
        served_api, path):
    # Percent-encoded or raw, the bytes reach the app as latin-1.
    status = _exchange(served_api, b'GET %s HTTP/1.1\r\nHost: x\r\n\r\n'
                       % path.encode('latin-1'))
    assert status.startswith('HTTP/1.1 400')


def test_gunicorn_keeps_its_header_limits():
    """cyborg-api leaves gunicorn's limits on (414 for a request line over
    4094 bytes, 431 for a header over 8190 or more than 100 headers).
    """
    cfg = api_service.Server(CONF).cfg
    assert 0 < cfg.limit_request_line <= 8190
    assert 0 < cfg.limit_request_field_size <= 8190
    assert 0 < cfg.limit_request_fields <= 100
