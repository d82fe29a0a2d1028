# SPDX-License-Identifier: Apache-2.0
"""The default pipeline run as one layer (cyborg.api.stack.Stack) answers
as its layers, composed one by one, answer: the same status, headers and
body, the same environ handed on, the same metrics, for every kind of
request and every kind of answer from below.
"""

import io
import os

from oslo_db import exception as db_exc
import pytest
import webob

from cyborg.api import app as api_app
from cyborg.api import metrics
from cyborg.api import pipeline
from cyborg.api import stack
from cyborg.conf import CONF
from cyborg.db import api as db_api

INI = os.path.join(os.path.dirname(__file__), '..', '..', 'etc', 'cyborg',
                   'api-paste.ini')
GLOBAL_ID = 'req-12345678-1234-4234-8234-123456789abc'


def _layers(inner):
    """STEPS around `inner`, one layer each (as app.compose does)."""
    app = inner
    for _name, step in reversed(api_app.STEPS):
        app = step(app, CONF)
    return app


def _environ(path='/v2/devices', method='GET', body=None, headers=None,
             **extra):
    environ = webob.Request.blank(path, method=method,
                                  headers=headers or {}).environ
    if body is not None:
        environ['wsgi.input'] = io.BytesIO(body)
        environ['CONTENT_LENGTH'] = str(len(body))
    environ.update(extra)
    return environ


