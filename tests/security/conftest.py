# SPDX-License-Identifier: Apache-2.0
"""The API behind keystonemiddleware, validating tokens against the real
Keystone of the session (tests/conftest.py's real_keystone); the fake
Keystone stays for the one test that counts validations.
"""

from keystoneauth1 import loading
import pytest

from cyborg.api import app as api_app
from cyborg.conf import CONF
from tests.security import fake_keystone


@pytest.fixture(scope='session')
def keystone():
    """The fake Keystone (tests/security/fake_keystone.py)."""
    server = fake_keystone.FakeKeystone().start()
    yield server
    server.stop()


@pytest.fixture(scope='session')
def callers(real_keystone):
    """Request headers of each kind of caller, with real tokens:

      anonymous   no token                  bad_token  an unknown token
      admin       admin of the admin project (project-scoped)
      system_admin  the same admin, system-scoped
      member_a/b  member of project A/B     reader_a   reader of project A
      service     Nova's own token (the service role in project service)
      nova_a/b    member A/B's token with Nova's token as X-Service-Token
    """
    tokens = {p: real_keystone.token(p)
              for p in ('admin', 'member_a', 'reader_a', 'member_b', 'nova',
                        'not_a_service')}
    return {
        'anonymous': {},
        'bad_token': {'X-Auth-Token': 'gAAAAABunknown-token-0000'},
        'admin': {'X-Auth-Token': tokens['admin']},
        'system_admin': {'X-Auth-Token': real_keystone.system_token()},
        'member_a': {'X-Auth-Token': tokens['member_a']},
        'reader_a': {'X-Auth-Token': tokens['reader_a']},
        'member_b': {'X-Auth-Token': tokens['member_b']},
        'service': {'X-Auth-Token': tokens['nova']},
        'nova_a': {'X-Auth-Token': tokens['member_a'],
                   'X-Service-Token': tokens['nova']},
        'nova_b': {'X-Auth-Token': tokens['member_b'],
                   'X-Service-Token': tokens['nova']},
        # member A's token with a service token lacking the service role.
        'not_a_service_a': {'X-Auth-Token': tokens['member_a'],
                            'X-Service-Token': tokens['not_a_service']},
    }


def api_config(tmp_path, authtoken, extra=''):
    """Load a cyborg.conf with auth_strategy=keystone, the
    [keystone_authtoken] section `authtoken` (and `extra`).
    """
    path = tmp_path / 'cyborg.conf'
    path.write_text('[DEFAULT]\ntransport_url = fake://\n'
                    '[api]\nauth_strategy = keystone\n' + authtoken + extra)
    CONF(['--config-file', str(path)], project='cyborg',
         default_config_files=[])
    # The shared conftest's override would win over the file.
    CONF.clear_override('auth_strategy', group='api')
    return path


def keystone_config(tmp_path, keystone, extra=''):
    """A cyborg.conf whose keystonemiddleware asks the fake Keystone."""
    return api_config(tmp_path,
                      fake_keystone.authtoken_config(keystone.url), extra)


def forget_auth_plugin_options():
    """keystonemiddleware registers the password plugin's options
    (auth_url is required) when it loads the plugin; left registered,
    they fail every later test's CONF([]) of the session.
    """
    CONF.reset()
    CONF.unregister_opts(loading.get_auth_plugin_conf_options('password'),
                         group='keystone_authtoken')


@pytest.fixture
def keystone_api(tmp_path, keystone, sqlite_database):
    """The app as cyborg-api builds it, validating against the fake."""
    keystone_config(tmp_path, keystone)
    yield api_app.setup_app(CONF)
    forget_auth_plugin_options()


@pytest.fixture
def real_keystone_api(tmp_path, real_keystone, sqlite_database):
    """The app as cyborg-api builds it, on an empty SQLite database,
    validating tokens against the real Keystone.
    """
    api_config(tmp_path, real_keystone.authtoken_config())
    yield api_app.setup_app(CONF)
    forget_auth_plugin_options()
