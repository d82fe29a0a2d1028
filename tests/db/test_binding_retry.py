# SPDX-License-Identifier: Apache-2.0
"""What the conductor's database writes (cyborg.db.bindings.retry: claims,
outcomes, events, heartbeats) run again: a deadlock's victim and a lost
connection; not a statement that waited out its lock timeout (a MariaDB
lock wait, which would wait innodb_lock_wait_timeout again each time, or
a busy SQLite, its 30 s busy timeout), nor an error that would fail
again.
"""

from oslo_db import exception as db_exc
import pytest

from cyborg.db import api as db_api
from cyborg.db import bindings

DEADLOCK = ('(pymysql.err.OperationalError) (1213, "Deadlock found when '
            'trying to get lock; try restarting transaction")')
LOCK_WAIT = ('(pymysql.err.OperationalError) (1205, "Lock wait timeout '
             'exceeded; try restarting transaction")')


@pytest.fixture
def waits(monkeypatch):
    slept = []
    monkeypatch.setattr(db_api.time, 'sleep', slept.append)
    return slept


def _failing(*failures):
    """A bindings.retry function raising each of `failures` in turn, then
    answering 'done'; the list of its runs.
    """
    runs = []
    left = list(failures)

    @bindings.retry
    def write():
        runs.append(len(runs))
        if left:
            raise left.pop(0)
        return 'done'
    return write, runs


@pytest.mark.parametrize('exc', [
    db_exc.DBDeadlock(DEADLOCK),
    db_exc.DBConnectionError('(2013, "Lost connection to server")'),
    # Any other DBError (a disk I/O error, say) is taken as passing.
    db_exc.DBError('(sqlite3.OperationalError) disk I/O error'),
], ids=['deadlock', 'connection-lost', 'other-db-error'])
def test_run_again_until_it_goes_through(waits, exc):
    write, runs = _failing(exc, exc)
    assert write() == 'done'
    assert len(runs) == 3
    assert waits == [0.2, 0.4]


@pytest.mark.parametrize('exc', [
    db_exc.DBDeadlock(LOCK_WAIT),
    db_exc.DBError('(sqlite3.OperationalError) database is locked'),
    db_exc.DBDuplicateEntry(columns=['uuid']),
    db_exc.DBReferenceError('t', 'c', 'k', 'kt'),
    db_exc.DBDataError('(pymysql.err.DataError) (1406, "Data too long for '
                       'column \'attach_info\' at row 1")'),
], ids=['lock-wait-timed-out', 'sqlite-busy', 'duplicate', 'reference',
        'data'])
def test_not_run_again(waits, exc):
    write, runs = _failing(exc)
    with pytest.raises(type(exc)):
        write()
    assert runs == [0]
    assert waits == []


def test_six_runs_then_the_error(waits):
    write, runs = _failing(*[db_exc.DBDeadlock(DEADLOCK)] * 6)
    with pytest.raises(db_exc.DBDeadlock):
        write()
    assert len(runs) == 6
    assert waits == [0.2, 0.4, 0.8, 1.6, 3.2]