def _counts():
    """Every sample of the API's request metrics, by name and labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in metrics.default().registry.collect()
            if family.name.startswith('cyborg_api_request')
            for s in family.samples if not s.name.endswith('_created')}


def _run(app, environ):
    """What a client and the app below see of one request."""
    got = []

    def start_response(status, headers, exc_info=None):
        got.append((status, list(headers)))
        return lambda data: got.append(('written', data))

    before = _counts()
    try:
        out = app(environ, start_response)
        body = b''.join(out)
        if hasattr(out, 'close'):
            out.close()
    except BaseException as e:
        body = type(e)
    # What the request added to the counters (durations aside: only
    # their count, which moves by one, is the same both ways).
    counts = {k: v - before.get(k, 0) for k, v in _counts().items()
              if v != before.get(k, 0) and (
                  k[0].endswith('_total') or k[0].endswith('_count'))}
    ids = [v for _s, h in got if _s != 'written' for k, v in h
           if k.lower() == 'x-openstack-request-id']
    answers = [(s, [(k, 'ID' if v in ids and k.lower() ==
                     'x-openstack-request-id' and v != 'mine' else v)
                    for k, v in h]) for s, h in got]
    seen = {k: v for k, v in environ.items()
            if k not in ('openstack.request_id', 'wsgi.input')
            and not k.startswith('webob.')}
    seen['webob'] = sorted(k for k in environ if k.startswith('webob.'))
    seen['openstack.request_id'] = 'openstack.request_id' in environ
    if body in (b'',) or isinstance(body, bytes) and b'cyborg_api' in body:
        # A scrape: the counters it shows moved between the two calls.
        body = b'scrape' if body else body
    return answers, body, seen, counts


def _same(inner, environ, monkeypatch=None):
    composed = _layers(inner)
    fused = stack.fuse(_layers(inner))
    assert isinstance(fused, stack.Stack)
    a = _run(composed, dict(environ, **{'wsgi.input': io.BytesIO(
        environ['wsgi.input'].getvalue())}))
    b = _run(fused, dict(environ, **{'wsgi.input': io.BytesIO(
        environ['wsgi.input'].getvalue())}))
    assert b == a
    return a


def _json(environ, start_response):
    start_response('200 OK', [('Content-Type', 'application/json'),
                              ('Content-Length', '2')])
    return [b'{}']


def _tuple_headers(environ, start_response):
    start_response('201 Created', (('Content-Type', 'text/plain'),))
    return [b'made']


def _own_id(environ, start_response):
    start_response('200 OK', [('X-OpenStack-Request-Id', 'mine')])
    return [b'']


def _redirect(environ, start_response):
    start_response('302 Found', [('Location', '/v2/elsewhere')])
    return []


def _plain_404(environ, start_response):
    start_response('404 Not Found', [('Content-Type', 'text/plain')])
    return [b'404 Not Found\n\nNo such thing']


def _html_405(environ, start_response):
    start_response('405 Method Not Allowed', [
        ('Content-Type', 'text/html'), ('Allow', 'GET')])
    return [b'<html>no</html>']


def _fault_409(environ, start_response):
    body = b'{"error_message": "{\\"faultstring\\": \\"taken\\"}"}'
    start_response('409 Conflict', [('Content-Type', 'application/json')])
    return [body]


def _lazy(environ, start_response):
    yield b'late'
    start_response('200 OK', [('Content-Type', 'text/plain')])


def _writes(environ, start_response):
    write = start_response('200 OK', [('Content-Type', 'text/plain')])
    write(b'written ')
    return [b'returned']


def _silent(environ, start_response):
    return [b'no status']


def _raises(exc):
    def app(environ, start_response):
        raise exc
    app.__name__ = type(exc).__name__
    return app


def _closing(environ, start_response):
    class Body(list):
        def close(self):
            environ['test.closed'] = True
    start_response('500 Internal Server Error', [])
    return Body([b'boom'])


APPS = [_json, _tuple_headers, _own_id, _redirect, _plain_404, _html_405,
        _fault_409, _lazy, _writes, _silent, _closing,
        _raises(RuntimeError('bug')),
        _raises(db_exc.DBConnectionError('gone')),
        _raises(db_api.CommitOutcomeUnknown('lost')),
        _raises(KeyboardInterrupt())]

ENVIRONS = {
    'root': _environ('/'),
    'empty path': _environ('/', PATH_INFO=''),
    'v2': _environ('/v2'),
    'collection': _environ('/v2/devices'),
    'head': _environ('/v2/devices', method='HEAD'),
    'odd method': _environ('/v2/devices', method='BREW'),
    'microversion': _environ(headers={
        'OpenStack-API-Version': 'accelerator 2.3'}),
    'latest': _environ(headers={
        'OpenStack-API-Version': 'accelerator latest'}),
    'bare version': _environ(headers={'OpenStack-API-Version': '2.1'}),
    'unserved version': _environ(headers={
        'OpenStack-API-Version': 'accelerator 3.0'}),
    'bad version': _environ(headers={
        'OpenStack-API-Version': 'accelerator x'}),
    'json body': _environ(method='POST', body=b'{"a": 1}',
                          CONTENT_TYPE='application/json'),
    'form body': _environ(method='POST', body=b'a=1&b=2',
                          CONTENT_TYPE='application/x-www-form-urlencoded'),
    'nul in form': _environ(method='POST', body=b'a=%00',
                            CONTENT_TYPE='application/x-www-form-urlencoded'),
    'too large': _environ(method='POST', body=b'{}',
                          CONTENT_TYPE='application/json',
                          CONTENT_LENGTH=str(10 ** 9)),
    'bad length': _environ(method='POST', body=b'{}',
                           CONTENT_TYPE='application/json',
                           CONTENT_LENGTH='abc'),
    'chunked': _environ(method='POST', body=b'{"a": 1}',
                        CONTENT_TYPE='application/json', CONTENT_LENGTH='',
                        **{'wsgi.input_terminated': True}),
    'chunked too large': _environ(
        method='POST', body=b'x' * (CONF.api.max_request_body_size + 1),
        CONTENT_TYPE='application/json', CONTENT_LENGTH='',
        **{'wsgi.input_terminated': True}),
    'multipart': _environ(method='POST', body=b'--x--',
                          CONTENT_TYPE='multipart/form-data; boundary=x'),
    'query': _environ('/v2/devices?hostname=a&type=GPU'),
    'nul in query': _environ('/v2/devices', QUERY_STRING='a=%00'),
    'nul in path': _environ('/v2/devices', PATH_INFO='/v2/de\x00vices'),
    'path not utf-8': _environ('/v2/devices', PATH_INFO='/v2/\xff'),
    'prefix not utf-8': _environ('/v2/devices', SCRIPT_NAME='/c\xff'),
    'utf-8 path': _environ('/v2/devices',
                           PATH_INFO='/v2/\xc3\xa9'),
    'identity': _environ(headers={'X-Roles': 'reader',
                                  'X-Project-Id': 'p'}),
    'global id': _environ(headers={'X-OpenStack-Request-Id': GLOBAL_ID}),
    'bad global id': _environ(headers={'X-OpenStack-Request-Id': 'nope'}),
    'origin': _environ(headers={'Origin': 'https://example.org'}),
    'options': _environ(method='OPTIONS'),
    'metrics': _environ('/metrics'),
}


@pytest.mark.parametrize('name', sorted(ENVIRONS))
@pytest.mark.parametrize('inner', APPS, ids=lambda a: a.__name__)
def test_one_layer_answers_as_the_layers(inner, name):
    _same(inner, ENVIRONS[name])


def test_one_layer_without_metrics():
    CONF.set_override('metrics_enabled', False, group='api')
    fused = stack.fuse(_layers(_json))
    assert isinstance(fused, stack.Stack) and fused.metrics is None
    for environ in ENVIRONS.values():
        for inner in (_json, _plain_404, _raises(RuntimeError())):
            composed = _layers(inner)
            fused = stack.fuse(_layers(inner))
            a = _run(composed, dict(environ, **{
                'wsgi.input': io.BytesIO(environ['wsgi.input'].getvalue())}))
            b = _run(fused, dict(environ, **{
                'wsgi.input': io.BytesIO(environ['wsgi.input'].getvalue())}))
            assert b == a


def test_global_request_id_is_handed_on():
    seen = []

    def inner(environ, start_response):
        seen.append((environ.get('openstack.global_request_id'),
                     environ['openstack.request_id']))
        return _json(environ, start_response)
    stack.fuse(_layers(inner))(ENVIRONS['global id'].copy(),
                               lambda *a: None)
    assert seen[0][0] == GLOBAL_ID
    assert seen[0][1].startswith('req-')


@pytest.mark.parametrize('steps', [
    # A filter dropped, moved, or one the default list does not have.
    [s for s in api_app.STEPS if s[0] != 'parseable'],
    [api_app.STEPS[3], api_app.STEPS[0]] + [
        s for i, s in enumerate(api_app.STEPS) if i not in (0, 3)],
    list(api_app.STEPS[:5]) + [('extra', lambda app, conf: (
        lambda e, s: app(e, s)))] + list(api_app.STEPS[5:]),
])
def test_other_arrangements_stay_layered(steps):
    app = _json
    for _name, step in reversed(steps):
        app = step(app, CONF)
    assert stack.fuse(app) is app


@pytest.mark.parametrize('metrics_enabled', [True, False])
@pytest.mark.parametrize('headers', [
    {}, {'X-Forwarded-Proto': 'https', 'X-Forwarded-Host': 'api.example'},
    {'Forwarded': 'for=192.0.2.1;proto=https;host=api.example'},
    {'X-Forwarded-Prefix': '/accelerator', 'Origin': 'https://example.org'},
])
def test_proxy_headers_parsed_above_one_layer(headers, metrics_enabled):
    CONF.set_override('metrics_enabled', metrics_enabled, group='api')
    api_app._http_proxy_to_wsgi(_json, CONF)    # registers its options
    CONF.set_override('enable_proxy_headers_parsing', True,
                      group='oslo_middleware')

    def inner(environ, start_response):
        # What the proxy layer changed, in the answer.
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [repr(sorted((k, environ.get(k)) for k in (
            'wsgi.url_scheme', 'HTTP_HOST', 'SCRIPT_NAME',
            'REMOTE_ADDR'))).encode()]
    fused = stack.fuse(_layers(inner))
    proxy = fused.app if metrics_enabled else fused
    assert type(proxy).__name__ == 'HTTPProxyToWSGI'
    assert isinstance(proxy.application, stack.Stack)
    for path in ('/v2/devices', '/'):
        environ = _environ(path, headers=headers)
        a = _run(_layers(inner), dict(environ))
        b = _run(fused, dict(environ))
        assert b == a


@pytest.fixture
def apps(sqlite_database):
    return api_app.compose(CONF), api_app.setup_app(CONF)


@pytest.mark.parametrize('method,path,headers', [
    ('GET', '/', {}),
    ('GET', '/v2', {}),
    ('GET', '/v2/', {'OpenStack-API-Version': 'accelerator latest'}),
    ('GET', '/v2/device_profiles', {}),
    ('GET', '/v2/device_profiles/00000000-0000-0000-0000-000000000000', {}),
    ('GET', '/v2/accelerator_requests?instance=abc', {}),
    ('GET', '/v2/devices', {'OpenStack-API-Version': 'accelerator 2.6'}),
    ('GET', '/v2/devices', {'OpenStack-API-Version': 'accelerator 2.9'}),
    ('PUT', '/v2/device_profiles', {}),
    ('GET', '/v2/nothing', {}),
    ('POST', '/v2/device_profiles', {'Content-Type': 'application/json'}),
    ('GET', '/v2/devices', {'Origin': 'https://example.org'}),
    ('HEAD', '/v2', {}),
])
def test_the_app_answers_as_its_layers(apps, method, path, headers):
    composed, fused = apps
    assert isinstance(fused, stack.Stack)

    def answer(app):
        response = webob.Request.blank(path, method=method,
                                       headers=headers).get_response(app)
        assert response.headers['x-openstack-request-id'].startswith('req-')
        return (response.status, [(k, v) for k, v in response.headerlist
                                  if k.lower() != 'x-openstack-request-id'],
                response.body)
    assert answer(fused) == answer(composed)


def test_the_paste_file_runs_as_one_layer(sqlite_database):
    CONF.set_override('api_paste_config', os.path.abspath(INI), group='api')
    assert isinstance(pipeline.load(CONF), stack.Stack)


def test_compat_request_id_headers_keep_the_layers():
    app = _layers(_json)
    app.app.app.compat_headers = ['x-compute-request-id']
    assert stack.fuse(app) is app
