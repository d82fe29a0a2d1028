# SPDX-License-Identifier: Apache-2.0
"""Shared pytest fixtures: configuration and per-backend databases."""

import json
import os
import shutil
import tempfile

import pytest

from futurist import _thread as futurist_thread

from cyborg.conf import CONF
from cyborg.conf import opts
from cyborg.drivers.nvidia import privileged
from cyborg import policy
from tests import dbs

# An oslo.messaging server's wait() shuts its futurist pool down, and an
# idle pool thread looks whether it should exit once a second
# (ThreadWorker.MAX_IDLE_FOR); so every RPC server a test stops (the
# conductor's and each agent's of an embedded stack) cost it a second of
# nothing: two of the three seconds of a typical tests/conductor test. In
# this process idle pool threads look 20 times a second instead; what
# they do with work is unchanged. (Services the tests start as processes
# keep futurist's default.)
if hasattr(futurist_thread.ThreadWorker, 'MAX_IDLE_FOR'):
    futurist_thread.ThreadWorker.MAX_IDLE_FOR = 0.05


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


# -- pytest-xdist: which tests share a worker ---------------------------------
#
# The README's command runs the suite on one worker per CPU (pytest-xdist,
# `-n auto --dist loadfile`). A worker gets whole test modules, so that a
# module-scoped stack (a cyborg-aio, a vGPU host) starts once as in a
# serial run; and, added here, the modules that use one of the costly
# session-scoped set-ups below go to one worker together, so that it is
# built once rather than once per worker. The workers know each module's
# fixtures; they write which modules share a set-up to a file that the
# controller's scheduler reads (xdist's own xdist_group mark cannot carry
# it: it rewrites test ids in a way pytest 9.2 no longer reads).
SHARED_SETUPS = (
    'installed',        # a wheel installed in a fresh virtualenv (~45 s)
    'real_keystone',    # a real Keystone (~30 s quiet, more under load)
)
# The longest units of work (a module, or the modules of a shared set-up),
# longest first, as measured on a 2-CPU machine: each worker takes these
# before anything else, so that none of them starts near the end of the
# run while the other worker has nothing left to do; the many quick
# modules that follow (in collection order) even out the workers' ends.
LONGEST_FIRST = (
    'real_keystone',                        # ~85 s, 4 modules
    'tests/functional/test_readme.py',      # ~45 s
    'installed',                            # ~40 s, 2 modules
    'tests/functional/test_aio_h200.py',    # ~30 s
    'tests/functional/test_aio.py',         # ~25 s
    'tests/functional/test_tutorial.py',    # ~20 s
    'tests/nova/test_flow_vgpu_host.py',    # ~20 s
)
# Modules that ask for a shared set-up at run time
# (request.getfixturevalue), which their fixtures' names cannot show.
SHARED_SETUP_MODULES = {
    'tests/clients/test_real_clients.py': 'real_keystone',
}
_GROUPS_FILE = 'cyborg_xdist_groups'
_GROUPS_KEY = pytest.StashKey[str]()


def _module(nodeid):
    return nodeid.split('::', 1)[0]


def _shared_groups(items):
    """{module: shared set-up} of the modules that use one."""
    groups = {}
    for item in items:
        module = _module(item.nodeid)
        names = getattr(item, 'fixturenames', ())
        for setup in SHARED_SETUPS:
            if setup in names and module not in groups:
                groups[module] = setup
    for module, setup in SHARED_SETUP_MODULES.items():
        groups.setdefault(module, setup)
    return groups


def pytest_configure(config):
    workerinput = getattr(config, 'workerinput', None)
    if workerinput is None and config.pluginmanager.hasplugin('xdist') \
            and config.getoption('dist', 'no') == 'loadfile':
        path = os.path.join(tempfile.mkdtemp(prefix='cyborg-xdist-'),
                            'groups.json')
        config.stash[_GROUPS_KEY] = path


def pytest_unconfigure(config):
    path = config.stash.get(_GROUPS_KEY, None)
    if path:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """Where a worker writes its module groups (controller side)."""
    path = node.config.stash.get(_GROUPS_KEY, None)
    if path:
        node.workerinput[_GROUPS_FILE] = path


