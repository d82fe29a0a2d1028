"""Shared pytest fixtures: configuration and per-backend databases."""

import pytest

from cyborg.conf import CONF
from cyborg import policy
from tests import dbs


@pytest.fixture(autouse=True)
def _fresh_config():
    """Every test starts from default options and a fresh policy."""
    CONF([], project='cyborg', default_config_files=[])
    CONF.set_override('auth_strategy', 'noauth', group='api')
    yield
    CONF.clear_override('auth_strategy', group='api')
    CONF.reset()
    policy.reset()


_DATABASES = {}


def _database(backend):
    if backend not in _DATABASES:
        try:
            db = dbs.TestDatabase(backend)
            db.migrate()
        except dbs.Unavailable as e:
            _DATABASES[backend] = e
        else:
            _DATABASES[backend] = db
    found = _DATABASES[backend]
    if isinstance(found, Exception):
        if dbs.required():
            pytest.fail(str(found))
        pytest.skip(str(found))
    return found


def pytest_sessionfinish(session, exitstatus):
    for db in _DATABASES.values():
        if isinstance(db, dbs.TestDatabase):
            db.drop()


@pytest.fixture(params=dbs.BACKENDS)
def database(request):
    """A migrated, empty database on each backend in turn."""
    db = _database(request.param)
    db.activate()
    db.truncate()
    yield db


@pytest.fixture
def sqlite_database():
    """A migrated, empty SQLite database, for tests that need only one."""
    db = _database('sqlite')
    db.activate()
    db.truncate()
    yield db
