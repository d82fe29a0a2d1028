# SPDX-License-Identifier: Apache-2.0
"""cyborg.db.api.writer(lone=True): a write of one statement. It runs in
autocommit, where it commits on its own: no BEGIN or COMMIT (on MariaDB
and PostgreSQL one round trip; on SQLite after its turn on the engine's
write lock). Profile creates and deletes, the ARQ create of a known
profile, the delete of one ARQ that holds no attach handle and a
conductor's heartbeat are lone writers; what they write is committed and
what they give back is what a read gives. A second statement is a
programming error on every backend, and a connection lost while the
statement is on its way leaves its outcome unknown, as a lost COMMIT
does.
"""

import threading
import time

from oslo_db import exception as db_exc
from oslo_utils import uuidutils
import pytest
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api
from cyborg.db import arqs
from cyborg.db import conductors
from cyborg.db import device_profiles
from cyborg.db import pooling
from tests.db import seed
from tests import dbs

DP = seed.DP
COUNT = api.Prepared(sa.select(sa.func.count()).select_from(DP))
INSERT = api.Prepared(DP.insert())
# True when the statement is its transaction's only one (PostgreSQL: now()
# is when the transaction began).
ALONE = api.Prepared(sa.select(
    sa.func.now() == sa.func.statement_timestamp()))
# A statement that runs long enough for its session to be ended under it.
PAUSE = {'mysql': api.Prepared(sa.select(sa.func.sleep(5))),
         'postgresql': api.Prepared(sa.select(sa.func.pg_sleep(5)))}


def _values(name):
    return {'uuid': uuidutils.generate_uuid(), 'name': name,
            'profile_json': '{"groups": []}'}


def _committed(database, uuid):
    """Whether a connection of another engine sees the profile `uuid`."""
    other = database.engine(poolclass=sa.pool.NullPool)
    try:
        with other.connect() as conn:
            return conn.execute(sa.select(DP.c.uuid).where(
                DP.c.uuid == uuid)).first() is not None
    finally:
        other.dispose()


def _checked_in():
    return (api.get_engine().pool.checkedout(),
            api._lone_engine().pool.checkedout()) == (0, 0)


def test_its_statement_is_committed(database):
    values = _values('lone')
    with api.writer(lone=True) as session:
        assert session.execute(INSERT, values).rowcount == 1
    assert _committed(database, values['uuid'])
    assert _checked_in()


def test_it_takes_its_connection_as_a_read_does(database, monkeypatch):
    """Where its engine's pool is a pooling.Pool (SQLite's file engine,
    MariaDB's lone engine), its connection comes from pooling.take(),
    without SQLAlchemy's proxy around it; a statement SQLAlchemy runs
    gets one through the proxy instead. Every connection comes back.
    """
    taken = type(api._lone_engine().pool) is pooling.Pool
    assert taken == (database.backend in ('sqlite', 'mysql'))
    proxied = []
    checkout = sa.engine.Engine.raw_connection

    def counted(engine):
        proxied.append(engine)
        return checkout(engine)
    monkeypatch.setattr(sa.engine.Engine, 'raw_connection', counted)
    values = _values('taken')
    with api.writer(lone=True) as session:
        assert session.execute(INSERT, values).rowcount == 1
    assert len(proxied) == (0 if taken else 1)
    assert _checked_in()
    del proxied[:]
    with api.writer(lone=True) as session:
        assert session.execute(sa.select(DP.c.uuid).where(
            DP.c.uuid == values['uuid'])).scalar() == values['uuid']
    assert len(proxied) == 1
    assert _checked_in()
    assert _committed(database, values['uuid'])


def test_a_failed_checkout_through_the_proxy_gives_nothing_back_twice(
        database, monkeypatch):
    """A statement SQLAlchemy runs gives the taken connection back before
    it checks one out through the proxy: when that checkout fails, the
    taken one is not given back again as the session ends (the pool
    would hand one connection to two sessions).
    """
    if type(api._lone_engine().pool) is not pooling.Pool:
        pytest.skip('a connection taken without the proxy only')
    dbapi = api._lone_engine().dialect.loaded_dbapi
    # What each driver raises for a connection it cannot open.
    error = dbapi.OperationalError(
        *((2003, "Can't connect to MySQL server on '127.0.0.1'")
          if database.backend == 'mysql'
          else ('unable to open database file',)))

    def refused(engine):
        raise error
    monkeypatch.setattr(sa.engine.Engine, 'raw_connection', refused)
    with pytest.raises(db_exc.DBError):
        with api.writer(lone=True) as session:
            session.execute(sa.select(DP.c.uuid))
    monkeypatch.undo()
    assert _checked_in()
    values = _values('after-a-failed-checkout')
    with api.writer(lone=True) as session:
        session.execute(INSERT, values)
    assert _checked_in()


