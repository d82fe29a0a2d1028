# SPDX-License-Identifier: Apache-2.0
"""The connection pool (cyborg.db.pooling) on every backend: a forked
child never uses its parent's connections, a connection the server ended
is replaced before a request sees it, dispose() closes what the pool
holds, many threads share a small pool, recycling still happens, and
back-to-back transactions pay no ping.
"""

import json
import logging
import pathlib
import queue
import subprocess
import sys
import threading

from oslo_db import exception as db_exc
from oslo_utils import uuidutils
import pytest
import sqlalchemy as sa
import webob

from cyborg.api import app as api_app
from cyborg.conf import CONF
from cyborg.db import api
from cyborg.db import pooling
from tests.db import seed
from tests import dbs

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _server_only(database):
    if database.backend not in dbs.SESSION_ID:
        pytest.skip('a SQLite connection has no server to lose it')


def _session_id():
    """The server's id of the session the next transaction gets."""
    with api.reader() as session:
        return session.execute(sa.select(
            dbs.SESSION_ID[session.dialect.name]())).scalar()


def _pings(monkeypatch):
    """The list of pings the engine's dialect is asked for from now on."""
    dialect = api.get_engine().dialect
    ping = dialect.do_ping
    pings = []

    def counted(dbapi_conn):
        pings.append(dbapi_conn)
        return ping(dbapi_conn)
    monkeypatch.setattr(dialect, 'do_ping', counted)
    return pings