def pytest_collection_modifyitems(config, items):
    path = getattr(config, 'workerinput', {}).get(_GROUPS_FILE)
    if path:
        # Every worker collects the same tests: the same file, written
        # whole (rename) so that the controller never reads half of one.
        tmp = '%s.%s' % (path, config.workerinput['workerid'])
        with open(tmp, 'w') as f:
            json.dump(_shared_groups(items), f)
        os.replace(tmp, path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    path = config.stash.get(_GROUPS_KEY, None)
    if not path:
        return None
    from xdist.scheduler import LoadFileScheduling

    # Units of work in collection order (after LONGEST_FIRST), not
    # xdist's default (most tests first), which would leave a module of
    # one or two tests that run for a minute (test_readme.py) for the end
    # while the other worker idles.
    config.option.loadscopereorder = False

    class Scheduling(LoadFileScheduling):
        """--dist loadfile, with the modules of a shared set-up as one
        unit of work, and the longest units handed out first.
        """

        groups = None

        def _split_scope(self, nodeid):
            if self.groups is None:
                # Read once every worker has collected (and written it).
                with open(path) as f:
                    self.groups = json.load(f)
            module = _module(nodeid)
            return self.groups.get(module, module)

        def _assign_work_unit(self, node):
            for unit in LONGEST_FIRST:
                if unit in self.workqueue:
                    self.workqueue.move_to_end(unit, last=False)
                    break
            super()._assign_work_unit(node)

    return Scheduling(config, log)


_KEYSTONE_STARTS = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """A worker's Keystone start-up times, for the summary below."""
    _KEYSTONE_STARTS.extend(
        getattr(node, 'workeroutput', {}).get('keystone_starts', ()))


def pytest_terminal_summary(terminalreporter):
    for seconds in _KEYSTONE_STARTS:
        terminalreporter.write_line(
            'real Keystone: db_sync, keys, bootstrap, server and personas '
            'in %.1f s' % seconds)


def pytest_sessionfinish(session, exitstatus):
    dbs.drop_shared()
    workeroutput = getattr(session.config, 'workeroutput', None)
    if workeroutput is not None:    # an xdist worker: tell the controller
        workeroutput['keystone_starts'] = list(_KEYSTONE_STARTS)


@pytest.fixture(params=dbs.BACKENDS)
def database(request):
    """A migrated, empty database on each backend in turn."""
    db = _database(request.param)
    db.activate()
    db.truncate()
    yield db


def _with_returning(request, database, monkeypatch, capability, clause):
    """The `database`, with its dialect's `capability` (insert_returning,
    delete_returning) as it is (param 'returning'; skipped where the
    backend has no such `clause`) or turned off, as on MySQL's server.
    """
    from cyborg.db import api

    dialect = api.get_engine().dialect
    if request.param != 'returning':
        monkeypatch.setattr(dialect, capability, False)
    elif not getattr(dialect, capability):
        pytest.skip('%s cannot %s ... RETURNING' % (database.backend, clause))
    return request.param == 'returning'


@pytest.fixture(params=('returning', 'read-back'))
def insert_returning(request, database, monkeypatch):
    """The `database`, its creates run each way the DB layer has: with
    INSERT ... RETURNING (where the backend can; skipped elsewhere), and
    with an INSERT and then a read, as on a server without RETURNING
    (MySQL), whose dialect says so as this one is made to.
    """
    return _with_returning(request, database, monkeypatch,
                           'insert_returning', 'INSERT')


@pytest.fixture(params=('returning', 'locking-read'))
def delete_returning(request, database, monkeypatch):
    """The `database`, its ARQ deletes run each way the DB layer has: one
    DELETE ... RETURNING (where the backend can), and a locking read of
    the rows before their DELETE (MySQL's way).
    """
    return _with_returning(request, database, monkeypatch,
                           'delete_returning', 'DELETE')


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
    dbs.require_keystone()
    server = keystone.Keystone(tmp_path_factory.mktemp('keystone')).start()
    _KEYSTONE_STARTS.append(server.start_seconds)
    yield server
    server.stop()
