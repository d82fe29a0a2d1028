# SPDX-License-Identifier: Apache-2.0
"""The root's _route hook (controllers.root.Root) ends where pecan's walk
of RootController ends, for every kind of path.
"""

import itertools

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
        assert root._direct(v2, [name]) is not None
        assert root._direct(v2, ['v2', name, 'abc']) is not None
        assert root._direct(v2, ['v2', name, 'abc', '']) is not None
    assert root._direct(v2, ['v2', 'devices', 'abc', 'enable']) is None
    assert root._direct(v2, ['v2', 'device_profiles', 'index']) is None


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
