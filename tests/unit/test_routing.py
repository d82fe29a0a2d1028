# SPDX-License-Identifier: Apache-2.0
"""The root's _route hook (controllers.root.Root) ends where pecan's walk
of RootController ends, for every kind of path.
"""

import itertools

import pecan
import pecan.core
import pecan.hooks
from pecan import routing
import pytest
import webob
import webob.exc

from cyborg.api import app as api_app
from cyborg.api.controllers import root
from cyborg.conf import CONF

SEGMENTS = ['', 'v2', 'device_profiles', 'accelerator_requests', 'devices',
            'deployables', 'attributes', 'abc', 'index', 'get_all',
            '_lookup', 'enable', 'program', 'nothing', '__class__']
PATHS = sorted({'/' + '/'.join(p) for n in range(1, 4)
                for p in itertools.product(SEGMENTS[:9], repeat=n)}
               | {'/v2/devices/abc/enable', '/v2/deployables/abc/program',
                  '/v2/device_profiles/abc/nothing', '/v2/nothing',
                  '/nothing', '/v2/device_profiles/_lookup',
                  '/v2/device_profiles/\u00e9', '/v2/devices/abc/enable/'})


def _where(tree, path):
    args = path.split('/')[1:]
    try:
        found, remainder = routing.lookup_controller(tree, args, object())
    except routing.NonCanonicalPath as e:
        found, remainder = e.controller, e.remainder
    except (webob.exc.HTTPNotFound, routing.PecanNotFound):
        return 'not found'
    except Exception as e:
        return type(e)
    owner = getattr(found, '__self__', None)
    if isinstance(owner, root.RootController):
        # The root's own handlers (the version document): the same
        # functions, on a Root or on the RootController it walks.
        return getattr(found, '__func__', found), list(remainder)
    return (getattr(found, '__func__', found), type(owner),
            None if owner is None else dict(vars(owner)), list(remainder))


def _handler(where):
    """Whether pecan's walk ended on a public method of a controller."""
    return (isinstance(where, tuple) and len(where) == 4
            and where[1] is not type(None)
            and not where[0].__name__.startswith('_'))


@pytest.mark.parametrize('path', PATHS)
def test_route_ends_where_the_walk_ends(path):
    walked = _where(root.RootController(), path)
    routed = _where(root.Root(), path)
    if isinstance(walked, tuple) and len(walked) == 4 and not _handler(
            walked):
        # The walk reached a hook or a function through a class
        # attribute, which no request may call: not found instead.
        assert routed == 'not found'
    else:
        assert routed == walked


ATTRIBUTE_PATHS = ['/v2/__class__', '/v2/device_profiles/__class__',
                   '/v2/device_profiles/_lookup', '/v2/devices/abc/__class__',
                   '/v2/device_profiles/abc/_lookup', '/v2/_lookup',
                   '/_route', '/__dict__', '/v2/devices/abc/__class__/']


@pytest.fixture
def api(sqlite_database):
    return api_app.setup_app(CONF)


@pytest.mark.parametrize('method', ['GET', 'POST', 'DELETE', 'PATCH'])
@pytest.mark.parametrize('path', ATTRIBUTE_PATHS)
def test_a_segment_naming_a_python_attribute_is_not_found(api, path,
                                                          method):
    response = webob.Request.blank(path, method=method).get_response(api)
    assert response.status_int == 404, (path, method, response.status)


def test_crud_paths_take_the_direct_route():
    v2 = root.RootController.v2
    for name in root.COLLECTIONS:
        assert root.direct(v2, [name]) is not None
        assert root.direct(v2, ['v2', name, 'abc']) is not None
        assert root.direct(v2, ['v2', name, 'abc', '']) is not None
    assert root.direct(v2, ['v2', 'devices', 'abc', 'enable']) is None
    assert root.direct(v2, ['v2', 'device_profiles', 'index']) is None


def _answer(app_call, environ):
    got = {}

    def start_response(status, headers, exc_info=None):
        got.update(status=status, headers=headers)
    body = b''.join(app_call(dict(environ), start_response))
    return got['status'], got['headers'], body


