# SPDX-License-Identifier: Apache-2.0
"""The conductor's outage guard tells a database that is unreachable (an
outage: one line when it starts, one when it ends) from one that gave up
on a statement because of other transactions (contended: one line each
time, no outage begun or ended), as the API's 503s do.
"""

import logging

from oslo_db import exception as db_exc
import oslo_messaging as messaging
import pytest

from cyborg.conductor import manager
from cyborg.conductor import outage
from cyborg import context as cyborg_context
from cyborg.db import api as db_api
from cyborg.db import host_inventory

# What oslo.db raises for MariaDB's 1205 and 2013, and what SQLite's
# "database is locked" becomes once its busy timeout is spent.
LOCK_WAIT = ('(pymysql.err.OperationalError) (1205, "Lock wait timeout '
             'exceeded; try restarting transaction")')
LOST = '(pymysql.err.OperationalError) (2013, "Lost connection to server")'
LOCKED = '(sqlite3.OperationalError) database is locked'


@pytest.mark.parametrize('exc, expected', [
    (db_exc.DBConnectionError(LOST), outage.UNREACHABLE),
    (db_api.CommitOutcomeUnknown(LOST), outage.UNREACHABLE),
    (db_exc.DBDeadlock(LOCK_WAIT), outage.CONTENDED),
    (db_exc.DBError(LOCKED), outage.CONTENDED),
    (db_exc.DBError('(sqlite3.OperationalError) disk I/O error'),
     outage.UNREACHABLE),
    (db_exc.DBDuplicateEntry(columns=['uuid']), None),
    (db_exc.DBReferenceError('t', 'c', 'k', 'kt'), None),
    (db_exc.DBDataError('(1406, "Data too long for column")'), None),
    (ValueError('not the database'), None),
])
def test_kind(exc, expected):
    assert outage.kind(exc) == expected


@pytest.fixture
def endpoint(monkeypatch):
    """A conductor endpoint whose report_data raises each of `failures`
    (exceptions) in turn and then answers, on an outage guard of its own.
    """
    state = {'failures': []}

    def apply_report(hostname, devices):
        if state['failures']:
            raise state['failures'].pop(0)
        return 0, {}

    monkeypatch.setattr(host_inventory, 'apply_report', apply_report)
    monkeypatch.setattr(host_inventory, 'in_use_handles', lambda h: [])
    monkeypatch.setattr(outage, 'DATABASE', outage.DatabaseOutage())
    found = manager.ConductorManager()

    def failing(*failures):
        state['failures'] = list(failures)
        return found
    return failing


def _report(endpoint):
    return endpoint.report_data(cyborg_context.get_admin_context(),
                                'compute-1', [])


def _refused(endpoint):
    with pytest.raises(messaging.ExpectedException) as raised:
        _report(endpoint)
    refusal = raised.value.exc_info[1]
    assert isinstance(refusal, manager.DatabaseUnavailable)
    return str(refusal)


def _database_lines(caplog):
    return [r.getMessage() for r in caplog.records
            if r.getMessage().startswith('The database is')]


def test_a_lock_wait_that_timed_out_is_contended(endpoint, caplog):
    conductor = endpoint(*[db_exc.DBDeadlock(LOCK_WAIT)] * 2)
    with caplog.at_level(logging.INFO):
        assert _refused(conductor) == 'The database is contended; retry later'
        assert _refused(conductor) == 'The database is contended; retry later'
        assert _report(conductor)['writes'] == 0
    lines = _database_lines(caplog)
    # One line each time, naming what gave up; nothing said as an outage
    # or its end.
    assert len(lines) == 2
    for line in lines:
        assert line.startswith('The database is contended (DBDeadlock '
                               'while handling report_data: ')
        assert 'Lock wait timeout exceeded' in line
    assert outage.DATABASE.since is None
    assert not [r for r in caplog.records if r.exc_info], caplog.text


def test_an_outage_is_said_once_and_its_end_once(endpoint, caplog):
    conductor = endpoint(*[db_exc.DBConnectionError(LOST)] * 3)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            assert _refused(conductor) == (
                'The database is unreachable; retry later')
        assert _report(conductor)['writes'] == 0
    lines = _database_lines(caplog)
    assert len(lines) == 2
    assert lines[0].startswith('The database is unreachable '
                               '(DBConnectionError while handling '
                               'report_data: ')
    assert lines[1].startswith('The database is reachable again, after ')
    assert outage.DATABASE.since is None


def test_contention_during_an_outage_leaves_it_open(endpoint, caplog):
    conductor = endpoint(db_exc.DBConnectionError(LOST),
                         db_exc.DBDeadlock(LOCK_WAIT))
    with caplog.at_level(logging.INFO):
        _refused(conductor)
        _refused(conductor)
        assert outage.DATABASE.since is not None
        _report(conductor)
    assert [line.split(' (')[0].split(',')[0]
            for line in _database_lines(caplog)] == [
        'The database is unreachable', 'The database is contended',
        'The database is reachable again']


def test_any_other_error_is_the_callers_to_report(endpoint, caplog):
    conductor = endpoint(db_exc.DBReferenceError('t', 'c', 'k', 'kt'))
    with pytest.raises(db_exc.DBReferenceError):
        _report(conductor)
    assert _database_lines(caplog) == []