def test_a_forked_child_never_uses_its_parents_connections(database):
    """With fork hooks (gunicorn) and without (uWSGI's default), a child
    opens its own connection, and the parent's, left alone (neither used
    nor closed: closing it would end the parent's session), is still the
    parent's afterwards.
    """
    out = subprocess.run(
        [sys.executable, '-m', 'tests.db.forked', database.url],
        cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    assert sorted(seen) == ['libc fork', 'os.fork']
    for forked in seen.values():
        before, child, after = (
            forked['before'], forked['child'], forked['after'])
        assert child[0] != before[0]      # opened by the child
        if database.backend != 'sqlite':
            assert child[1] != before[1]
            assert child[2] != before[2]  # the lone read's too
        assert after == before            # the same server sessions


def test_back_to_back_transactions_pay_no_ping(database, monkeypatch):
    """The cost cut: a connection just given back, whose socket shows
    nothing from the server, is not pinged again.
    """
    _server_only(database)
    pings = _pings(monkeypatch)
    for _ in range(3):
        _session_id()
    assert pings == []


def test_an_idle_connection_the_server_ended_is_replaced_unseen(
        database, monkeypatch):
    """KILL (pg_terminate_backend) of a pooled connection: the server
    closed its socket, the next checkout pings it, and the transaction
    runs on a new connection, as with SQLAlchemy's pre-ping.
    """
    _server_only(database)
    api.get_engine().dispose()
    first = _session_id()
    dbs.end_session(database, first)
    pings = _pings(monkeypatch)
    # A write transaction of more than one statement (a lone one is on
    # MariaDB's other pool).
    uuid = uuidutils.generate_uuid()
    with api.writer() as session:
        session.execute(seed.DP.insert().values(
            uuid=uuid, name='killed-%s' % uuid[:8], profile_json='{}'))
        session.execute(sa.select(seed.DP.c.id))
    assert len(pings) == 1
    with api.reader() as session:
        found = session.execute(sa.select(seed.DP.c.uuid).where(
            seed.DP.c.uuid == uuid)).scalar()
    assert found == uuid
    assert _session_id() != first


def test_a_request_after_a_kill_gets_its_answer(database):
    """The same through the API: a GET right after the server killed the
    pooled connections (MariaDB's lone reads have a pool of their own) is
    a 200, not a 503.
    """
    _server_only(database)
    dp = seed.profile()
    app = api_app.setup_app()
    api.get_engine().dispose()
    api._lone_engine().dispose()
    whoami = api.Prepared(sa.select(
        dbs.SESSION_ID[api.get_engine().dialect.name]()))
    for session_id in {_session_id(), api.read(whoami).scalar()}:
        dbs.end_session(database, session_id)
    r = webob.Request.blank('/v2/device_profiles/%s' % dp['uuid']).\
        get_response(app)
    assert r.status_int == 200
    assert r.json['device_profile']['name'] == dp['name']


def test_a_long_idle_connection_is_pinged(database, monkeypatch):
    """A peer that lost the session without closing the socket (a host
    that rebooted) leaves nothing to read: a connection unused for longer
    than IDLE_PING is pinged, and one that fails is replaced.
    """
    _server_only(database)
    api.get_engine().dispose()
    pings = _pings(monkeypatch)

    def used_long_ago():
        with api.reader() as session:
            session._raw.info[pooling._USED] -= pooling.IDLE_PING + 1
            return session.execute(sa.select(
                dbs.SESSION_ID[session.dialect.name]())).scalar()

    first = used_long_ago()             # a new connection: no ping
    assert used_long_ago() == first     # pinged, alive, kept
    assert len(pings) == 1

    monkeypatch.setattr(api.get_engine().dialect, 'do_ping',
                        lambda dbapi_conn: pings.append(dbapi_conn) and False)
    assert _session_id() != first       # pinged, gone, replaced
    assert len(pings) == 2


def test_a_connection_past_its_recycle_time_is_replaced(database):
    """[database] connection_recycle_time still applies (SQLAlchemy's
    check, before the guard's).
    """
    _server_only(database)
    api.get_engine().dispose()
    with api.reader() as session:
        first = session.execute(sa.select(
            dbs.SESSION_ID[session.dialect.name]())).scalar()
        session._raw._connection_record.starttime -= (
            CONF.database.connection_recycle_time + 1)
    assert _session_id() != first


def test_dispose_closes_what_the_pool_holds(database):
    """api.dispose() closes every idle pooled connection; the next
    transaction opens a new one.
    """
    with api.reader() as outer:
        with api.reader() as inner:
            held = [outer._raw.dbapi_connection,
                    inner._raw.dbapi_connection]
    assert held[0] is not held[1]
    dbapi_error = api.get_engine().dialect.loaded_dbapi.Error
    api.dispose()
    for conn in held:
        with pytest.raises(dbapi_error):
            conn.cursor().execute('SELECT 1')
    api.configure(database.url)
    with api.reader() as session:
        assert session._raw.dbapi_connection not in held


def test_many_threads_share_a_small_pool(database):
    """More threads than connections (the conductor's executor): each
    waits its turn (lone reads too), none fails, and never more than pool
    size plus overflow are open at once, per pool (MariaDB's lone reads
    have one of their own); afterwards none is left checked out and no
    more than the pool size idle.
    """
    CONF.set_override('max_pool_size', 2, group='database')
    CONF.set_override('max_overflow', 1, group='database')
    api.configure(database.url)
    engines = {api.get_engine(), api._lone_engine()}
    lock = threading.Lock()
    # Per engine: open now, most open at once.
    live = {engine: [0, 0] for engine in engines}

    def counted(engine):
        def opened(dbapi_conn, record):
            with lock:
                live[engine][0] += 1
                live[engine][1] = max(live[engine])

        def closed(dbapi_conn, record):
            with lock:
                live[engine][0] -= 1
        sa.event.listen(engine, 'connect', opened)
        sa.event.listen(engine, 'close', closed)
    for engine in engines:
        engine.dispose()
        counted(engine)
    dp = seed.profile()
    errors = queue.SimpleQueue()
    query = sa.select(seed.DP.c.name).where(seed.DP.c.uuid == dp['uuid'])
    lone = api.Prepared(query)
    touch = seed.DP.update().where(seed.DP.c.uuid == dp['uuid']).values(
        description='touched')

    def work():
        try:
            for i in range(20):
                if i % 4 == 0:
                    with api.writer() as session:
                        session.execute(touch)
                elif i % 4 == 1:        # a lone read (pooling.take)
                    assert api.read(lone, {}).scalar() == dp['name']
                else:
                    with api.reader() as session:
                        assert session.execute(query).scalar() == dp['name']
        except Exception as e:          # reported below
            errors.put(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors.empty(), errors.get()
    assert len(engines) == (2 if database.backend == 'mysql' else 1)
    for engine in engines:
        assert 1 <= live[engine][1] <= 3
        assert engine.pool.checkedout() == 0
        assert engine.pool.checkedin() <= 2


def test_a_connection_comes_back_outside_any_transaction(sqlite_database):
    """SQLite's 'in_transaction' mark (its BEGIN is ours) never outlives
    the transaction, however it ended, so the next one begins its own.
    """
    engine = api.get_engine()
    engine.dispose()
    with api.writer() as session:
        session.execute(seed.DP.delete())
    with pytest.raises(ValueError):
        with api.reader() as session:
            session.execute(sa.select(seed.DP.c.id)).all()  # SQLAlchemy's
            raise ValueError()
    with engine.begin() as conn:
        conn.execute(seed.DP.delete())
    conn = engine.connect()
    conn.execute(sa.select(seed.DP.c.id)).all()
    conn.close()                        # begun, neither committed nor not
    raw = engine.raw_connection()
    try:
        assert engine.pool.checkedin() == 0     # one connection, this one
        assert 'in_transaction' not in raw.info
    finally:
        raw.close()


def test_idle_connections_keep_to_the_pool_size():
    idle = pooling._IdleConnections(2)
    idle.put('a', False)
    idle.put('b', False)
    assert idle.full()
    with pytest.raises(sa.util.queue.Full):
        idle.put('c', False)
    assert [idle.get(False), idle.get(False)] == ['a', 'b']
    with pytest.raises(sa.util.queue.Empty):
        idle.get(False)
    assert idle.empty() and idle.qsize() == 0


def test_a_waiting_checkout_gets_the_next_connection_given_back():
    idle = pooling._IdleConnections(1)
    got = queue.SimpleQueue()
    waiter = threading.Thread(target=lambda: got.put(idle.get(True, 60)))
    waiter.start()
    idle.put('conn', False)
    waiter.join()
    assert got.get(False) == 'conn'


def test_the_pool_logs_as_sqlalchemys_queue_pool(sqlite_database):
    """Its log lines keep SQLAlchemy's logger (and the level oslo.log
    gives it), not cyborg's.
    """
    assert api.get_engine().pool.logger.name.startswith(
        'sqlalchemy.pool.impl.QueuePool')


@pytest.mark.parametrize('transaction', [api.reader, api.writer])
def test_a_closed_sqlite_connection_is_replaced_for_a_transaction(
        sqlite_database, transaction, caplog):
    """As for a lone read (tests/db/test_lone_reads.py): the transaction
    whose BEGIN meets it is an outage (DBConnectionError, which callers
    treat as one), it is invalidated there, not left to the pool's
    rollback on return to fail (an ERROR with a traceback), and the next
    transaction gets a new connection.
    """
    engine = api.get_engine()
    engine.dispose()
    with api.reader() as session:
        closed = session._raw.dbapi_connection
    closed.close()
    with caplog.at_level(logging.WARNING, logger='sqlalchemy.pool'):
        with pytest.raises(db_exc.DBConnectionError):
            with transaction():
                pass
        for _ in range(2):
            with transaction() as session:
                assert session._raw.dbapi_connection is not closed
                assert session.execute(api.Prepared(
                    sa.select(sa.literal(1)))).scalar() == 1
    assert [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING] == []
    assert engine.pool.checkedout() == 0
    assert engine.pool.checkedin() == 1
