"""The API behind keystonemiddleware, validating against a fake Keystone."""

from keystoneauth1 import loading
import pytest

from cyborg.api import app as api_app
from cyborg.conf import CONF
from tests.security import fake_keystone


@pytest.fixture(scope='session')
def keystone():
    server = fake_keystone.FakeKeystone().start()
    yield server
    server.stop()


def keystone_config(tmp_path, keystone, extra=''):
    """Load a cyborg.conf with auth_strategy=keystone (and `extra`)."""
    path = tmp_path / 'cyborg.conf'
    path.write_text('[DEFAULT]\ntransport_url = fake://\n'
                    '[api]\nauth_strategy = keystone\n'
                    + fake_keystone.authtoken_config(keystone.url) + extra)
    CONF(['--config-file', str(path)], project='cyborg',
         default_config_files=[])
    # The shared conftest's override would win over the file.
    CONF.clear_override('auth_strategy', group='api')
    return path


def forget_auth_plugin_options():
    """keystonemiddleware registers the password plugin's options
    (auth_url is required) when it loads the plugin; left registered,
    they fail every later test's CONF([]) of the session."""
    CONF.reset()
    CONF.unregister_opts(loading.get_auth_plugin_conf_options('password'),
                         group='keystone_authtoken')


@pytest.fixture
def keystone_api(tmp_path, keystone, sqlite_database):
    """The app as cyborg-api builds it, on an empty SQLite database."""
    keystone_config(tmp_path, keystone)
    yield api_app.setup_app(CONF)
    forget_auth_plugin_options()
