# SPDX-License-Identifier: Apache-2.0
"""WSGI middleware of our own: microversion negotiation and auth selection,
and cheaper wrappers of oslo.middleware's request id and CORS.

Each layer here changes only the headers of a successful answer, so it
adds them as they pass through start_response instead of building a webob
request and response around the call.
"""

from oslo_middleware import cors
from oslo_middleware import request_id
import webob

from cyborg.api import errors
from cyborg.api import microversion
from cyborg.common import exception
from cyborg.common import identifiers

PUBLIC_PATHS = ('/', '/v2', '/v2/')
# The environ key of the header whose global request id RequestId checks.
INBOUND = 'HTTP_' + request_id.INBOUND_HEADER.upper().replace('-', '_')


class Microversion:
    """Negotiate the microversion for every /v2 request and echo it back."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        if environ.get('PATH_INFO', '') in ('', '/'):
            return self.app(environ, start_response)
        try:
            version = microversion.from_environ(environ)
        except exception.NotAcceptable as e:
            return refused_version(e)(environ, start_response)
        environ[microversion.ENVIRON_KEY] = version
        extra = version_headers(version)

        def with_version(status, headers, exc_info=None):
            return start_response(status, list(headers) + extra, exc_info)
        return self.app(environ, with_version)


def refused_version(exc):
    """The 406 answer to a microversion no version of the API serves."""
    response = errors.response_for(exc)
    response.headers.extend(
        microversion.response_headers(microversion.MIN_VERSION))
    return response


# The response headers of each version, made once (only ever
# concatenated with an answer's headers, never changed).
_VERSION_HEADERS = {}


def version_headers(version):
    """microversion.response_headers(version), made once per version."""
    extra = _VERSION_HEADERS.get(version)
    if extra is None:
        extra = _VERSION_HEADERS[version] = microversion.response_headers(
            version)
    return extra


class NoAuth:
    """Trust identity headers; a request without any acts as an admin with
    the service role in [api] noauth_project_id (the embedded default).
    """

    def __init__(self, app, project_id):
        self.app = app
        self.project_id = project_id

    def __call__(self, environ, start_response):
        # Spelled out rather than any() over a generator: four Python
        # calls fewer on every request.
        if ('HTTP_X_ROLES' not in environ
                and 'HTTP_X_PROJECT_ID' not in environ
                and 'HTTP_X_USER_ID' not in environ):
            environ['HTTP_X_ROLES'] = 'admin,service'
            environ['HTTP_X_PROJECT_ID'] = self.project_id
            environ['HTTP_X_USER_ID'] = 'noauth-admin'
        return self.app(environ, start_response)


class PublicRoutes:
    """Skip token validation for the version documents."""

    def __init__(self, app, authenticated):
        self.app = app
        self.authenticated = authenticated

    def __call__(self, environ, start_response):
        if environ.get('PATH_INFO', '/') in PUBLIC_PATHS:
            return self.app(environ, start_response)
        return self.authenticated(environ, start_response)


def generate_request_id():
    """'req-' and a random (version 4) uuid, as oslo.context's
    generate_request_id makes.
    """
    return 'req-' + identifiers.new_uuid()


class RequestId(request_id.RequestId):
    """oslo.middleware's request id (the same environ keys, inbound global
    id check and response header), without its webob round trip.
    """

    def __call__(self, environ, start_response):
        req_id = self.begin(environ)
        names = [request_id.HTTP_RESP_HEADER_REQUEST_ID] + list(
            self.compat_headers)

        def with_id(status, headers, exc_info=None):
            present = {name.lower() for name, _ in headers}
            return start_response(status, list(headers) + [
                (name, req_id) for name in names
                if name.lower() not in present], exc_info)
        return self.application(environ, with_id)

    def begin(self, environ):
        """Give the request its id (and the global one it was sent)."""
        if INBOUND in environ:
            self.set_global_req_id(webob.Request(environ))
        req_id = generate_request_id()
        environ[request_id.ENV_REQUEST_ID] = req_id
        return req_id


class CORS:
    """oslo.middleware's CORS for the requests it can change: those with an
    Origin header, and OPTIONS (answered 200 even without one). The others
    skip its two webob round trips.
    """

    def __init__(self, app, conf):
        self.app = app
        self.cors = cors.CORS(app, conf)

    def __call__(self, environ, start_response):
        if 'HTTP_ORIGIN' in environ or environ.get(
                'REQUEST_METHOD') == 'OPTIONS':
            return self.cors(environ, start_response)
        return self.app(environ, start_response)
