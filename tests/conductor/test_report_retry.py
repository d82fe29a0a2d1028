# SPDX-License-Identifier: Apache-2.0
"""The conductor's report_data runs again when another conductor's diff
of the same host or a deadlock got in its way, and not when a lock wait
timed out; what is left after its runs goes on to the outage guard
without a traceback of the retry's own.
"""

import logging

from oslo_db import exception as db_exc
import oslo_messaging as messaging
import pytest

from cyborg.conductor import manager as conductor_manager
from cyborg.db import host_inventory

# What oslo.db raises for MariaDB's 1213 and 1205 (both DBDeadlock).
DEADLOCK = ('(pymysql.err.OperationalError) (1213, "Deadlock found when '
            'trying to get lock; try restarting transaction")')
LOCK_WAIT = ('(pymysql.err.OperationalError) (1205, "Lock wait timeout '
             'exceeded; try restarting transaction")')


@pytest.fixture
def inventory(monkeypatch):
    """host_inventory's report functions, the apply raising each of
    `failures` (exceptions) in turn and then answering; the calls made.
    """
    calls = []
    state = {'failures': []}

    def apply_report(hostname, devices):
        calls.append(hostname)
        if state['failures']:
            raise state['failures'].pop(0)
        return 0, {}

    monkeypatch.setattr(host_inventory, 'apply_report', apply_report)
    monkeypatch.setattr(host_inventory, 'in_use_handles', lambda h: [])

    def failing(*failures):
        state['failures'] = list(failures)
        return calls
    return failing


def _report():
    return conductor_manager.ConductorManager().report_data(
        None, 'host-1', [])


def test_a_diff_raced_by_another_conductor_runs_again(inventory):
    calls = inventory(db_exc.DBDuplicateEntry(columns=['uuid']))
    assert _report()['writes'] == 0
    assert calls == ['host-1', 'host-1']


def test_a_deadlocks_victim_runs_again(inventory):
    calls = inventory(*[db_exc.DBDeadlock(DEADLOCK)] * 3)
    assert _report()['in_use'] == []
    assert len(calls) == 4


def test_a_lock_wait_that_timed_out_is_not_run_again(inventory):
    # It waited innodb_lock_wait_timeout already: the agent is told the
    # database is contended (it reports again on its next pass).
    calls = inventory(db_exc.DBDeadlock(LOCK_WAIT))
    with pytest.raises(messaging.ExpectedException) as raised:
        _report()
    assert isinstance(raised.value.exc_info[1],
                      conductor_manager.DatabaseUnavailable)
    assert str(raised.value.exc_info[1]) == (
        'The database is contended; retry later')
    assert calls == ['host-1']


def test_six_runs_then_the_error_without_a_retry_traceback(inventory,
                                                           caplog):
    calls = inventory(*[db_exc.DBDuplicateEntry(columns=['uuid'])] * 6)
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(db_exc.DBDuplicateEntry):
            _report()
    assert len(calls) == 6
    assert not [r for r in caplog.records if r.exc_info], caplog.text


def test_a_constraint_that_fails_again_is_not_run_again(inventory):
    calls = inventory(db_exc.DBReferenceError('t', 'c', 'k', 'kt'))
    with pytest.raises(db_exc.DBReferenceError):
        _report()
    assert calls == ['host-1']
