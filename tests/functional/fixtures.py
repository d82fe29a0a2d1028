# SPDX-License-Identifier: Apache-2.0
"""Gabbi fixtures: a fresh migrated database per YAML file, on one backend.

`for_backend()` gives the fixture classes the gabbits name (APIFixture,
InventoryFixture, KeystoneFixture) bound to one database backend; the test
module builds the whole suite once per backend with them. Each request is
served by an app from `cyborg.api.app.setup_app()` configured as the active
fixture says, wrapped so that any 5xx answer fails the test that caused it:
no request in the suite may yield a server error.
"""

import os
import types
import unittest

from gabbi import fixture

from cyborg.api import app
from cyborg.conf import CONF
from tests import dbs
from tests.functional import seed

# Options the app is built with, (group, name): value; the active fixture
# sets them (the shared conftest resets CONF after every test).
_NOAUTH = {('api', 'auth_strategy'): 'noauth'}
_OPTIONS = dict(_NOAUTH)


def _database(backend):
    """The migrated database of `backend`, shared with the other tests."""
    try:
        return dbs.shared(backend)
    except dbs.Unavailable as e:
        if dbs.required():
            raise RuntimeError(str(e))
        raise unittest.SkipTest(str(e))


class ServerError(AssertionError):
    """The API answered 5xx: a bug, whatever the test expected."""


def _app(environ, start_response):
    """The API as the active fixture configures it, built per request
    (gabbi makes its clients, and so calls the intercept, at collection).
    """
    for (group, name), value in _OPTIONS.items():
        CONF.set_override(name, value, group=group)
    api = app.setup_app(CONF)

    def checking_start_response(status, headers, exc_info=None):
        if status.startswith('5'):
            raise ServerError('%s %s answered %s'
                              % (environ['REQUEST_METHOD'],
                                 environ['PATH_INFO'], status))
        return start_response(status, headers, exc_info)
    return api(environ, checking_start_response)


def wsgi_app():
    """The intercept: the API, failing the test on any 5xx answer."""
    return _app


class APIFixture(fixture.GabbiFixture):
    """An empty, migrated database; auth_strategy=noauth, so identity comes
    from X-Project-Id / X-Roles / X-Service-Roles headers (none: an admin
    with the service role).
    """

    backend = None
    options = _NOAUTH

    def start_fixture(self):
        db = _database(self.backend)
        db.activate()
        db.truncate()
        _OPTIONS.clear()
        _OPTIONS.update(self.options)
        self.seed()

    def seed(self):
        pass

    def stop_fixture(self):
        _OPTIONS.clear()
        _OPTIONS.update(_NOAUTH)


class InventoryFixture(APIFixture):
    """Two hosts' devices, deployables, attributes and attach handles, and
    a Bound and a BindFailed ARQ, as agents and the conductor would have
    left them (see seed.py).
    """

    def seed(self):
        self._environ = seed.inventory()
        os.environ.update(self._environ)

    def stop_fixture(self):
        for key in self._environ:
            os.environ.pop(key, None)
        super().stop_fixture()


class FailedDevicesFixture(InventoryFixture):
    """The inventory plus a Failed GPU nothing holds and a Lost one a
    binding holds (see seed.failed_devices).
    """

    def seed(self):
        super().seed()
        seed.failed_devices()


class KeystoneFixture(APIFixture):
    """auth_strategy=keystone: only the version documents are public."""

    options = {('api', 'auth_strategy'): 'keystone',
               # Named in the WWW-Authenticate header of a 401.
               ('keystone_authtoken', 'www_authenticate_uri'):
                   'http://keystone.example.org/identity'}


class CyborgProfilesFixture(APIFixture):
    """[api] gpu_profile_compat = nvidia: Cyborg-style NVIDIA GPU groups
    are translated at profile creation.
    """

    options = {**_NOAUTH, ('api', 'gpu_profile_compat'): 'nvidia'}


def for_backend(backend):
    """The fixture classes, bound to `backend`, as a module-like namespace."""
    return types.SimpleNamespace(**{
        cls.__name__: type(cls.__name__, (cls,), {'backend': backend})
        for cls in (APIFixture, InventoryFixture, FailedDevicesFixture,
                    KeystoneFixture, CyborgProfilesFixture)})
