# SPDX-License-Identifier: Apache-2.0
"""The default middleware pipeline run as one layer.

cyborg.api.app.STEPS (and etc/cyborg/api-paste.ini, which lists the same
steps) wrap the application in up to nine layers, each a WSGI call, and
several of them wrap start_response in a closure of their own that copies
the header list: a few dozen Python calls and objects on every request
before the application is reached, and again on its way out.

fuse() takes a pipeline already built and, when its layers are exactly
those of the default list (metrics, cors, request_id, errors,
body_size_limit, parseable, microversion, then any auth; the proxy
headers step, off by default, adds no layer), returns a Stack that does
their work in one call: the same checks, through the same functions as
the layers, in the same order, and one start_response that adds the
request id and the microversion headers at once. With proxy headers
parsed, the layers below oslo's proxy layer are the Stack. A pipeline
arranged any other way (a filter dropped, moved or added in the paste
file) is returned as it was built.

What the Stack does not handle itself it hands, before it has changed
anything, to the pipeline it was made from: GET /metrics, CORS requests
(an Origin header, or OPTIONS). Everything else, errors included, takes
the paths of the layers' own code (cyborg.api.errors, .guard,
.middleware, .metrics).
"""

import time

from oslo_middleware import http_proxy_to_wsgi
from oslo_middleware import request_id
import webob

from cyborg.api import errors
from cyborg.api import guard
from cyborg.api import metrics
from cyborg.api import microversion
from cyborg.api import middleware
from cyborg.common import exception

_ID_HEADER = request_id.HTTP_RESP_HEADER_REQUEST_ID
# The layers of the default pipeline below the metrics one, outermost
# first, each with the attribute naming the app it wraps.
_LAYERS = ((middleware.CORS, 'app'), (middleware.RequestId, 'application'),
           (errors.ErrorWrapper, 'app'), (guard.BodySizeLimit, 'app'),
           (guard.Parseable, 'app'), (middleware.Microversion, 'app'))


def fuse(app):
    """`app` as one Stack when it is the default pipeline, else as is.

    With proxy headers parsed (oslo's HTTPProxyToWSGI between the metrics
    layer and CORS), the layers below the proxy one run as a Stack.
    """
    top = app
    counted = None
    if type(app) is metrics.Middleware:
        counted = app.metrics
        app = app.app
    if type(app) is http_proxy_to_wsgi.HTTPProxyToWSGI:
        below = _stack(app.application, None, app.application)
        if below is not None:
            app.application = below
        return top
    return _stack(app, counted, top) or top


def _stack(app, counted, top):
    """A Stack for the layers from CORS down in `app`, with the metrics
    layer's `counted` above them (None: none), or None when `app` is not
    those layers. `top` is the pipeline the Stack replaces.
    """
    layers = []
    for cls, inner in _LAYERS:
        # The exact classes: a subclass may behave otherwise.
        if type(app) is not cls:
            return None
        layers.append(app)
        app = getattr(app, inner)
    _cors, ids, _errors, size, _parseable, _microversion = layers
    if ids.compat_headers:
        return None
    return Stack(top, counted, ids, size, app)


class Stack:
    """metrics → cors → request_id → errors → body_size_limit →
    parseable → microversion, in one call, around `app` (the auth step
    and what it wraps). `pipeline` is those layers, built as such.
    """

    def __init__(self, pipeline, counted, ids, size, app):
        self.pipeline = pipeline
        self.metrics = counted
        self.ids = ids
        self.size_refusal = size.refusal
        self.app = app

    def __call__(self, environ, start_response):
        path = environ.get('PATH_INFO') or '/'
        method = environ.get('REQUEST_METHOD', 'GET')
        if path == metrics.PATH or method == 'OPTIONS' or (
                'HTTP_ORIGIN' in environ):
            # Served by the metrics layer, or changed by oslo's CORS.
            return self.pipeline(environ, start_response)
        counted = self.metrics
        if counted is not None:
            started = time.perf_counter()
        # What the metrics layer would see: the last status passed out.
        recorded = None
        try:
            # The request id layer's start.
            req_id = self.ids.begin(environ)
            # The errors layer: the answer from below, collected.
            answered = None
            written = []
            # The microversion layer's headers, once it has negotiated.
            extra = None

            def collect(status, headers, exc_info=None):
                nonlocal answered
                if extra is not None:
                    headers = list(headers) + extra
                answered = (status, headers)
                return written.append

            passed = False
            try:
                refused = self.size_refusal(environ) or (
                    guard.Parseable.refusal(environ))
                if refused is not None:
                    body = guard.refuse(refused, environ, collect)
                elif path == '/':
                    body = self.app(environ, collect)
                else:
                    try:
                        version = microversion.from_environ(environ)
                    except exception.NotAcceptable as e:
                        body = middleware.refused_version(e)(
                            environ, collect)
                    else:
                        environ[microversion.ENVIRON_KEY] = version
                        extra = middleware.version_headers(version)
                        body = self.app(environ, collect)
                if answered is None or written:
                    body = errors.drained(body, written)
                status, headers = answered
                if int(status[:3]) < 400:
                    if extra is None:
                        headers = list(headers)
                    _add_request_id(headers, req_id)
                    recorded = status
                    start_response(status, headers, None)
                    passed = True
                else:
                    response = webob.Response(
                        status=status, headerlist=headers, app_iter=body,
                        request=webob.Request(environ))
            except Exception as e:
                response = errors.failure(environ, e)
            if not passed:
                def with_id(status, headers, exc_info=None):
                    nonlocal recorded
                    headers = list(headers)
                    _add_request_id(headers, req_id)
                    recorded = status
                    return start_response(status, headers, exc_info)
                body = errors.as_fault(response)(environ, with_id)
        finally:
            if counted is not None:
                self._count(counted, method, path, recorded, started)
        return body

    @staticmethod
    def _count(counted, method, path, status, started):
        # As the metrics layer counts.
        counted.observe(method if method in metrics.METHODS else 'OTHER',
                        metrics.route(path),
                        status[:3] if status is not None else '500',
                        time.perf_counter() - started)


def _add_request_id(headers, req_id):
    """The request id layer's header appended to `headers` (a list of
    the Stack's own), unless the answer has one.
    """
    for name, _value in headers:
        if name.lower() == _ID_HEADER:
            return
    headers.append((_ID_HEADER, req_id))
