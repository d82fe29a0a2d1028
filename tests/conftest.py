# SPDX-License-Identifier: Apache-2.0
"""Shared pytest fixtures: configuration and per-backend databases."""

import pytest

from cyborg.conf import CONF
from cyborg.conf import opts
from cyborg.drivers.nvidia import privileged
from cyborg import policy
from tests import dbs


@pytest.fixture(autouse=True)
def _privsep_in_process():
    """The privsep entrypoints run in the test's process, unprivileged,
    against the fakes (as Nova's PrivsepFixture and oslo.privsep's
    in-process mode do); tests that start a real daemon set it back.
    """
    privileged.context.set_client_mode(False)
    yield
    privileged.context.set_client_mode(False)


@pytest.fixture(autouse=True)
def _fresh_config():
    """Every test starts from default options and a fresh policy."""
    CONF([], project='cyborg', default_config_files=[])
    CONF.set_override('auth_strategy', 'noauth', group='api')
    CONF.set_override('transport_url', 'fake://')
    yield
    CONF.reset()
    # reset() also drops the defaults register_opts set (service types...).
    opts.register_opts(CONF)
    policy.reset()


def _database(backend):
    try:
        return dbs.shared(backend)
    except dbs.Unavailable as e:
        dbs.unavailable(str(e))


def pytest_make_parametrize_id(config, val, argname):
    """gabbi's pytest plugin takes every test whose id holds a ':' for a
    step of one of its YAML suites (and fails the whole collection on it),
    so a parameter's id never holds one.
    """
    if isinstance(val, str) and ':' in val:
        return val.replace(':', '_')
    return None


_KEYSTONE_STARTS = []


def pytest_terminal_summary(terminalreporter):
    for seconds in _KEYSTONE_STARTS:
        terminalreporter.write_line(
            'real Keystone: db_sync, keys, bootstrap, server and personas '
            'in %.1f s' % seconds)


def pytest_sessionfinish(session, exitstatus):
    dbs.drop_shared()


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


@pytest.fixture(scope='session')
def placement_service(tmp_path_factory):
    """The real Placement in this process, one per test session (its DB
    layer is process-global); tests keep apart by using their own compute
    node names. adapter() points [placement] at it.
    """
    from cyborg_harness import placement

    service = placement.InProcessPlacement(
        str(tmp_path_factory.mktemp('placement')))
    yield service
    service.stop()


@pytest.fixture(scope='session')
def real_keystone(tmp_path_factory):
    """One real Keystone per test session (cyborg_harness.keystone), for
    the tests that need tokens, a catalog and roles from the real thing.
    Skipped where the keystone package is not installed, unless CI asks
    for every service (CYBORG_TEST_REQUIRE_DBS=1).
    """
    from cyborg_harness import keystone
    if not keystone.available():
        message = ('the keystone package is not installed '
                   "(pip install -e '.[test]')")
        if dbs.required():
            pytest.fail(message)
        pytest.skip(message)
    server = keystone.Keystone(tmp_path_factory.mktemp('keystone')).start()
    _KEYSTONE_STARTS.append(server.start_seconds)
    yield server
    server.stop()
