# SPDX-License-Identifier: Apache-2.0
"""cyborg.db.conductors on every backend: heartbeats, and taking over
the binds of conductors that stopped heartbeating. Every statement is
Prepared; a take-over that finds nothing to take (every heartbeat, as a
rule) is one lone read and opens no write transaction (on SQLite, takes
no write lock).
"""

import datetime
import threading

import pytest
import sqlalchemy as sa

from cyborg.db import api
from cyborg.db import conductors
from cyborg.db import models
from tests.db.prepared import prepared_only
from tests.db import seed

CONDUCTOR = models.Conductor.__table__


def _held(holder, count=1):
    """`count` BindStarted ARQs held by `holder`, oldest first."""
    made = [a['uuid'] for a in seed.arq_requests(count)]
    with api.writer() as session:
        session.execute(seed.ARQ.update().where(
            seed.ARQ.c.uuid.in_(made)).values(
            state='BindStarted', bind_owner=holder))
    return made


def _silent(name, seconds=60):
    """`name` last heartbeat `seconds` ago."""
    with api.writer() as session:
        session.execute(CONDUCTOR.update().where(
            CONDUCTOR.c.name == name).values(
            heartbeat_at=models.utcnow()
            - datetime.timedelta(seconds=seconds)))


def _owners():
    return {a['uuid']: a['bind_owner'] for a in seed.select(seed.ARQ)}


@pytest.fixture
def transactions(monkeypatch):
    """Whether each transaction (api.Session) opened from now on was a
    writer, in order; api.read()'s own connection is none.
    """
    opened = []
    init = api.Session.__init__

    def counting(self, engine, writing, lone=False):
        opened.append(writing)
        init(self, engine, writing, lone)
    monkeypatch.setattr(api.Session, '__init__', counting)
    return opened


def test_every_statement_is_prepared(database):
    with prepared_only():
        conductors.heartbeat('me:1:a')          # the INSERT
        conductors.heartbeat('me:1:a')          # the UPDATE
        conductors.heartbeat('gone:2:b')
    mine, theirs = _held('me:1:a'), _held('gone:2:b', 2)
    _silent('gone:2:b')
    with prepared_only():
        assert conductors.live(30) == ['me:1:a']
        assert conductors.live(3600) == ['gone:2:b', 'me:1:a']
        assert conductors.take_over('me:1:a', 30) == {'gone:2:b': theirs}
        assert conductors.take_over('me:1:a', 30) == {}
        assert conductors.held_by('me:1:a') == mine + theirs
        conductors.forget('me:1:a')
        assert conductors.live(3600) == ['gone:2:b']


def test_nothing_to_take_over_is_one_read_and_no_writer(database,
                                                        transactions):
    """Binds held by live conductors, queued ones nobody holds, and this
    conductor's own: nothing to take over, and no write transaction.
    """
    conductors.heartbeat('me:1:a')
    conductors.heartbeat('peer:2:b')
    _held('me:1:a')
    _held('peer:2:b')
    _held(None)
    with prepared_only():
        del transactions[:]
        assert conductors.take_over('me:1:a', 30) == {}
    # A reader's transaction where read() has none (PostgreSQL).
    assert True not in transactions
    assert len(transactions) <= 1


def test_a_sqlite_take_over_with_nothing_to_take_is_one_select(
        sqlite_database):
    engine = api.get_engine()
    statements = []

    def connect(dbapi_conn, record):
        dbapi_conn.set_trace_callback(statements.append)
    sa.event.listen(engine, 'connect', connect)
    engine.dispose()
    try:
        conductors.heartbeat('me:1:a')
        del statements[:]
        assert conductors.take_over('me:1:a', 30) == {}
    finally:
        sa.event.remove(engine, 'connect', connect)
    assert len(statements) == 1 and statements[0].startswith('SELECT')


def test_a_take_over_with_nothing_to_take_does_not_wait_for_a_writer(
        database):
    """On SQLite a writer holds the write lock to its end (the API's
    writes, a peer's heartbeat): a conductor's look for binds to take
    over goes on meanwhile.
    """
    conductors.heartbeat('me:1:a')
    found = []
    looking = threading.Thread(
        target=lambda: found.append(conductors.take_over('me:1:a', 30)))
    with api.writer() as session:
        session.execute(conductors._BEAT, {'conductor': 'me:1:a',
                                           'now': models.utcnow()})
        looking.start()
        looking.join(10)
        done = not looking.is_alive()
    looking.join()
    assert done and found == [{}]


def test_binds_of_silent_conductors_are_taken_over_once(
        database, transactions, monkeypatch):
    """Of each silent holder, in UPDATEs of at most api.IN_MAX ARQs;
    the next look (this conductor's, or a peer's) finds nothing left and
    opens no writer.
    """
    monkeypatch.setattr(api, 'IN_MAX', 2)
    for name in ('me:1:a', 'peer:2:b', 'gone:3:c'):
        conductors.heartbeat(name)
    five, one = _held('gone:3:c', 5), _held('stopped:4:d')
    _silent('gone:3:c')
    del transactions[:]
    with prepared_only():
        taken = conductors.take_over('me:1:a', 30)
    assert taken == {'gone:3:c': five, 'stopped:4:d': one}
    assert True in transactions
    del transactions[:]
    with prepared_only():
        assert conductors.take_over('peer:2:b', 30) == {}
        assert conductors.take_over('me:1:a', 30) == {}
    assert True not in transactions
    assert set(_owners().values()) == {'me:1:a'}


def test_a_holder_heard_from_after_the_look_keeps_its_binds(
        database, monkeypatch):
    """The holder heartbeats between the lone read that found its binds
    and the writer: the writer, which looks again, takes nothing.
    """
    conductors.heartbeat('me:1:a')
    conductors.heartbeat('slow:2:b')
    held = _held('slow:2:b', 2)
    _silent('slow:2:b')
    read = api.read

    def back(statement, params=None):
        result = read(statement, params)
        if statement is conductors._ORPHANED:
            conductors.heartbeat('slow:2:b')
        return result
    monkeypatch.setattr(api, 'read', back)
    with prepared_only():
        assert conductors.take_over('me:1:a', 30) == {}
    assert _owners() == {u: 'slow:2:b' for u in held}


def test_binds_a_peer_took_first_are_the_peers(database, monkeypatch):
    """A peer's take-over moved one of the ARQs between this one's read
    and its UPDATE: this one gets the others, in every UPDATE of its own.
    """
    monkeypatch.setattr(api, 'IN_MAX', 2)
    conductors.heartbeat('me:1:a')
    conductors.heartbeat('gone:2:b')
    first, stolen, last = _held('gone:2:b', 3)
    _silent('gone:2:b')
    steal = api.Prepared(seed.ARQ.update().where(
        seed.ARQ.c.uuid == sa.bindparam('u')).values(bind_owner='peer:3:c'))
    execute = api.Session.execute
    to_steal = [stolen]

    def racing(self, statement, params=None):
        # Before this conductor's first take-over UPDATE, in its
        # transaction (where the peer's committed one would be seen).
        if isinstance(params, dict) and 'holder' in params and to_steal:
            execute(self, steal, {'u': to_steal.pop()})
        return execute(self, statement, params)
    monkeypatch.setattr(api.Session, 'execute', racing)
    with prepared_only():
        taken = conductors.take_over('me:1:a', 30)
    assert not to_steal
    assert taken == {'gone:2:b': [first, last]}
    assert _owners() == {first: 'me:1:a', stolen: 'peer:3:c',
                         last: 'me:1:a'}
