# SPDX-License-Identifier: Apache-2.0
"""A fake Keystone v3 on loopback: just what keystonemiddleware asks.

keystonemiddleware's auth_token, configured with a password auth plugin,
  1. gets its own token: POST /v3/auth/tokens (answered with a catalog
     naming this server as the identity endpoint);
  2. discovers the identity API at the catalog's URL: GET /v3;
  3. validates each caller's token: GET /v3/auth/tokens with its own
     token in X-Auth-Token and the caller's in X-Subject-Token (200 with
     the token's body, 404 for an unknown token, 401 when its own is not
     accepted).
Tokens are fixed strings mapping to a user, a project and roles (with
Keystone's implied roles: admin > member > reader). Every request is
recorded, so tests can check what was asked.
"""

import json

from cyborg.common import wsgi_server
from tests.functional import seed

DOMAIN = {'id': 'default', 'name': 'Default'}

# The service user keystonemiddleware authenticates as.
SERVICE_USER = 'cyborg'
SERVICE_PASSWORD = 'keystone-secret-pa55word'
SERVICE_PROJECT = 'service'

_IMPLIED = {'admin': ['admin', 'member', 'reader'],
            'member': ['member', 'reader'],
            'reader': ['reader'],
            'service': ['service']}


class Identity:
    """A token holder: (user, project, roles), as Keystone would scope it."""

    def __init__(self, token, user, project, *roles):
        self.token = token
        self.user = user
        self.project = project
        self.roles = sorted({implied for role in roles
                             for implied in _IMPLIED[role]})


ADMIN = Identity('tok-admin-6f1c', 'alice-admin', 'admin-project', 'admin')
# Project A owns the ARQs the gabbi inventory seeds.
PROJECT_A = seed.BOUND_PROJECT
PROJECT_B = 'project-b'
MEMBER_A = Identity('tok-member-a-9d2e', 'ann', PROJECT_A, 'member')
READER_A = Identity('tok-reader-a-41b7', 'arlo', PROJECT_A, 'reader')
MEMBER_B = Identity('tok-member-b-7c3a', 'bob', PROJECT_B, 'member')
# Nova's service user: its token, alone or as X-Service-Token.
SERVICE = Identity('tok-nova-service-2b8f', 'nova', SERVICE_PROJECT,
                   'service')
IDENTITIES = (ADMIN, MEMBER_A, READER_A, MEMBER_B, SERVICE)


def _token_body(identity, base_url, catalog=True):
    token = {
        'methods': ['password'],
        'user': {'id': identity.user + '-id', 'name': identity.user,
                 'domain': DOMAIN, 'password_expires_at': None},
        'project': {'id': identity.project, 'name': identity.project,
                    'domain': DOMAIN},
        'is_domain': False,
        'roles': [{'id': role + '-id', 'name': role}
                  for role in identity.roles],
        'audit_ids': ['audit-' + identity.user],
        'issued_at': '2026-01-01T00:00:00.000000Z',
        'expires_at': '2099-01-01T00:00:00.000000Z',
    }
    if catalog:
        token['catalog'] = [{
            'type': 'identity', 'name': 'keystone', 'id': 'identity-id',
            'endpoints': [{'id': 'ep-' + iface, 'interface': iface,
                           'region': 'RegionOne', 'region_id': 'RegionOne',
                           'url': base_url + '/v3'}
                          for iface in ('public', 'internal', 'admin')]}]
    return {'token': token}