def test_a_second_statement_is_refused(database):
    values = _values('second')
    with pytest.raises(RuntimeError, match='one statement'):
        with api.writer(lone=True) as session:
            session.execute(INSERT, values)
            session.execute(COUNT)
    with pytest.raises(RuntimeError, match='one statement'):
        with api.writer(lone=True) as session:
            session.execute_stored(COUNT)
            session.execute_stored(COUNT)
    assert _checked_in()
    # A writer after it, on whichever connection, is a transaction that
    # can run several statements.
    with api.writer() as session:
        session.execute(INSERT, _values('after'))
        assert session.execute(COUNT).scalar() >= 1


def test_a_created_profile_is_what_a_read_gives(database):
    made = device_profiles.create(uuidutils.generate_uuid(), 'given',
                                  seed.GROUPS, description='a description')
    assert made == device_profiles.get_by_uuid(made['uuid'])
    assert made['updated_at'] is None
    assert _committed(database, made['uuid'])


def test_a_known_profiles_arqs_and_a_profiles_delete(database):
    dp = seed.profile(name='known')
    first = arqs.create_from_profile('known', lambda p: [2], 'p1')
    again = arqs.create_from_profile('known', lambda p: [1], 'p1')
    listed = arqs.list_(project_id='p1')
    assert [a['uuid'] for a in listed] == \
        [a['uuid'] for a in first + again]
    assert again == [a for a in listed if a['uuid'] == again[0]['uuid']]
    unused = seed.profile(name='unused')
    device_profiles.delete_by_uuid(unused['uuid'])
    assert not _committed(database, unused['uuid'])
    # In use: nothing deleted, and the read that follows says why.
    with pytest.raises(exception.DeviceProfileInUse,
                       match='used by 3 accelerator'):
        device_profiles.delete_by_uuid(dp['uuid'])
    with pytest.raises(exception.NotFound):
        device_profiles.delete_by_names(['nowhere'])
    assert _committed(database, dp['uuid'])
    assert _checked_in()


def _bound(arq, handle=None):
    arqs.start_bind({arq['uuid']: {
        'hostname': 'compute', 'device_rp_uuid': uuidutils.generate_uuid(),
        'instance_uuid': uuidutils.generate_uuid()}})
    if handle is not None:
        seed.bind_handle(arq['uuid'], handle)


def test_one_arq_is_deleted_alone_unless_bound_or_holding_a_handle(
        database):
    dp = seed.profile(name='deleted')
    free, bound, held, theirs = (
        arqs.create(dp['id'], [1], p)[0] for p in ('p1', 'p1', 'p1', 'p2'))
    _bound(bound)
    handle = seed.attach_handle()
    _bound(held, handle)
    assert arqs.delete_by_uuids([free['uuid']], project_id='p1') == []
    with pytest.raises(exception.NotFound):
        arqs.delete_by_uuids([free['uuid']])
    with pytest.raises(exception.NotFound):
        arqs.delete_by_uuids([theirs['uuid']], project_id='p1')
    with pytest.raises(exception.Forbidden):
        arqs.delete_by_uuids([bound['uuid']])
    assert arqs.delete_by_uuids([bound['uuid']], may_delete_bound=True) == []
    # What holds a handle goes by the transaction that frees the handle.
    [released] = arqs.delete_by_uuids([held['uuid']], may_delete_bound=True)
    assert released['uuid'] == handle['uuid']
    assert seed.select(seed.AH)[0]['in_use'] is False
    assert [a['uuid'] for a in arqs.list_()] == [theirs['uuid']]
    assert _checked_in()


