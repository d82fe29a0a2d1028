# SPDX-License-Identifier: Apache-2.0
"""Building the WSGI app."""

import pytest

from cyborg.api import app
from cyborg.conf import CONF


def test_keystone_without_authtoken_config_refuses_to_start():
    CONF.set_override('auth_strategy', 'keystone', group='api')
    with pytest.raises(RuntimeError, match='www_authenticate_uri'):
        app.setup_app(CONF)


def test_keystone_with_authtoken_config_builds():
    CONF.set_override('auth_strategy', 'keystone', group='api')
    with pytest.raises(RuntimeError):    # registers [keystone_authtoken]
        app.setup_app(CONF)
    CONF.set_override('www_authenticate_uri', 'http://keystone.example.org',
                      group='keystone_authtoken')
    assert callable(app.setup_app(CONF))
