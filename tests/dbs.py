# SPDX-License-Identifier: Apache-2.0
"""pytest glue for the harness's throw-away databases
(cyborg_harness.databases): one migrated database per backend shared by
the run, and what a missing backend does to a test.

A backend (or server) that cannot be reached skips the test, unless
CYBORG_TEST_REQUIRE_DBS=1 (set by .ci/run), where it fails the run.
"""

import os

import pytest
import sqlalchemy as sa

from cyborg_harness import databases

BACKENDS = databases.BACKENDS
Unavailable = databases.Unavailable


def required():
    return os.environ.get('CYBORG_TEST_REQUIRE_DBS') == '1'


def unavailable(message):
    """Skip the test, or fail it when every backend is required."""
    if required():
        pytest.fail(message)
    pytest.skip(message)


def require_keystone():
    """Skip the test (or fail it where every service is required) unless
    the keystone package is installed.
    """
    from cyborg_harness import keystone
    if not keystone.available():
        unavailable("the keystone package is not installed "
                    "(pip install -e '.[test]')")


def without_sqlite_busy_wait(fn):
    """fn() with SQLite's own busy wait off on the service's engine
    (cyborg.db.api): a writer that met a busy database would fail at once.
    """
    from cyborg.db import api
    engine = api.get_engine()

    def no_busy_wait(dbapi_conn, record, proxy):
        dbapi_conn.execute('PRAGMA busy_timeout=0')

    sa.event.listen(engine, 'checkout', no_busy_wait)
    try:
        return fn()
    finally:
        sa.event.remove(engine, 'checkout', no_busy_wait)


def new(backend, **kwargs):
    """A fresh (unmigrated) databases.Database; skips or fails if the
    backend cannot be reached.
    """
    try:
        return databases.Database(backend, **kwargs)
    except Unavailable as e:
        unavailable(str(e))


_SHARED = {}


def shared(backend):
    """The migrated database of `backend` for this test run, created on
    first use; raises Unavailable (every time) if the backend is down.
    """
    if backend not in _SHARED:
        try:
            _SHARED[backend] = databases.Database(backend).migrate()
        except Unavailable as e:
            _SHARED[backend] = e
    found = _SHARED[backend]
    if isinstance(found, Exception):
        raise found
    return found


def drop_shared():
    while _SHARED:
        _, db = _SHARED.popitem()
        if isinstance(db, databases.Database):
            db.drop()


# The server's id of the session a statement runs in, per backend.
SESSION_ID = {'mysql': sa.func.connection_id,
              'postgresql': sa.func.pg_backend_pid}
# How a server ends a session from outside (an operator's KILL, a
# failover); PostgreSQL's two-argument form returns once it is gone.
_END = {'mysql': 'KILL %d',
        'postgresql': 'SELECT pg_terminate_backend(%d, 10000)'}


def end_session(database, session_id):
    """Have `database`'s server end session `session_id`, from a
    connection of its own.
    """
    admin = database.engine(poolclass=sa.pool.NullPool)
    try:
        with admin.connect() as other:
            other.execute(sa.text(_END[database.backend] % session_id))
            other.commit()
    finally:
        admin.dispose()
