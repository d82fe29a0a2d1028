# SPDX-License-Identifier: Apache-2.0
"""No secrets in logs: not the database or broker passwords, not the
service users' passwords, not the tokens callers and Nova send.

Everything is logged at DEBUG and captured from the root logger.
"""

import logging
import re

from keystoneauth1 import loading
import pytest

from cyborg.api import app as api_app
from cyborg.conf import CONF
from tests.security import conftest
from tests.security import test_isolation

DB_PASSWORD = 'db-pa55-Zq81'
MQ_PASSWORD = 'mq-pa55-Hx42'
PLACEMENT_PASSWORD = 'placement-pa55-Kd07'
NOVA_PASSWORD = 'nova-pa55-Vb66'
MEMCACHE_KEY = 'memcache-key-Tr19'

SECRETS_CONF = '''
[DEFAULT]
transport_url = rabbit://cyborg:%(mq)s@127.0.0.1:5672/
[database]
connection = mysql+pymysql://cyborg:%(db)s@127.0.0.1/cyborg
[placement]
auth_type = password
auth_url = http://127.0.0.1/identity
username = placement
password = %(placement)s
[nova]
auth_type = password
auth_url = http://127.0.0.1/identity
username = nova
password = %(nova)s
''' % {'mq': MQ_PASSWORD, 'db': DB_PASSWORD,
       'placement': PLACEMENT_PASSWORD, 'nova': NOVA_PASSWORD}

# Option names that hold a secret, whatever library registers them.
SECRET_NAME = re.compile(
    r'(password|secret|_key$|^(slave_|asyncio_)*connection$|transport_url)')


@pytest.fixture
def configured(tmp_path, real_keystone, sqlite_database):
    """A cyborg.conf full of secrets (the SQLite database is what the app
    really uses: the MariaDB URL is only there to be logged), validating
    tokens against the real Keystone.
    """
    conftest.api_config(tmp_path, real_keystone.authtoken_config(),
                        SECRETS_CONF + (
        '[keystone_authtoken]\nmemcache_secret_key = %s\n' % MEMCACHE_KEY))
    # What loading the [placement] and [nova] auth plugins registers.
    for group in ('placement', 'nova'):
        CONF.register_opts(loading.get_auth_plugin_conf_options('password'),
                           group=group)
    yield api_app.setup_app(CONF)
    for group in ('placement', 'nova'):
        CONF.reset()
        CONF.unregister_opts(
            loading.get_auth_plugin_conf_options('password'), group=group)
    conftest.forget_auth_plugin_options()


def _secrets(keystone):
    return [DB_PASSWORD, MQ_PASSWORD, PLACEMENT_PASSWORD, NOVA_PASSWORD,
            MEMCACHE_KEY] + list(keystone.passwords.values())


def test_options_that_hold_secrets_are_marked_secret(configured):
    groups = [('DEFAULT', CONF._opts)] + [
        (name, group._opts) for name, group in CONF._groups.items()]
    checked = [('[%s] %s' % (group, name), info['opt'].secret)
               for group, opts in groups for name, info in opts.items()
               if SECRET_NAME.search(name)]
    assert ('[placement] password', True) in checked
    assert [name for name, secret in checked if not secret] == []


def test_the_configuration_dump_masks_secrets(configured, real_keystone,
                                              caplog):
    caplog.set_level(logging.DEBUG)
    CONF.log_opt_values(logging.getLogger('cyborg.test'), logging.DEBUG)
    dump = caplog.text
    assert 'database.connection' in dump and '****' in dump
    for secret in _secrets(real_keystone):
        assert secret not in dump


def test_requests_with_tokens_log_no_tokens(configured, real_keystone,
                                            callers, caplog):
    caplog.set_level(logging.DEBUG)
    app = configured
    test_isolation._seed(real_keystone.project_id('member_a'))
    for caller in ('admin', 'member_a', 'nova_a', 'service', 'bad_token'):
        for method, path, body in [
                ('GET', '/v2/accelerator_requests', None),
                ('GET', '/v2/devices', None),
                ('PATCH', '/v2/accelerator_requests',
                 test_isolation._bind(test_isolation.A_UNBOUND)),
                ('DELETE', '/v2/accelerator_requests?arqs='
                 + test_isolation.MISSING, None)]:
            response = test_isolation.call(app, callers[caller], method,
                                           path, body)
            assert response.status_int < 500
    logged = caplog.text
    # Something was logged at DEBUG (keystoneauth's requests to Keystone),
    # so the check below is not vacuous.
    assert '/v3/auth/tokens' in logged
    # Valid tokens only: an unknown token comes back in Keystone's 404
    # ("Could not find token: <id>"), which keystonemiddleware logs at
    # INFO (see docs/security.md).
    tokens = [h[k] for c, h in callers.items() if c != 'bad_token'
              for k in ('X-Auth-Token', 'X-Service-Token') if k in h]
    for secret in tokens + _secrets(real_keystone):
        assert secret not in logged
