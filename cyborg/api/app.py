"""The WSGI application: pecan controllers inside the middleware pipeline

metrics → http_proxy_to_wsgi → cors → request_id → error body →
microversion → auth. The metrics middleware serves GET /metrics (no auth)
when [api] metrics_enabled, and counts and times everything else.
"""

from keystonemiddleware import auth_token
from oslo_middleware import cors
from oslo_middleware import http_proxy_to_wsgi
from oslo_middleware import request_id
import pecan

from cyborg.api import errors
from cyborg.api import hooks
from cyborg.api import metrics
from cyborg.api import middleware
from cyborg.conf import CONF


class _Pecan(pecan.Pecan):
    """Pecan without its rewrite of an empty 200 into 204: every handler
    sets its status itself, and device enable/disable answer 200 with no
    body, as Cyborg documents."""

    def _handle_empty_response_body(self, state):
        if state.response.status_int in (204, 304):
            state.response.content_type = None

    def __call__(self, environ, start_response):
        # JSON is the only representation, so there is nothing to
        # negotiate: pecan would answer 406 to `Accept: application/json`
        # (what keystoneauth sends for version discovery) on handlers that
        # set their own content type.
        environ.pop('HTTP_ACCEPT', None)
        return super().__call__(environ, start_response)


def _pecan_app():
    return _Pecan(
        'cyborg.api.controllers.root.RootController',
        hooks=[hooks.ContextHook()],
        force_canonical=False,
        guess_content_type_from_ext=False)


def _check_authtoken(conf):
    """Refuse to start half-configured: without it keystonemiddleware can
    not even answer 401 (every request would be a 500)."""
    group = conf.keystone_authtoken
    if not group.www_authenticate_uri:
        raise RuntimeError(
            '[api] auth_strategy = keystone needs [keystone_authtoken] '
            'www_authenticate_uri and the service user\'s auth options '
            '(auth_type, auth_url, username, ...); or set [api] '
            'auth_strategy = noauth for a deployment without Keystone.')


def setup_app(conf=CONF):
    app = _pecan_app()
    if conf.api.auth_strategy == 'keystone':
        protected = auth_token.AuthProtocol(app, {'oslo_config_config': conf})
        _check_authtoken(conf)
        app = middleware.PublicRoutes(app, protected)
    else:
        app = middleware.NoAuth(app, conf.api.noauth_project_id)
    app = middleware.Microversion(app)
    app = errors.ErrorWrapper(app)
    app = request_id.RequestId(app)
    cors.set_defaults(
        allow_headers=['X-Auth-Token', 'X-Openstack-Request-Id',
                       'OpenStack-API-Version', 'Content-Type'],
        expose_headers=['X-Openstack-Request-Id', 'OpenStack-API-Version',
                        'OpenStack-API-Minimum-Version',
                        'OpenStack-API-Maximum-Version'],
        allow_methods=['GET', 'PUT', 'POST', 'DELETE', 'PATCH'])
    app = cors.CORS(app, conf)
    app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    if conf.api.metrics_enabled:
        app = metrics.Middleware(app)
    return app