class FakeKeystone:
    """The WSGI app; `start()` serves it on a loopback port."""

    def __init__(self):
        self.server = None
        self.requests = []
        self.tokens = {i.token: i for i in IDENTITIES}
        self.service_token = 'tok-cyborg-own-5e0d'
        self.tokens[self.service_token] = Identity(
            self.service_token, SERVICE_USER, SERVICE_PROJECT, 'service')

    @property
    def url(self):
        return self.server.url

    def start(self):
        self.server = wsgi_server.ThreadedServer('fake-keystone', self)
        self.server.start()
        return self

    def stop(self):
        self.server.stop()

    def validations(self):
        """The caller tokens that were validated, in order."""
        return [r['subject'] for r in self.requests
                if r['method'] == 'GET' and r['path'] == '/v3/auth/tokens']

    def __call__(self, environ, start_response):
        method = environ['REQUEST_METHOD']
        path = environ.get('PATH_INFO', '/').rstrip('/') or '/'
        self.requests.append({
            'method': method, 'path': path,
            'subject': environ.get('HTTP_X_SUBJECT_TOKEN'),
            'auth': environ.get('HTTP_X_AUTH_TOKEN')})
        base = self.url
        if method == 'GET' and path == '/':
            return self._json(start_response, '300 Multiple Choices', {
                'versions': {'values': [self._version(base)]}})
        if method == 'GET' and path == '/v3':
            return self._json(start_response, '200 OK',
                              {'version': self._version(base)})
        if path == '/v3/auth/tokens' and method == 'POST':
            return self._issue(environ, start_response, base)
        if path == '/v3/auth/tokens' and method == 'GET':
            return self._validate(environ, start_response, base)
        return self._error(start_response, '404 Not Found', 'not found')

    @staticmethod
    def _version(base):
        return {'id': 'v3.14', 'status': 'stable',
                'updated': '2020-04-07T00:00:00Z',
                'links': [{'rel': 'self', 'href': base + '/v3/'}],
                'media-types': [{
                    'base': 'application/json',
                    'type': 'application/vnd.openstack.identity-v3+json'}]}

    def _issue(self, environ, start_response, base):
        length = int(environ.get('CONTENT_LENGTH') or 0)
        auth = json.loads(environ['wsgi.input'].read(length))['auth']
        user = auth['identity']['password']['user']
        if (user.get('name'), user.get('password')) != (SERVICE_USER,
                                                        SERVICE_PASSWORD):
            return self._error(start_response, '401 Unauthorized',
                               'The request you have made requires '
                               'authentication.')
        return self._json(start_response, '201 Created', _token_body(
            self.tokens[self.service_token], base),
            [('X-Subject-Token', self.service_token)])

    def _validate(self, environ, start_response, base):
        if environ.get('HTTP_X_AUTH_TOKEN') != self.service_token:
            return self._error(start_response, '401 Unauthorized',
                               'The request you have made requires '
                               'authentication.')
        subject = environ.get('HTTP_X_SUBJECT_TOKEN')
        identity = self.tokens.get(subject)
        if identity is None:
            return self._error(start_response, '404 Not Found',
                               'Could not find token: %s' % subject)
        catalog = 'nocatalog' not in environ.get('QUERY_STRING', '')
        return self._json(start_response, '200 OK',
                          _token_body(identity, base, catalog),
                          [('X-Subject-Token', subject)])

    @staticmethod
    def _json(start_response, status, body, headers=()):
        data = json.dumps(body).encode()
        start_response(status, [('Content-Type', 'application/json'),
                                ('Content-Length', str(len(data)))]
                       + list(headers))
        return [data]

    def _error(self, start_response, status, message):
        code = int(status[:3])
        return self._json(start_response, status, {'error': {
            'code': code, 'title': status[4:], 'message': message}})


def authtoken_config(keystone_url):
    """The [keystone_authtoken] section pointing at the fake."""
    return '\n'.join([
        '[keystone_authtoken]',
        'www_authenticate_uri = %s/v3' % keystone_url,
        'auth_type = password',
        'auth_url = %s/v3' % keystone_url,
        'username = %s' % SERVICE_USER,
        'password = %s' % SERVICE_PASSWORD,
        'user_domain_id = default',
        'project_name = %s' % SERVICE_PROJECT,
        'project_domain_id = default',
        'service_token_roles_required = true',
        '',
    ])
