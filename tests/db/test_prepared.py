# SPDX-License-Identifier: Apache-2.0
"""cyborg.db.api's Prepared statements (run on the driver's cursor) give
what SQLAlchemy's own execution gives, on every backend.
"""

import datetime

from oslo_db import exception as db_exc
from oslo_utils import uuidutils
import pytest
import sqlalchemy as sa

from cyborg.db import api
from cyborg.db import models
from tests import dbs

DP = models.DeviceProfile.__table__
INSERT = api.Prepared(DP.insert())
BY_UUID = api.Prepared(sa.select(DP).where(DP.c.uuid == sa.bindparam('u')))


def _insert(session, name):
    uuid = uuidutils.generate_uuid()
    session.execute(INSERT, {'uuid': uuid, 'name': name,
                             'profile_json': '{"groups": []}'})
    return uuid


def test_rows_are_what_sqlalchemy_returns(database):
    with api.writer() as session:
        uuid = _insert(session, 'p1')
    with api.reader() as session:
        fast = session.execute(BY_UUID, {'u': uuid})
        keys = fast.keys()
        fast = fast.one()
        slow = session.execute(BY_UUID.statement, {'u': uuid}).one()
    assert keys == list(DP.c.keys())
    assert tuple(fast) == tuple(slow)
    # The Python default ran, and SQLite's text came back as a datetime.
    assert isinstance(fast[keys.index('created_at')], datetime.datetime)


def test_driver_errors_are_translated_as_sqlalchemy_would(database):
    with api.writer() as session:
        _insert(session, 'same')
    with pytest.raises(db_exc.DBDuplicateEntry):
        with api.writer() as session:
            _insert(session, 'same')


def test_statements_share_one_transaction_and_roll_back_together(database):
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with api.writer() as session:
            uuid = _insert(session, 'gone')
            # An expanding IN list runs through SQLAlchemy, on the same
            # connection: it sees the uncommitted row.
            seen = session.execute(
                sa.select(DP.c.uuid).where(DP.c.uuid.in_([uuid]))).all()
            assert [r[0] for r in seen] == [uuid]
            _insert(session, 'gone-too')
            raise Boom()
    with api.reader() as session:
        assert session.execute(sa.select(sa.func.count()).select_from(
            DP)).scalar() == 0


def test_an_updates_onupdate_values_are_filled_in(database):
    """updated_at's onupdate (a Python function) is computed here, as
    SQLAlchemy's execution would: an UPDATE stays on the driver's
    connection, as the transaction's later statements then do.
    """
    with api.writer() as session:
        uuid = _insert(session, 'old')
    rename = api.Prepared(DP.update().where(
        DP.c.uuid == sa.bindparam('u')).values(name=sa.bindparam('n')))
    # A plan of its own: not SQLAlchemy's execution.
    assert rename.compiled(api.get_engine().dialect, None) is not None
    with api.writer() as session:
        assert session.execute(rename, {'u': uuid, 'n': 'new'}).rowcount == 1
    with api.reader() as session:
        row = session.execute(BY_UUID, {'u': uuid}).mappings().first()
    assert row['name'] == 'new'
    assert isinstance(row['updated_at'], datetime.datetime)
    assert row['updated_at'] >= row['created_at']


def test_fixed_length_in_lists_and_rowcount(database):
    with api.writer() as session:
        uuids = [_insert(session, 'n%d' % i) for i in range(3)]
    delete = api.Prepared(DP.delete().where(api.in_(DP.c.uuid, 'u', 2)))
    with api.writer() as session:
        gone = session.execute(delete, api.in_params('u', uuids[:2]))
    assert gone.rowcount == 2
    with api.reader() as session:
        left = session.execute(sa.select(DP.c.uuid)).all()
    assert [r[0] for r in left] == uuids[2:]


def _plan(prepared, params=None):
    engine = api.get_engine()
    return prepared.compiled(engine.dialect, api._keys(prepared, params))


def test_parameters_go_to_the_driver_as_given_where_nothing_changes_them(
        database):
    with api.writer() as session:
        uuids = [_insert(session, 'd%d' % i) for i in range(3)]
    # Every bind a parameter given under its own name, none processed:
    # the driver's arguments come straight from the caller's (one, several,
    # none, or on PostgreSQL the mapping itself).
    two = api.Prepared(sa.select(DP.c.name).where(
        DP.c.uuid == sa.bindparam('u'), DP.c.name == sa.bindparam('n')))
    none = api.Prepared(sa.select(sa.func.count()).select_from(DP))
    for prepared in (BY_UUID, two, none):
        assert _plan(prepared)[-1] is not None
    with api.reader() as session:
        row = session.execute(BY_UUID, {'u': uuids[1]}).mappings().first()
        assert row['name'] == 'd1'
        assert session.execute(two, {'u': uuids[2], 'n': 'd2'}).all() == \
            [('d2',)]
        assert session.execute(two, {'u': uuids[2], 'n': 'd0'}).all() == []
        assert session.execute(none).scalar() == 3
    assert api.read(two, {'u': uuids[0], 'n': 'd0'}).scalar() == 'd0'


