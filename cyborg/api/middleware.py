"""WSGI middleware of our own: microversion negotiation and auth selection."""

import webob

from cyborg.api import errors
from cyborg.api import microversion
from cyborg.common import exception

PUBLIC_PATHS = ('/', '/v2', '/v2/')


class Microversion:
    """Negotiate the microversion for every /v2 request and echo it back."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        request = webob.Request(environ)
        if request.path_info in ('', '/'):
            return self.app(environ, start_response)
        try:
            version = microversion.parse(request.headers)
        except exception.NotAcceptable as e:
            response = errors.response_for(e)
            version = microversion.MIN_VERSION
        else:
            environ[microversion.ENVIRON_KEY] = version
            response = request.get_response(self.app)
        response.headers.extend(microversion.response_headers(version))
        return response(environ, start_response)


class NoAuth:
    """Trust identity headers; a request without any acts as an admin with
    the service role in [api] noauth_project_id (the embedded default)."""

    def __init__(self, app, project_id):
        self.app = app
        self.project_id = project_id

    def __call__(self, environ, start_response):
        identity = ('HTTP_X_ROLES', 'HTTP_X_PROJECT_ID', 'HTTP_X_USER_ID')
        if not any(k in environ for k in identity):
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
