# SPDX-License-Identifier: Apache-2.0
"""A write the database picks as a deadlock's victim is run again
(api.retry_on_deadlock), on MariaDB and PostgreSQL, with deadlocks made
for real: two writers that lock two rows in opposite orders, and on
MariaDB a profile's DELETE as the victim, which the race suite saw once
against ARQ creates of the profile (made here with a share lock that is
then upgraded, since the race's own interleaving cannot be forced).
"""

import threading
import time

from oslo_db import exception as db_exc
from oslo_utils import uuidutils
import pytest
import sqlalchemy as sa

from cyborg.db import api
from cyborg.db import device_profiles
from tests.db import seed
from tests import racing

DP = seed.DP
TOUCH = api.Prepared(DP.update().where(DP.c.id == sa.bindparam('id'))
                     .values(description=sa.bindparam('by')))


@pytest.fixture
def server_database(database):
    if database.backend == 'sqlite':
        pytest.skip('SQLite queues writers; it has no row locks to deadlock')
    return database


def test_writers_locking_in_opposite_orders_both_go_through(
        server_database):
    """Each writer updates one profile, waits until the other has updated
    the other one, then updates the other's: the database rolls one back
    (InnoDB at once, PostgreSQL after its deadlock_timeout), which runs
    again once the other has committed.
    """
    a, b = seed.profile()['id'], seed.profile()['id']
    both_hold_one = threading.Barrier(2)
    victims = []

    @api.retry_on_deadlock
    def write(first, second, by):
        with api.writer() as session:
            session.execute(TOUCH, {'id': first, 'by': by})
            if not both_hold_one.broken:
                both_hold_one.wait(10)
            try:
                session.execute(TOUCH, {'id': second, 'by': by})
            except db_exc.DBDeadlock as e:
                victims.append(by)
                # The other one goes on now; the retry must not wait.
                both_hold_one.abort()
                raise e

    outcomes = racing.race([lambda: write(a, b, 'ab'),
                            lambda: write(b, a, 'ba')], timeout=60)
    assert outcomes == [('ok', None), ('ok', None)], outcomes
    assert len(victims) == 1, victims
    # The victim, run again after the other committed, wrote last.
    with api.reader() as session:
        written = session.execute(sa.select(DP.c.description).where(
            DP.c.id.in_([a, b]))).scalars().all()
    assert written == victims * 2


def test_a_lock_wait_that_timed_out_is_not_run_again():
    """MariaDB's lock wait timeout (1205) is a DBDeadlock to oslo.db too,
    but it has waited 50 s already: raised at once, not run six times.
    """
    runs = []

    @api.retry_on_deadlock
    def timed_out():
        runs.append(1)
        raise db_exc.DBDeadlock(
            "(pymysql.err.OperationalError) (1205, 'Lock wait timeout "
            "exceeded; try restarting transaction')")

    with pytest.raises(db_exc.DBDeadlock):
        timed_out()
    assert runs == [1]


def _waiting_for_a_lock(conn):
    """Whether a profile DELETE on this test's database waits for a row
    lock (other tests' databases share the server).
    """
    return conn.exec_driver_sql(
        'SELECT COUNT(*) FROM information_schema.innodb_trx t '
        'JOIN information_schema.processlist p '
        'ON p.id = t.trx_mysql_thread_id '
        "WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE() "
        "AND t.trx_query LIKE 'DELETE FROM device_profiles%%'").scalar()


def test_profile_delete_deadlocked_is_run_again(mariadb, monkeypatch):
    """Another transaction share-locks a profile (as an ARQ INSERT's
    foreign key check does), the profile's DELETE queues for it, and the
    other asks for the row exclusively: InnoDB's lock-upgrade deadlock,
    in which the DELETE, having written less, is rolled back. It runs
    again once the other has ended, and deletes the profile.
    """
    dp = seed.profile()
    tries = []
    real = device_profiles._delete_one

    def counted(*args):
        try:
            return real(*args)
        except Exception as e:      # counted, then raised on
            tries.append(type(e).__name__)
            raise
    monkeypatch.setattr(device_profiles, '_delete_one', counted)

    other = mariadb.engine(poolclass=sa.pool.NullPool)
    try:
        with other.connect() as holder, other.connect() as watcher:
            holder.begin()
            # A write first, so that it weighs more than the DELETE.
            holder.execute(DP.insert().values(
                uuid=uuidutils.generate_uuid(), name='heavier',
                profile_json='{"groups": []}'))
            holder.execute(sa.select(DP.c.id).where(DP.c.id == dp['id'])
                           .with_for_update(read=True))
            deleting = threading.Thread(
                target=device_profiles.delete_by_names, args=([dp['name']],))
            deleting.start()
            deadline = time.monotonic() + 10
            while not _waiting_for_a_lock(watcher):
                assert time.monotonic() < deadline, 'the DELETE never waited'
                # InnoDB refreshes what its information_schema tables show
                # only when they were not read in the last 0.1 s.
                time.sleep(0.15)
            holder.execute(sa.select(DP.c.id).where(DP.c.id == dp['id'])
                           .with_for_update())
            holder.rollback()
            deleting.join(30)
        assert tries == ['DBDeadlock']
        with other.connect() as conn:
            assert conn.execute(sa.select(DP.c.id)).scalars().all() == []
    finally:
        other.dispose()
