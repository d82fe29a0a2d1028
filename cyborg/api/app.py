# SPDX-License-Identifier: Apache-2.0
"""The WSGI application: pecan controllers inside the middleware pipeline

metrics → http_proxy_to_wsgi → cors → request_id → error body → body
size limit → parseable input (guard) → microversion → auth. The metrics
middleware serves GET /metrics (no auth) when [api] metrics_enabled, and
counts and times everything else.
"""

import inspect

from keystonemiddleware import auth_token
from oslo_middleware import http_proxy_to_wsgi
import pecan
import pecan.core
import pecan.routing
import webob.acceptparse
import webob.exc
import webob.multidict
import webob.request

from cyborg.api.controllers import base
from cyborg.api.controllers import root
from cyborg.api import errors
from cyborg.api import guard
from cyborg.api import metrics
from cyborg.api import middleware
from cyborg.api import stack
from cyborg.conf import CONF
from cyborg.conf import opts


class _Request(webob.request.BaseRequest):
    """webob's request, not pecan's: pecan.Request only wraps every
    attribute read (some 30 a request, each a Python call) to turn
    webob's UnicodeDecodeError into a bare 400. The only client input
    webob decodes that way are the path, the mount prefix and the query
    string or form body, and guard.Parseable refuses those before routing
    with the Cyborg fault body (encget() below does the same for a path
    when a paste pipeline leaves that filter out).

    Nor webob.Request's ad hoc attributes: it keeps the ones pecan sets
    on each request (`pecan`, `context`) in the environ, for other
    request objects made on it to see, through a Python __setattr__ and
    __getattr__ (five calls a request). Nothing here makes another request
    object to read them: they are plain attributes of this one.

    Handlers parse the JSON body themselves (base.body: a 400 for any
    malformed one). Pecan would parse it once more while routing, to pass
    it as keyword arguments no handler takes, and let the RecursionError
    of a deeply nested body escape as a 500: it is told the body holds
    no arguments. (An empty object, rather than an error: pecan would
    then look for form fields, which a JSON body never has, at eight
    calls a request.)

    Two reads pecan makes on every request are answered without building
    anything: the Accept header (_Pecan removes it, so it is webob's
    object for no header, which webob would make anew on each read) and,
    for a request without a query string, its parameters (none, which
    webob would still make into a new, environ-tracking MultiDict).
    """

    @property
    def json(self):
        return {}

    @property
    def accept(self):
        if 'HTTP_ACCEPT' in self.environ:
            return _ACCEPT.fget(self)
        return _NO_ACCEPT

    @property
    def GET(self):
        if self.environ.get('QUERY_STRING'):
            return _GET.fget(self)
        # Read-only: nothing can add parameters to the shared object.
        return _NO_PARAMETERS

    def encget(self, key, default=webob.request.NoDefault, encattr=None):
        # How webob reads the path and the mount prefix. guard.Parseable
        # refuses what it cannot decode before routing; a paste pipeline
        # that leaves that filter out still answers 400, not 500.
        environ = self.environ
        value = environ.get(key)
        if encattr == 'url_encoding' and type(value) is str and \
                value.isascii() and 'webob.url_encoding' not in environ:
            # What decoding gives for ASCII (UTF-8, webob's default), as
            # the path of nearly every request is.
            return value
        try:
            return super().encget(key, default, encattr)
        except UnicodeError:
            raise webob.exc.HTTPBadRequest(
                body=errors.fault_body(400, guard.NOT_UTF8).encode(),
                content_type='application/json', charset='utf-8') from None


_ACCEPT = webob.request.BaseRequest.accept
_NO_ACCEPT = webob.acceptparse.AcceptNoHeader()
_GET = webob.request.BaseRequest.GET
_NO_PARAMETERS = webob.multidict.NoVars('no query string')


