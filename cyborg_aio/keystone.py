# SPDX-License-Identifier: Apache-2.0
"""A real Keystone on loopback: the `keystone` package from PyPI.

Used by `cyborg-aio --keystone` and, through cyborg_harness.keystone, by
the tests.

`Keystone(workdir).start()`:
  1. writes a keystone.conf (SQLite in workdir, fernet tokens, fernet and
     credential keys in workdir, bcrypt at its minimum cost so that each
     password authentication is cheap);
  2. runs `keystone-manage db_sync`, `fernet_setup`, `credential_setup`
     and `bootstrap` (the admin user, the admin project, the roles admin,
     manager, member, reader and service with Keystone's implications);
  3. serves Keystone's own WSGI application (keystone.wsgi.api) with
     cheroot in a subprocess (`python -m cyborg_aio.keystone serve`),
     on a loopback port it picks, and waits for its ready line;
  4. through Keystone's API, as the admin: the identity endpoint, the
     projects `service`, `project-a` and `project-b`, and one user per
     persona (PERSONAS).
`set_endpoint()` adds or moves a service's endpoints in the catalog
(`accelerator`, `placement`, `compute`) once the stack under test has its
ports. `start_seconds` is how long all of that took.

Every persona has a password made up for this Keystone (kept in
workdir/passwords.json, readable by its owner only, so that a Keystone
started again on the same workdir keeps its users); tokens are
project-scoped (`token()`), as the clients get them with a clouds.yaml
(`clouds_yaml()`).
"""

import argparse
import collections
import grp
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import threading
import time

import requests
import yaml

REGION = 'RegionOne'
DOMAIN = 'default'
ADMIN_PROJECT = 'admin'
SERVICE_PROJECT = 'service'
PROJECT_A = 'project-a'
PROJECT_B = 'project-b'
START_TIMEOUT = 120.0
INTERFACES = ('public', 'internal', 'admin')

Persona = collections.namedtuple('Persona', 'user project roles')

# Who the tests and the clients authenticate as: (user, project, role).
# Roles imply others as Keystone's bootstrap sets them up (admin > manager
# > member > reader); `service` implies nothing.
PERSONAS = {
    'admin': Persona('admin', ADMIN_PROJECT, ('admin',)),
    'member_a': Persona('member-a', PROJECT_A, ('member',)),
    'reader_a': Persona('reader-a', PROJECT_A, ('reader',)),
    'member_b': Persona('member-b', PROJECT_B, ('member',)),
    'reader_b': Persona('reader-b', PROJECT_B, ('reader',)),
    # Nova's service user, and ours (keystonemiddleware, the conductor).
    'nova': Persona('nova', SERVICE_PROJECT, ('service',)),
    'cyborg': Persona('cyborg', SERVICE_PROJECT, ('service',)),
    # A service user Keystone knows without the service role: its token as
    # X-Service-Token must be refused.
    'not_a_service': Persona('not-a-service', SERVICE_PROJECT, ('member',)),
    # An operator who is also allowed what only services are (binding
    # ARQs by hand with `openstack accelerator arq bind`).
    'operator': Persona('operator', ADMIN_PROJECT, ('admin', 'service')),
}

_CONF = """\
[DEFAULT]
debug = false
use_stderr = true

[database]
connection = sqlite:///{workdir}/keystone.sqlite

[token]
provider = fernet
expiration = 7200

[fernet_tokens]
key_repository = {workdir}/fernet-keys

[fernet_receipts]
key_repository = {workdir}/fernet-keys

[credential]
key_repository = {workdir}/credential-keys

[identity]
password_hash_algorithm = bcrypt
password_hash_rounds = 4

[cache]
enabled = true
backend = dogpile.cache.memory
"""


class KeystoneError(Exception):
    pass


def _manage_exe():
    here = os.path.join(os.path.dirname(sys.executable), 'keystone-manage')
    return here if os.path.exists(here) else shutil.which('keystone-manage')


def available():
    """Whether the keystone package is installed here."""
    try:
        import keystone  # noqa: F401
    except ImportError:
        return False
    return _manage_exe() is not None


