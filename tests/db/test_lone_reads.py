# SPDX-License-Identifier: Apache-2.0
"""cyborg.db.api.read(): a reader's only statement gives what it gives in
a reader(), on every backend; on a SQLite file it runs outside any
transaction, on a pooled connection taken past SQLAlchemy's proxy
(pooling.take), which keeps what the pool guarantees: its limits, the
connection given back whatever happens, another process's connection
never used, a closed one replaced, other listeners still run.
"""

import datetime
import os

from oslo_db import exception as db_exc
import pytest
import sqlalchemy as sa

from cyborg.conf import CONF
from cyborg.db import api
from cyborg.db import pooling
from tests.db import seed

DP = seed.DP
BY_UUID = api.Prepared(sa.select(DP).where(DP.c.uuid == sa.bindparam('u')))
NAMES = api.Prepared(sa.select(DP.c.name).where(
    DP.c.name.in_(sa.bindparam('names', expanding=True))).order_by(DP.c.id))


def test_a_read_gives_what_a_reader_gives(database):
    dp = seed.profile()
    with api.reader() as session:
        expected = session.execute(BY_UUID, {'u': dp['uuid']}).all()
        keys = session.execute(BY_UUID, {'u': dp['uuid']}).keys()
    result = api.read(BY_UUID, {'u': dp['uuid']})
    assert result.keys() == keys
    assert [tuple(r) for r in result.all()] == [tuple(r) for r in expected]
    created = result.mappings().first()['created_at']
    assert isinstance(created, datetime.datetime)
    assert api.read(BY_UUID, {'u': 'none'}).first() is None
    # What SQLAlchemy runs (an expanding IN list; a Core statement) comes
    # back fetched, with the same interface.
    assert api.read(NAMES, {'names': [dp['name']]}).scalar() == dp['name']
    assert api.read(NAMES.statement, {'names': ['x']}).all() == []
    rows, process = api.read_stored(BY_UUID, {'u': dp['uuid']})
    assert [tuple(process(r)) for r in rows] == [tuple(r) for r in expected]
    assert api.get_engine().pool.checkedout() == 0


def test_a_read_runs_only_queries(sqlite_database):
    with pytest.raises(ValueError):
        api.read(api.Prepared(DP.delete()))
    with pytest.raises(ValueError):
        api.read(DP.delete())


def _traced(engine):
    """The SQL the engine's connections run from now on (new ones)."""
    statements = []

    def connect(dbapi_conn, record):
        dbapi_conn.set_trace_callback(statements.append)
    sa.event.listen(engine, 'connect', connect)
    engine.dispose()
    return statements


def test_a_sqlite_read_is_one_statement_outside_a_transaction(
        sqlite_database):
    dp = seed.profile()
    engine = api.get_engine()
    statements = _traced(engine)
    api.read(BY_UUID, {'u': dp['uuid']})       # opens the connection
    del statements[:]
    assert api.read(BY_UUID, {'u': dp['uuid']}).mappings().first()['uuid'] \
        == dp['uuid']
    assert len(statements) == 1 and statements[0].startswith('SELECT')
    # A reader still takes its snapshot first.
    with api.reader() as session:
        session.execute(BY_UUID, {'u': dp['uuid']}).one()
    assert statements[1] == 'BEGIN'


def test_a_sqlite_read_uses_the_pools_connections(sqlite_database,
                                                  monkeypatch):
    """The pool's own: the one a reader got before, back in the pool
    afterwards, error or not.
    """
    engine = api.get_engine()
    engine.dispose()
    with api.reader() as session:
        used = session._raw.dbapi_connection
    seen = []
    real = pooling.take

    def take(engine):
        record = real(engine)
        seen.append(record.dbapi_connection)
        return record
    monkeypatch.setattr(pooling, 'take', take)
    api.read(BY_UUID, {'u': 'none'})
    with pytest.raises(db_exc.DBError):
        api.read(api.Prepared(sa.select(sa.column('x')).select_from(
            sa.table('no_such_table'))))
    assert seen == [used, used]
    assert engine.pool.checkedout() == 0 and engine.pool.checkedin() == 1


def test_a_read_never_uses_another_processs_connection(sqlite_database):
    """As guard()'s checkout: a connection a forked child finds in the
    pool is left alone (not closed: the parent's) and a new one opened.
    """
    engine = api.get_engine()
    engine.dispose()
    with api.reader() as session:
        parents = session._raw.dbapi_connection
        session._raw.info[pooling._PID] = os.getpid() + 1
    api.read(BY_UUID, {'u': 'none'})
    with api.reader() as session:
        assert session._raw.dbapi_connection is not parents
        assert session._raw.info[pooling._PID] == os.getpid()
    parents.execute('SELECT 1')                 # still open


def test_a_closed_sqlite_connection_is_an_outage_then_replaced(
        sqlite_database):
    engine = api.get_engine()
    engine.dispose()
    with api.reader() as session:
        closed = session._raw.dbapi_connection
    closed.close()
    with pytest.raises(db_exc.DBConnectionError):
        api.read(BY_UUID, {'u': 'none'})
    assert api.read(BY_UUID, {'u': 'none'}).all() == []
    assert engine.pool.checkedout() == 0


def test_other_checkout_listeners_still_see_every_read(sqlite_database):
    engine = api.get_engine()
    seen = []

    def checkout(dbapi_conn, record, proxy):
        seen.append(dbapi_conn)
    sa.event.listen(engine, 'checkout', checkout)
    try:
        api.read(BY_UUID, {'u': 'none'})
    finally:
        sa.event.remove(engine, 'checkout', checkout)
    assert len(seen) == 1
    assert engine.pool.checkedout() == 0


def test_a_read_waits_for_a_connection_of_a_full_pool(sqlite_database):
    """The pool's limit holds for reads: with its one connection checked
    out, a read times out as any checkout would.
    """
    CONF.set_override('max_pool_size', 1, group='database')
    CONF.set_override('max_overflow', 0, group='database')
    CONF.set_override('pool_timeout', 1, group='database')
    api.configure(sqlite_database.url)
    with api.reader():
        with pytest.raises(sa.exc.TimeoutError):
            api.read(BY_UUID, {'u': 'none'})
    assert api.read(BY_UUID, {'u': 'none'}).all() == []
