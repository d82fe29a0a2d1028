# SPDX-License-Identifier: Apache-2.0
"""PostgreSQL readers run in autocommit where the connection's transactions
are READ COMMITTED (cyborg.db.api._autocommit_reads): no BEGIN or COMMIT
round trip, and nothing a reader sees changes, since at that level each
statement takes its own snapshot anyway. Writers always get a transaction,
on the same pooled connections; at REPEATABLE READ readers keep theirs.

Whether a statement ran in a transaction of its own shows in
now() = statement_timestamp(): now() is when the transaction began (in a
transaction psycopg2 began, its BEGIN, a statement before the first).
"""

from oslo_db import exception as db_exc
import pytest
import sqlalchemy as sa

from cyborg.db import api
from cyborg.db import models
from tests import dbs

DP = models.DeviceProfile.__table__
# Both through a Prepared statement (the driver's cursor) and through
# SQLAlchemy (a Connection on the same driver connection).
ALONE = sa.select(sa.func.now() == sa.func.statement_timestamp())
PAUSE = sa.select(sa.func.pg_sleep(0.01))
WHO = sa.select(sa.func.pg_backend_pid())


def _alone(session, prepared):
    """[whether each of two statements, 10 ms apart, ran on its own]."""
    statement = api.Prepared(ALONE) if prepared else ALONE
    first = session.execute(statement).scalar()
    session.execute(PAUSE)
    return [first, session.execute(statement).scalar()]


@pytest.mark.parametrize('prepared', [True, False])
def test_a_readers_statements_each_run_on_their_own(postgresql, prepared):
    with api.reader() as session:
        assert _alone(session, prepared) == [True, True]
    with api.writer() as session:
        assert _alone(session, prepared) == [False, False]


def test_a_writer_after_a_reader_on_its_connection_is_one_transaction(
        postgresql):
    with api.reader() as session:
        reader_pid = session.execute(WHO).scalar()
    with pytest.raises(RuntimeError):
        with api.writer() as session:
            # The pool hands the connection the reader just gave back.
            assert session.execute(WHO).scalar() == reader_pid
            session.execute(DP.insert().values(
                uuid='00000000-0000-4000-8000-000000000001', name='gone',
                profile_json='{"groups": []}'))
            raise RuntimeError('the caller failed')
    with api.reader() as session:
        assert session.execute(sa.select(sa.func.count()).select_from(
            DP)).scalar() == 0


def test_readers_keep_a_transaction_at_repeatable_read(postgresql):
    engine = api.get_engine()

    def repeatable_read(dbapi_connection, record):
        cursor = dbapi_connection.cursor()
        cursor.execute('SET SESSION CHARACTERISTICS AS TRANSACTION '
                       'ISOLATION LEVEL REPEATABLE READ')
        cursor.close()
        dbapi_connection.commit()

    sa.event.listen(engine, 'connect', repeatable_read)
    engine.dispose()
    try:
        with api.reader() as session:
            assert _alone(session, True) == [False, False]
    finally:
        sa.event.remove(engine, 'connect', repeatable_read)
        engine.dispose()
    with api.reader() as session:
        assert _alone(session, True) == [True, True]


@pytest.mark.parametrize('prepared', [True, False])
def test_a_reader_that_loses_its_connection_is_an_outage(
        postgresql, prepared):
    # The server ends the reader's session between two statements: the
    # second fails as a lost connection (not as anything about putting
    # the connection back), and the next reader gets a new one.
    with pytest.raises(db_exc.DBConnectionError):
        with api.reader() as session:
            pid = session.execute(WHO).scalar()
            dbs.end_session(postgresql, pid)
            statement = api.Prepared(ALONE) if prepared else ALONE
            session.execute(statement).scalar()
    with api.reader() as session:
        assert session.execute(WHO).scalar() != pid
        assert _alone(session, True) == [True, True]