@pytest.mark.parametrize('public_endpoint', [None, 'https://cyborg.example/'])
@pytest.mark.parametrize('extra', [
    {},
    {'HTTP_HOST': 'api.example:8443', 'wsgi.url_scheme': 'https'},
    {'SCRIPT_NAME': '/accelerator'},
    {'QUERY_STRING': 'anything=1'},
    {'HTTP_ACCEPT': 'application/json'},
    {'SCRIPT_NAME': '/cyborg\xff'},      # not UTF-8: 400, both ways
])
def test_get_root_answers_as_pecans_root_controller(extra, public_endpoint):
    # _Pecan answers GET / itself (root.answer_root); pecan's dispatch to
    # RootController.get gives the same status, headers and body.
    CONF.set_override('public_endpoint', public_endpoint, group='api')
    try:
        app = api_app._pecan_app()
        environ = webob.Request.blank('/').environ
        environ.update(extra)
        direct = _answer(app, environ)

        def walk(env, start_response):
            # _Pecan.__call__ but for answering / itself.
            env.pop('HTTP_ACCEPT', None)
            return super(api_app._Pecan, app).__call__(env, start_response)
        walked = _answer(walk, environ)
    finally:
        CONF.clear_override('public_endpoint', group='api')
    assert direct == walked
    # A prefix that is not UTF-8 is read for the links only.
    assert direct[0] == ('400 Bad Request' if '\xff' in str(extra)
                         and not public_endpoint else '200 OK')


def _found(find, app, path, method, query):
    """What `find` (a find_controller) gives for one request: the handler
    and the arguments a handler is called with (pecan passes query
    parameters as keyword arguments, which no handler takes: see
    _Pecan.find_controller), the type pecan settles on and what its
    thread-local state holds; or the error it raises.
    """
    environ = webob.Request.blank('/', method=method).environ
    # As a server hands a path over: its bytes as latin-1 (PEP 3333).
    environ['PATH_INFO'] = path if isinstance(path, str) else path.decode(
        'latin-1')
    environ['QUERY_STRING'] = query
    environ.pop('HTTP_ACCEPT', None)        # as _Pecan.__call__ does
    req = app.request_cls(environ)
    req.pecan = dict(content_type=None)
    req.context = {}
    state = pecan.core.RoutingState(req, app.response_cls(), app)
    local = pecan.core.state
    try:
        controller, args, _kwargs = find(state)
    except Exception as e:
        # Set first: the error's answer reads it.
        assert local.request is req and local.response is state.response
        return type(e), getattr(e, 'status_int', None)
    assert local.request is req and local.response is state.response
    assert local.controller is controller is state.controller
    assert list(state.arguments.args) + list(
        state.arguments.varargs) == args
    # An item's controller object is made anew for each request.
    args = [(type(a), dict(vars(a))) if hasattr(a, '__dict__') else a
            for a in args]
    return (controller, args, req.pecan['routing_path'],
            req.pecan['extension'], req.pecan['content_type'])


@pytest.mark.parametrize('path', [p.encode() for p in PATHS] + [
    b'/v2/device_profiles//', b'/v2/accelerator_requests/a/b',
    b'/v2/device_profiles/\xff', b'/v2/\xc3\x28'])
def test_find_controller_finds_what_pecan_finds(path):
    app = api_app._pecan_app()
    assert app._lean
    for method in ('GET', 'POST', 'DELETE', 'PATCH', 'PUT'):
        for query in ('', 'name=a&limit=2'):
            lean = _found(app.find_controller, app, path, method, query)
            walked = _found(lambda s: pecan.Pecan.find_controller(app, s),
                            app, path, method, query)
            assert lean == walked, (path, method, query)


@pytest.mark.parametrize('hooked', [False, True])
def test_an_app_with_hooks_finds_through_pecan(monkeypatch, hooked):
    app = api_app._Pecan('cyborg.api.controllers.root.Root',
                         hooks=[pecan.hooks.PecanHook()] if hooked else [],
                         request_cls=api_app._Request,
                         response_cls=api_app.base.Response,
                         guess_content_type_from_ext=False)
    assert app._lean is not hooked
    walks = []
    walk = pecan.Pecan.find_controller

    def spy(self, state):
        walks.append(state)
        return walk(self, state)
    monkeypatch.setattr(pecan.Pecan, 'find_controller', spy)
    found = _found(app.find_controller, app, '/v2/device_profiles', 'GET', '')
    assert found[0].__name__ == 'get_all'
    assert len(walks) == (1 if hooked else 0)