class Keystone:
    """One Keystone, its database, keys and log under `workdir`."""

    def __init__(self, workdir, host='127.0.0.1', port=0):
        self.workdir = os.path.abspath(str(workdir))
        self.host = host
        self.port = port
        self.url = None
        self.proc = None
        self.start_seconds = None
        self.passwords = {}
        self.project_ids = {}
        self.user_ids = {}
        self.role_ids = {}
        self._admin_token = None
        self._log = None

    # -- starting and stopping -----------------------------------------------

    @property
    def auth_url(self):
        return self.url + '/v3'

    @property
    def config_file(self):
        return os.path.join(self.workdir, 'keystone.conf')

    @property
    def log_path(self):
        return os.path.join(self.workdir, 'keystone.log')

    def logs(self, tail=4000):
        try:
            with open(self.log_path, errors='replace') as f:
                return f.read()[-tail:]
        except OSError:
            return ''

    def start(self):
        began = time.monotonic()
        os.makedirs(self.workdir, exist_ok=True)
        with open(self.config_file, 'w') as f:
            f.write(_CONF.format(workdir=self.workdir))
        self._log = open(self.log_path, 'ab')
        self._load_passwords()
        admin_password = self.passwords['admin']
        owner = ['--keystone-user', pwd.getpwuid(os.getuid()).pw_name,
                 '--keystone-group', grp.getgrgid(os.getgid()).gr_name]
        # The keys and the schema do not depend on one another; the server
        # may load while bootstrap fills the database.
        self._manage(['db_sync'], ['fernet_setup'] + owner,
                     ['credential_setup'] + owner)
        bootstrap = self._spawn_manage([
            'bootstrap', '--bootstrap-username', 'admin',
            # One argument: a password may begin with '-' (token_urlsafe's
            # alphabet has it), which argparse takes for an option.
            '--bootstrap-password=' + admin_password,
            '--bootstrap-project-name', ADMIN_PROJECT,
            '--bootstrap-role-name', 'admin',
            '--bootstrap-region-id', REGION])
        try:
            self._serve()
        finally:
            self._wait_manage([bootstrap])
        try:
            self._populate()
        except Exception:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    @property
    def passwords_path(self):
        return os.path.join(self.workdir, 'passwords.json')

    def _load_passwords(self):
        """The personas' passwords of an earlier start, or new ones."""
        try:
            with open(self.passwords_path) as f:
                self.passwords = json.load(f)
        except (OSError, ValueError):
            self.passwords = {}
        for persona in PERSONAS:
            self.passwords.setdefault(persona, secrets.token_urlsafe(16))
        fd = os.open(self.passwords_path, os.O_WRONLY | os.O_CREAT
                     | os.O_TRUNC, 0o600)
        with os.fdopen(fd, 'w') as f:
            json.dump(self.passwords, f)

    def _spawn_manage(self, args):
        return args, subprocess.Popen(
            [_manage_exe(), '--config-file', self.config_file] + args,
            stdout=self._log, stderr=self._log)

    def _wait_manage(self, spawned):
        failed = []
        for args, proc in spawned:
            try:
                code = proc.wait(START_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if code:
                failed.append('keystone-manage %s exited %d'
                              % (args[0], code))
        if failed:
            self.stop()
            raise KeystoneError('\n'.join(failed) + ':\n' + self.logs())

    def _manage(self, *commands):
        """Run keystone-manage `commands` side by side."""
        self._wait_manage([self._spawn_manage(args) for args in commands])

    def _serve(self):
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'cyborg_aio.keystone', 'serve',
             '--config-file', self.config_file, '--host', self.host,
             '--port', str(self.port)],
            stdout=subprocess.PIPE, stderr=self._log, text=True)
        lines = []
        reader = threading.Thread(
            target=lambda: lines.append(self.proc.stdout.readline()),
            daemon=True)
        reader.start()
        reader.join(START_TIMEOUT)
        if not lines or not lines[0].startswith('ready '):
            self.stop()
            raise KeystoneError('keystone did not start:\n' + self.logs())
        self.url = lines[0].split()[1]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- the admin's calls ----------------------------------------------------

    def _admin(self, method, path, body=None, ok=(200, 201, 204)):
        if self._admin_token is None:
            self._admin_token = self.token('admin')
        response = requests.request(
            method, self.auth_url + path, json=body, timeout=30,
            headers={'X-Auth-Token': self._admin_token})
        if response.status_code not in ok:
            raise KeystoneError('%s %s: %d %s' % (
                method, path, response.status_code, response.text[:500]))
        return response.json() if response.content else None

    def _populate(self):
        self.set_endpoint('identity', self.auth_url, name='keystone')
        for role in self._admin('GET', '/roles')['roles']:
            self.role_ids[role['name']] = role['id']
        for project in self._admin('GET', '/projects')['projects']:
            self.project_ids[project['name']] = project['id']
        for name in (SERVICE_PROJECT, PROJECT_A, PROJECT_B):
            if name not in self.project_ids:
                self.project_ids[name] = self._admin('POST', '/projects', {
                    'project': {'name': name, 'domain_id': DOMAIN}}
                )['project']['id']
        for user in self._admin('GET', '/users')['users']:
            self.user_ids[user['name']] = user['id']
        for key, persona in PERSONAS.items():
            if key == 'admin':
                continue
            password = self.passwords[key]
            user_id = self.user_ids.get(persona.user)
            if user_id is None:
                user_id = self.user_ids[persona.user] = self._admin(
                    'POST', '/users', {'user': {
                        'name': persona.user, 'domain_id': DOMAIN,
                        'password': password,
                        'default_project_id': self.project_ids[
                            persona.project]}})['user']['id']
            else:  # an earlier start's user: the password we keep
                self._admin('PATCH', '/users/' + user_id,
                            {'user': {'password': password}})
            for role in persona.roles:
                self._admin('PUT', '/projects/%s/users/%s/roles/%s' % (
                    self.project_ids[persona.project], user_id,
                    self.role_ids[role]))

    def set_endpoint(self, service_type, url, name=None):
        """The catalog's public, internal and admin endpoints of
        `service_type` (created, or moved to `url`).
        """
        services = self._admin('GET', '/services?type=' + service_type)[
            'services']
        if services:
            service_id = services[0]['id']
        else:
            service_id = self._admin('POST', '/services', {'service': {
                'type': service_type, 'name': name or service_type,
                'enabled': True}})['service']['id']
        existing = {e['interface']: e for e in self._admin(
            'GET', '/endpoints?service_id=' + service_id)['endpoints']}
        for interface in INTERFACES:
            if interface in existing:
                if existing[interface]['url'] != url:
                    self._admin('PATCH', '/endpoints/%s'
                                % existing[interface]['id'],
                                {'endpoint': {'url': url}})
            else:
                self._admin('POST', '/endpoints', {'endpoint': {
                    'service_id': service_id, 'interface': interface,
                    'url': url, 'region_id': REGION, 'enabled': True}})

    # -- credentials ----------------------------------------------------------

    def auth(self, persona):
        """keystoneauth password options of a persona, project-scoped."""
        p = PERSONAS[persona]
        return {'auth_url': self.auth_url, 'username': p.user,
                'password': self.passwords[persona],
                'user_domain_id': DOMAIN, 'project_name': p.project,
                'project_domain_id': DOMAIN}

    def token(self, persona):
        """A new project-scoped token of `persona`."""
        body = {'auth': {
            'identity': {'methods': ['password'], 'password': {'user': {
                'name': PERSONAS[persona].user,
                'domain': {'id': DOMAIN},
                'password': self.passwords[persona]}}},
            'scope': {'project': {'name': PERSONAS[persona].project,
                                  'domain': {'id': DOMAIN}}}}}
        response = requests.post(self.auth_url + '/auth/tokens', json=body,
                                 timeout=30)
        if response.status_code != 201:
            raise KeystoneError('token of %s: %d %s' % (
                persona, response.status_code, response.text[:500]))
        return response.headers['X-Subject-Token']

    def system_token(self):
        """A system-scoped token of the admin (no project)."""
        body = {'auth': {
            'identity': {'methods': ['password'], 'password': {'user': {
                'name': 'admin', 'domain': {'id': DOMAIN},
                'password': self.passwords['admin']}}},
            'scope': {'system': {'all': True}}}}
        response = requests.post(self.auth_url + '/auth/tokens', json=body,
                                 timeout=30)
        if response.status_code != 201:
            raise KeystoneError('system token: %d %s' % (
                response.status_code, response.text[:500]))
        return response.headers['X-Subject-Token']

    def project_id(self, persona):
        return self.project_ids[PERSONAS[persona].project]

    def clouds_yaml(self, path, personas=None, prefix='', aliases=None):
        """A clouds.yaml with one password-auth cloud per persona
        (`<prefix><persona>`), and `aliases` {cloud: persona}; readable by
        its owner only (it holds passwords); returns its path.
        """
        names = {prefix + p: p for p in personas or PERSONAS}
        names.update(aliases or {})
        clouds = {}
        for name, persona in names.items():
            clouds[name] = {
                'auth_type': 'password', 'auth': self.auth(persona),
                'region_name': REGION, 'interface': 'public',
                'identity_api_version': 3}
        fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                     0o600)
        with os.fdopen(fd, 'w') as f:
            yaml.safe_dump({'clouds': clouds}, f, default_flow_style=False)
        return path

    def authtoken_config(self, persona='cyborg'):
        """The [keystone_authtoken] section keystonemiddleware needs, with
        `persona` as the service user validating tokens.
        """
        return _section('keystone_authtoken', dict(
            self.auth(persona), www_authenticate_uri=self.auth_url,
            auth_type='password', service_token_roles_required='true',
            service_type='accelerator'))

    def service_user_config(self, group, persona='cyborg'):
        """A keystoneauth conf section ([placement], [nova]) for calling
        another service as `persona`, finding it through the catalog.
        """
        return _section(group, dict(self.auth(persona), auth_type='password',
                                    region_name=REGION))

    def cyborg_config(self, persona='cyborg'):
        """What a cyborg.conf needs to run behind this Keystone: the API
        validating tokens as `persona`, and calling Placement and Nova as
        `persona` (the embedded stack's Placement and Nova events API read
        the same [keystone_authtoken]).
        """
        return ('[api]\nauth_strategy = keystone\n'
                + self.authtoken_config(persona)
                + self.service_user_config('placement', persona)
                + self.service_user_config('nova', persona))