def test_binds_with_values_defaults_or_processors_take_sqlalchemys_path(
        database):
    with api.writer() as session:
        uuid = _insert(session, 'lit')
    # A literal (a bind with a value of its own), an INSERT's defaults, a
    # bind SQLAlchemy processes (SQLite's dates): construct_params() and
    # the processors, as before.
    literal = api.Prepared(sa.select(DP.c.uuid).where(DP.c.name == 'lit'))
    assert _plan(literal)[-1] is None
    values = {'uuid': 'x', 'name': 'y', 'profile_json': '{}'}
    assert _plan(INSERT, values)[-1] is None
    after = api.Prepared(sa.select(DP.c.uuid).where(
        DP.c.created_at > sa.bindparam('t', type_=sa.DateTime)))
    if database.backend == 'sqlite':
        assert _plan(after)[-1] is None
    assert api.read(literal).scalar() == uuid
    assert api.read(after, {'t': datetime.datetime(2000, 1, 1)}).scalar() \
        == uuid


def test_a_missing_parameter_is_sqlalchemys_error(database):
    with pytest.raises(sa.exc.InvalidRequestError,
                       match="value is required for bind parameter 'u'"):
        api.read(BY_UUID, {})


def test_an_ended_transaction_is_not_rolled_back_again_on_return(database):
    """A transaction that committed (or rolled back) hands its connection
    back without the pool's reset rollback, one round trip per
    transaction to MariaDB; one that did not end is still reset.
    """
    engine = api.get_engine()
    seen = []

    def reset(dbapi_conn, record, state):
        seen.append(state.transaction_was_reset)
    sa.event.listen(engine, 'reset', reset)
    try:
        with api.writer() as session:
            uuid = _insert(session, 'kept')
        with api.reader() as session:
            session.execute(BY_UUID, {'u': uuid}).one()
        with pytest.raises(ValueError):
            with api.writer() as session:
                _insert(session, 'dropped')
                raise ValueError('roll back')
        # A connection taken straight from the pool and not ended by us.
        engine.raw_connection().close()
    finally:
        sa.event.remove(engine, 'reset', reset)
    assert seen == [True, True, True, False]
    with api.reader() as session:
        names = [r[0] for r in session.execute(
            sa.select(DP.c.name).where(DP.c.name.in_(['kept', 'dropped'])))]
    assert names == ['kept']


def _drop_own_session(database, session, prepared=True):
    """Have the server drop `session`'s connection, from another one (what
    an operator's KILL, a failover or a restart does to a connection in
    the middle of its COMMIT); `prepared`: ask who it is through a
    Prepared statement (the transaction stays on the driver's
    connection), else through SQLAlchemy.
    """
    if database.backend not in dbs.SESSION_ID:
        pytest.skip('a SQLite connection cannot be dropped by a server')
    query = sa.select(dbs.SESSION_ID[database.backend]())
    (session_id,) = session.execute(
        api.Prepared(query) if prepared else query).one()
    dbs.end_session(database, session_id)


@pytest.mark.parametrize('path', ['driver', 'sqlalchemy'])
def test_connection_lost_at_commit_is_an_outcome_unknown(database, path):
    """The server drops the session while its transaction waits to
    commit: a DBConnectionError (an outage, a 503 in the API) of its own
    kind, since the caller cannot know whether the change was applied.
    """
    with pytest.raises(api.CommitOutcomeUnknown):
        with api.writer() as session:
            _insert(session, 'maybe')
            _drop_own_session(database, session, path == 'driver')
    assert issubclass(api.CommitOutcomeUnknown, db_exc.DBConnectionError)
    # The pool threw the dead connection away: the next transaction works.
    with api.reader() as session:
        session.execute(BY_UUID, {'u': 'none'}).all()


def test_connection_lost_at_a_readers_commit_is_a_plain_outage(database):
    """A reader changes nothing: losing its COMMIT is an outage, with no
    doubt about an outcome.
    """
    if database.backend == 'postgresql':
        # Its readers run in autocommit (READ COMMITTED): there is no
        # COMMIT to lose. What it read stands; the pool replaces the
        # dropped connection before the next transaction.
        with api.reader() as session:
            _drop_own_session(database, session)
        with api.reader() as session:
            assert session.execute(BY_UUID, {'u': 'none'}).all() == []
        return
    with pytest.raises(db_exc.DBConnectionError) as raised:
        with api.reader() as session:
            _drop_own_session(database, session)
    assert not isinstance(raised.value, api.CommitOutcomeUnknown)