def test_on_mariadb_it_is_one_statement_and_no_commit(mariadb, sent):
    seed.profile(name='opens')          # the lone engine's first connection
    arqs.create_from_profile('opens', lambda p: [1], 'p1')
    del sent[:]
    dp = seed.profile(name='one')
    [arq] = arqs.create_from_profile('opens', lambda p: [1], 'p1')
    device_profiles.delete_by_uuid(dp['uuid'])
    arqs.delete_by_uuids([arq['uuid']], project_id='p1')
    assert [sql.split()[0] for _, sql in sent] == \
        ['INSERT', 'INSERT', 'DELETE', 'DELETE']
    # A conductor's heartbeat: an UPDATE, and the first time an INSERT.
    del sent[:]
    conductors.heartbeat('beating:1:a')
    conductors.heartbeat('beating:1:a')
    conductors.forget('beating:1:a')
    assert [sql.split()[0] for _, sql in sent] == \
        ['UPDATE', 'INSERT', 'UPDATE', 'DELETE']
    # On a connection of the lone reads' pool, in autocommit; a writer's
    # still ends its transaction with a COMMIT.
    del sent[:]
    with api.writer() as session:
        session.execute(INSERT, _values('in-a-transaction'))
    assert [sql.split()[0] for _, sql in sent] == ['INSERT', 'COMMIT']
    assert _checked_in()


def _traced(lone):
    """The SQL the driver runs for a writer of one INSERT (its commit
    included), and whether a transaction was open after the INSERT.
    """
    sent = []
    with api.writer(lone=lone) as session:
        conn = session._raw.driver_connection
        conn.set_trace_callback(sent.append)
        session.execute(INSERT, _values('traced-%s' % lone))
        open_after = conn.in_transaction
    conn.set_trace_callback(None)
    return [sql.split()[0] for sql in sent], open_after


def test_on_sqlite_it_is_one_statement_and_no_transaction(sqlite_database):
    # Committed as it ended: no transaction is left open, and none is
    # begun or committed (the BEGIN IMMEDIATE ran before the trace).
    assert _traced(lone=True) == (['INSERT'], False)
    assert _traced(lone=False) == (['INSERT', 'COMMIT'], True)
    assert api.read(COUNT).scalar() == 2
    assert _checked_in()


def test_on_sqlite_lone_writers_take_their_turn_on_the_write_lock(
        sqlite_database):
    """Another thread's writer holds the database: lone writers (profile
    creates) wait on the engine's write lock, with SQLite's own busy wait
    off, and all succeed once it is done.
    """
    holding = threading.Event()

    def hold():
        with api.writer() as session:
            session.execute(INSERT, _values('holder'))
            holding.set()
            time.sleep(0.3)

    made = []

    def race():
        holder = threading.Thread(target=hold)
        holder.start()
        assert holding.wait(10)
        creators = [threading.Thread(target=lambda i=i: made.append(
            device_profiles.create(uuidutils.generate_uuid(), 'turn-%d' % i,
                                   [])))
                    for i in range(4)]
        for t in creators:
            t.start()
        for t in creators + [holder]:
            t.join(30)

    dbs.without_sqlite_busy_wait(race)
    assert sorted(p['name'] for p in made) == ['turn-%d' % i
                                               for i in range(4)]
    assert api.read(COUNT).scalar() == 5
    assert _checked_in()


def test_on_postgresql_it_runs_alone_and_the_connection_comes_back(
        postgresql):
    with api.writer(lone=True) as session:
        pid = session._raw.driver_connection.get_backend_pid()
        assert session.execute(ALONE).scalar() is True
    with api.writer() as session:
        # The pool hands the same connection back, in transactions again.
        assert session._raw.driver_connection.get_backend_pid() == pid
        assert session.execute(ALONE).scalar() is False
    assert _checked_in()


def _paused_while_ended(database, session):
    """Run PAUSE in `session` while the server ends its session."""
    raw = session._raw.driver_connection
    ident = raw.thread_id() if database.backend == 'mysql' else \
        raw.get_backend_pid()

    def end():
        time.sleep(0.3)
        dbs.end_session(database, ident)
    ender = threading.Thread(target=end)
    ender.start()
    try:
        session.execute(PAUSE[database.backend])
    finally:
        ender.join()


def test_a_connection_lost_on_its_way_is_an_unknown_outcome(database):
    if database.backend == 'sqlite':
        pytest.skip('a server backend only')
    with pytest.raises(api.CommitOutcomeUnknown):
        with api.writer(lone=True) as session:
            _paused_while_ended(database, session)
    # A writer's statement lost so is a plain outage: its transaction
    # was not committed.
    with pytest.raises(db_exc.DBConnectionError) as raised:
        with api.writer() as session:
            _paused_while_ended(database, session)
    assert not isinstance(raised.value, api.CommitOutcomeUnknown)
    assert _checked_in()
    # The pools replaced the lost connections.
    values = _values('after-the-loss')
    with api.writer(lone=True) as session:
        session.execute(INSERT, values)
    assert _committed(database, values['uuid'])