class _Pecan(pecan.Pecan):
    """Pecan without its rewrite of an empty 200 into 204: every handler
    sets its status itself, and device enable/disable answer 200 with no
    body, as Cyborg documents. `GET /` is answered without pecan's
    dispatch (root.answer_root: the same answer).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Whether find_controller's shorter way applies (see there).
        self._lean = (not self.hooks and isinstance(self.root, root.Root)
                      and not self.guess_content_type_from_ext)

    def _handle_empty_response_body(self, state):
        if state.response.status_int in (204, 304):
            state.response.content_type = None

    def __call__(self, environ, start_response):
        # JSON is the only representation, so there is nothing to
        # negotiate: pecan would answer 406 to `Accept: application/json`
        # (what keystoneauth sends for version discovery) on handlers that
        # set their own content type.
        environ.pop('HTTP_ACCEPT', None)
        if environ.get('PATH_INFO') == '/' and environ.get(
                'REQUEST_METHOD') == 'GET':
            return root.answer_root(environ, start_response, _Request)
        try:
            return super().__call__(environ, start_response)
        finally:
            # pecan keeps its request and response in the environ
            # ('pecan.locals'), and the request keeps the environ; webob
            # keeps a query string's parameters there too, a dict that
            # keeps the environ. Cycles: every request's environ, request,
            # response and context waited for the cyclic garbage
            # collector instead of being freed when the server drops the
            # environ. Nothing reads them once the answer is made (of
            # pecan, only its debug middleware, not used here).
            environ.pop('pecan.locals', None)
            environ.pop('webob._parsed_query_vars', None)

    def find_controller(self, _state):
        # The handler of a CRUD path (a collection or one of its items:
        # root.direct) found as pecan finds it, less pecan's steps that
        # change nothing for this app: no hooks (on_route, before), no
        # extension in the path to guess a type from, no Accept header to
        # negotiate (removed above), no secured controller to check on the
        # way, nothing of the path left for positional arguments, and the
        # query parameters pecan would offer as keyword arguments, which
        # no handler takes (base.handler drops them; the generic index
        # does not accept them, so pecan drops them itself). Every other
        # path, and any controller these steps would matter to, goes
        # through pecan's own.
        req = _state.request
        # As pecan's: before anything can fail (errors read the request).
        local = pecan.core.state
        local.request = req
        local.response = _state.response
        path = req.path_info
        found = None
        if self._lean and len(path) > 1:
            found = root.direct(self.root.v2, path.split('/')[1:])
        if found is None:
            return super().find_controller(_state)
        controller = found[0]
        cfg = controller._pecan
        args = []
        if cfg.get('generic'):
            # A function: pecan passes the controller object as its self.
            args.append(controller.__self__)
            handlers = cfg['generic_handlers']
            controller = handlers.get(req.method, handlers['DEFAULT'])
            if cfg.get('secured'):
                return super().find_controller(_state)
            cfg = controller._pecan
        if cfg.get('secured'):
            return super().find_controller(_state)
        pecan_state = req.pecan
        pecan_state['routing_path'] = path
        pecan_state['extension'] = None
        pecan_state['content_type'] = cfg.get('content_type', 'text/html')
        arguments = inspect.Arguments(args, [], {})
        _state.controller = local.controller = controller
        _state.arguments = local.arguments = arguments
        return controller, args, {}

    def handle_hooks(self, hooks, *args):
        # Pecan runs its hooks three times a request (on_route, before,
        # after); neither the app nor any controller has one.
        if hooks:
            return super().handle_hooks(hooks, *args)
        pecan.core.state.hooks = hooks


def _remember_argspecs():
    """pecan 1.8 builds a new namedtuple class each time it reads a
    controller's argspec (pecan.compat.getargspec), and invoke_controller
    reads one on every request: about a tenth of a lookup's CPU; routing
    reads the one of a `_route` hook (cyborg.api.controllers.root.Root)
    on every request too. A function's argspec never changes, so it is
    read once per function.
    """
    read = pecan.core.getargspec
    if getattr(read, 'remembers', False):
        return
    specs = {}

    def getargspec(method):
        func = getattr(method, '__func__', method)
        spec = specs.get(func)
        if spec is None:
            spec = specs[func] = read(method)
        return spec
    getargspec.remembers = True
    pecan.core.getargspec = getargspec
    pecan.routing.getargspec = getargspec


_remember_argspecs()


def _remember_observed_controllers():
    """pecan 1.8 lists every attribute of each controller it walks
    through (dir()) on every request, and uses the list only the first
    time it meets the controller's class, to find custom path segments.
    Classes it has met are skipped here, before that listing.
    """
    detect = pecan.routing._detect_custom_path_segments
    if getattr(detect, 'remembers', False):
        return
    observed = getattr(pecan.routing, '__observed_controllers__')

    def detect_once(obj):
        if obj.__class__ not in observed:
            detect(obj)
    detect_once.remembers = True
    pecan.routing._detect_custom_path_segments = detect_once


_remember_observed_controllers()


def _pecan_app():
    return _Pecan(
        'cyborg.api.controllers.root.Root',
        request_cls=_Request,
        response_cls=base.Response,
        force_canonical=False,
        guess_content_type_from_ext=False)


def _check_authtoken(conf):
    """Refuse to start half-configured: without it keystonemiddleware can
    not even answer 401 (every request would be a 500).
    """
    group = conf.keystone_authtoken
    if not group.www_authenticate_uri:
        raise RuntimeError(
            '[api] auth_strategy = keystone needs [keystone_authtoken] '
            'www_authenticate_uri and the service user\'s auth options '
            '(auth_type, auth_url, username, ...); or set [api] '
            'auth_strategy = noauth for a deployment without Keystone.')


def keystone_auth(app, conf):
    protected = auth_token.AuthProtocol(app, {'oslo_config_config': conf})
    _check_authtoken(conf)
    return middleware.PublicRoutes(app, protected)


def noauth(app, conf):
    return middleware.NoAuth(app, conf.api.noauth_project_id)


def _auth(app, conf):
    if conf.api.auth_strategy == 'keystone':
        return keystone_auth(app, conf)
    return noauth(app, conf)


def _cors(app, conf):
    opts.set_library_defaults()
    return middleware.CORS(app, conf)


def _http_proxy_to_wsgi(app, conf):
    conf.register_opts(http_proxy_to_wsgi.OPTS, group='oslo_middleware')
    if conf.oslo_middleware.enable_proxy_headers_parsing:
        # Otherwise it changes nothing (and costs a webob round trip).
        return http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    return app


def _metrics(app, conf):
    return metrics.Middleware(app) if conf.api.metrics_enabled else app


# The middleware steps, outermost first, each (app, conf) -> app. The
# filters of etc/cyborg/api-paste.ini are these same steps, by name
# (cyborg.api.pipeline), so the file and this list build one pipeline.
STEPS = (
    ('metrics', _metrics),
    ('http_proxy_to_wsgi', _http_proxy_to_wsgi),
    ('cors', _cors),
    ('request_id', lambda app, conf: middleware.RequestId(app)),
    ('errors', lambda app, conf: errors.ErrorWrapper(app)),
    ('body_size_limit', lambda app, conf: guard.BodySizeLimit(
        app, conf.api.max_request_body_size)),
    ('parseable', lambda app, conf: guard.Parseable(app)),
    ('microversion', lambda app, conf: middleware.Microversion(app)),
    ('auth', _auth),
)


def compose(conf=CONF):
    """STEPS around the pecan application, one layer each."""
    app = _pecan_app()
    for _name, step in reversed(STEPS):
        app = step(app, conf)
    return app


def setup_app(conf=CONF):
    """The pipeline built in code: what runs unless [api] api_paste_config
    names a paste.deploy file (cyborg.api.pipeline.load). Its layers run
    as one (cyborg.api.stack) where they are the default ones.
    """
    return stack.fuse(compose(conf))