def _section(group, options):
    return '[%s]\n%s\n' % (group, ''.join(
        '%s = %s\n' % (k, v) for k, v in options.items()))


# -- the server subprocess ----------------------------------------------------

def _serve(args):
    from cheroot import wsgi

    os.environ['OS_KEYSTONE_CONFIG_FILES'] = args.config_file
    os.environ.pop('OS_KEYSTONE_CONFIG_DIR', None)
    # Keystone's configuration parses sys.argv: leave it nothing of ours.
    sys.argv[1:] = []
    from keystone.server import wsgi as keystone_wsgi
    app = keystone_wsgi.initialize_public_application()
    server = wsgi.Server((args.host, args.port), app, numthreads=16,
                         server_name='keystone')
    server.prepare()
    # Never outlive the process that started us (a killed cyborg-aio or
    # test run): reparented means it is gone.
    parent = os.getppid()

    def watch_parent():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()
    host, port = server.bind_addr[:2]
    print('ready http://%s:%d' % (host, port), flush=True)
    try:
        server.serve()
    finally:
        server.stop()


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m cyborg_aio.keystone')
    sub = parser.add_subparsers(dest='command', required=True)
    serve = sub.add_parser('serve', help="serve keystone's WSGI app")
    serve.add_argument('--config-file', required=True)
    serve.add_argument('--host', default='127.0.0.1')
    serve.add_argument('--port', type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == 'serve':
        import signal
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        _serve(args)


if __name__ == '__main__':
    main()
