# SPDX-License-Identifier: Apache-2.0
"""cyborg.db.api.read() on MariaDB: a lone read is one round trip, its
SELECT on a connection in autocommit, from a pool kept for such reads
(api._autocommit_engine), so no COMMIT follows it. It sees every write
committed before it, on whichever pool; it keeps what the main pool
guarantees (a connection the server ended is replaced, or is an outage
once; [database]'s pool settings; dispose()); elsewhere read() uses the
main engine as before. (A forked child: tests/db/test_pool.py.)

What reaches the server is counted at PyMySQL's one door for commands
(the `sent` fixture, tests/db/conftest.py).
"""

from oslo_db import exception as db_exc
import pymysql.connections
import pytest
import sqlalchemy as sa

from cyborg.conf import CONF
from cyborg.db import api
from cyborg.db import pooling
from tests.db import outage
from tests.db import seed
from tests import dbs

DP = seed.DP
BY_UUID = api.Prepared(sa.select(DP.c.description).where(
    DP.c.uuid == sa.bindparam('u')))
WHO = api.Prepared(sa.select(sa.func.connection_id()))
AUTOCOMMIT = sa.select(sa.text('@@autocommit'))


def _lone_session():
    """The server's id of the session the next lone read gets."""
    return api.read(WHO).scalar()


def test_a_lone_read_is_one_statement_and_no_commit(mariadb, sent):
    dp = seed.profile()
    api.read(BY_UUID, {'u': dp['uuid']})      # opens the connection
    del sent[:]
    assert api.read(BY_UUID, {'u': dp['uuid']}).scalar() == \
        dp['description']
    rows, process = api.read_stored(BY_UUID, {'u': dp['uuid']})
    assert [process(r)[0] for r in rows] == [dp['description']]
    assert [sql.split()[0] for _, sql in sent] == ['SELECT', 'SELECT']
    # Its connections are in autocommit; a reader's are not, and it ends
    # its transaction with a COMMIT, as before.
    assert api.read(api.Prepared(AUTOCOMMIT)).scalar() == 1
    del sent[:]
    with api.reader() as session:
        assert session.execute(api.Prepared(AUTOCOMMIT)).scalar() == 0
    assert [sql.split()[0] for _, sql in sent] == ['SELECT', 'COMMIT']
    assert api.get_engine().pool.checkedout() == 0
    assert api._lone_engine().pool.checkedout() == 0


def test_a_read_sqlalchemy_must_expand_still_runs_in_a_reader(mariadb):
    names = api.Prepared(sa.select(DP.c.name).where(
        DP.c.name.in_(sa.bindparam('names', expanding=True))))
    dp = seed.profile()
    assert api.read(names, {'names': [dp['name']]}).scalar() == dp['name']
    assert api.get_engine().pool.checkedin() >= 1


def test_a_lone_read_sees_what_was_committed_before_it(mariadb):
    """Read your writes across the two pools: a write committed on the
    main pool is seen by the next lone read, on a connection that had
    read the row before (at REPEATABLE READ, a transaction left open
    there would still see the old row).
    """
    dp = seed.profile()
    session_id = _lone_session()
    assert api.read(BY_UUID, {'u': dp['uuid']}).scalar() == \
        dp['description']
    for description in ('first', 'second'):
        with api.writer() as session:
            session.execute(DP.update().where(
                DP.c.uuid == dp['uuid']).values(description=description))
        assert api.read(BY_UUID, {'u': dp['uuid']}).scalar() == description
    added = seed.profile(name='added')
    assert api.read(BY_UUID, {'u': added['uuid']}).scalar() == \
        added['description']
    with api.writer() as session:
        session.execute(DP.delete().where(DP.c.uuid == added['uuid']))
    assert api.read(BY_UUID, {'u': added['uuid']}).first() is None
    assert _lone_session() == session_id        # one pooled connection


def test_a_killed_idle_connection_is_replaced_unseen(mariadb, sent):
    """KILL of a pooled lone-read connection: its socket shows it, the
    next lone read pings it, and runs on a new connection.
    """
    first = _lone_session()
    dbs.end_session(mariadb, first)
    del sent[:]
    assert _lone_session() != first
    assert [c for c, _ in sent].count(pymysql.constants.COMMAND.COM_PING) \
        == 1


def test_a_connection_lost_unseen_is_an_outage_once(mariadb, monkeypatch):
    """A session lost where the guard cannot see it (a peer gone without
    a word): the read fails as a lost connection (DBConnectionError, the
    API's 503), and the next one runs on a new connection.
    """
    engine = api._lone_engine()
    first = _lone_session()
    monkeypatch.setattr(pooling, '_dead', lambda *args: False)
    dbs.end_session(mariadb, first)
    with pytest.raises(db_exc.DBConnectionError):
        _lone_session()
    assert engine.pool.checkedout() == 0
    assert _lone_session() != first
    assert engine.pool.checkedout() == 0


def test_its_pool_has_the_database_settings(mariadb):
    CONF.set_override('max_pool_size', 2, group='database')
    CONF.set_override('max_overflow', 1, group='database')
    CONF.set_override('pool_timeout', 7, group='database')
    CONF.set_override('connection_recycle_time', 60, group='database')
    api.configure(mariadb.url)
    engine = api._lone_engine()
    assert engine is not api.get_engine()
    assert type(engine.pool) is pooling.Pool
    assert engine.url == api.get_engine().url
    assert (engine.pool.size(), engine.pool._max_overflow,
            engine.pool._timeout, engine.pool._recycle) == (2, 1, 7, 60)


def test_dispose_closes_the_lone_reads_connections(mariadb):
    engine = api._lone_engine()
    record = pooling.take(engine)
    held = record.dbapi_connection
    pooling.give_back(record)
    api.dispose()
    with pytest.raises(pymysql.err.Error):
        held.cursor().execute('SELECT 1')
    # configure() too, and the next lone read has an engine of its own.
    api.configure(mariadb.url)
    again = api._lone_engine()
    assert again is not engine
    api.configure(mariadb.url)
    assert api._lone_engine() is not again
    assert _lone_session()


def test_elsewhere_a_lone_read_uses_the_main_engine(database):
    if database.backend == 'mysql':
        pytest.skip('not MariaDB')
    assert api._lone_engine() is api.get_engine()


def test_a_first_lone_read_while_the_server_is_down_is_an_outage(
        mariadb, monkeypatch):
    """The lone reads' engine is made on the first lone read, which may
    come during an outage: it fails at once as one (the API's 503), with
    no connection test retried seconds apart (a request held past the
    WSGI server's timeout), and the next read, the server back, works.
    """
    api.configure(api._STATE[0])        # both engines made anew
    api._engine()
    assert api._STATE[2] is None
    with outage.mariadb_down(monkeypatch):
        with pytest.raises(db_exc.DBConnectionError):
            _lone_session()
    assert _lone_session() is not None
