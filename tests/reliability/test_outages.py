# SPDX-License-Identifier: Apache-2.0
"""What the API answers while a backing service is down (regressions of
the fault suite's findings, runnable without it): a lost database is a
503 with a clear error and no traceback; an unreachable message bus does
not hold a bind PATCH."""

import json
import logging
import threading

from oslo_db import exception as db_exc
from oslo_utils import uuidutils
import webob

from cyborg.api import app as api_app
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import arqs
from cyborg.db import device_profiles
from cyborg import rpc
from cyborg_harness import net
from tests.db import seed
from tests.reliability import stack as race_stack


def _call(app, method, path, body=None, headers=race_stack.NOVA_HEADERS):
    request = webob.Request.blank(path, method=method, headers=headers)
    if body is not None:
        request.body = json.dumps(body).encode()
    return request.get_response(app)


def _fault_of_503(r, caplog, retry_after, logged):
    """The faultstring of a 503 answer `r` with that Retry-After, whose
    one log line (no traceback) holds `logged`.
    """
    assert r.status_int == 503
    assert r.headers['Retry-After'] == retry_after
    fault = json.loads(r.json['error_message'])
    assert fault['faultcode'] == 'Server'
    assert not [rec for rec in caplog.records if rec.exc_info]
    assert any(logged in rec.getMessage() for rec in caplog.records), [
        rec.getMessage() for rec in caplog.records]
    return fault['faultstring']


def test_database_unreachable_is_503_without_traceback(
        sqlite_database, monkeypatch, caplog):
    def unreachable(*args, **kwargs):
        raise db_exc.DBConnectionError(
            "(pymysql.err.OperationalError) (2003, \"Can't connect to MySQL "
            "server on '127.0.0.1' ([Errno 111] Connection refused)\")")

    monkeypatch.setattr(arqs, 'list_', unreachable)
    caplog.set_level(logging.INFO)
    r = _call(api_app.setup_app(), 'GET', '/v2/accelerator_requests')
    fault = _fault_of_503(r, caplog, '5', '503, database unreachable')
    assert fault.startswith('The database is unreachable')


def test_connection_lost_during_commit_says_the_outcome_is_unknown(
        sqlite_database, monkeypatch, caplog):
    """The connection went while the COMMIT was under way (seen once in
    the fault suite's database scenario: the 503'd bind was applied): a
    503 that does not claim nothing happened.
    """
    def lost(*args, **kwargs):
        raise db_api.CommitOutcomeUnknown(
            '(pymysql.err.OperationalError) (2013, \'Lost connection to '
            'server during query\')')

    dp = seed.profile()
    monkeypatch.setattr(arqs, 'create_from_profile', lost)
    caplog.set_level(logging.INFO)
    r = _call(api_app.setup_app(), 'POST', '/v2/accelerator_requests',
              {'device_profile_name': dp['name']})
    fault = _fault_of_503(r, caplog, '5', '503, database lost during commit')
    assert 'may or may not have been carried out' in fault
    assert 'was not carried out' not in fault


def test_write_still_deadlocked_after_its_retries_is_503(
        sqlite_database, monkeypatch, caplog):
    """A profile delete the database rolls back as a deadlock's victim
    every time: run again five times (db_api.retry_on_deadlock), then a
    503 that says nothing was carried out, without a traceback.
    """
    tries = []

    def victim(*args):
        tries.append(args)
        raise db_exc.DBDeadlock(
            "(pymysql.err.OperationalError) (1213, 'Deadlock found when "
            "trying to get lock; try restarting transaction')")

    dp = seed.profile()
    monkeypatch.setattr(device_profiles, '_delete_one', victim)
    caplog.set_level(logging.INFO)
    r = _call(api_app.setup_app(), 'DELETE',
              '/v2/device_profiles/%s' % dp['uuid'],
              headers=race_stack.ADMIN_HEADERS)
    fault = _fault_of_503(
        r, caplog, '1', '503, database contended: '
        "(pymysql.err.OperationalError) (1213, 'Deadlock found")
    assert fault.endswith('not carried out. Retry.')
    assert len(tries) == 6


def test_bind_with_the_message_bus_down_is_accepted(sqlite_database):
    """The broker refuses connections: the PATCH still answers 202 with
    the ARQ stored BindStarted (the conductor's sweep re-drives it)
    instead of waiting for the broker forever.
    """
    CONF.set_override('transport_url', 'rabbit://guest:guest@127.0.0.1:%d/'
                      % net.free_port())
    rpc.cleanup()
    dp = seed.profile()
    (arq,) = arqs.create(dp['id'], [1], 'p1')
    answer = []
    patch = {arq['uuid']: [
        {'op': 'add', 'path': '/hostname', 'value': 'compute'},
        {'op': 'add', 'path': '/device_rp_uuid',
         'value': uuidutils.generate_uuid()},
        {'op': 'add', 'path': '/instance_uuid',
         'value': uuidutils.generate_uuid()}]}
    app = api_app.setup_app()
    worker = threading.Thread(target=lambda: answer.append(_call(
        app, 'PATCH', '/v2/accelerator_requests', patch)))
    try:
        worker.start()
        worker.join(120)
        assert not worker.is_alive(), 'the PATCH hangs with the bus down'
    finally:
        rpc.cleanup()
    assert answer[0].status_int == 202, answer[0].text
    assert arqs.get(arq['uuid'])['state'] == 'BindStarted'


def test_sqlite_busy_past_its_timeout_is_503_contended(
        sqlite_database, monkeypatch, caplog):
    """SQLite's "database is locked" once the busy timeout is spent (the
    DBError cyborg.db.api makes of it): nothing was written, and another
    try may go through, as for a deadlock's victim; not a 500.
    """
    def busy(*args, **kwargs):
        raise db_exc.DBError('(sqlite3.OperationalError) database is locked')

    dp = seed.profile()
    monkeypatch.setattr(arqs, 'create_from_profile', busy)
    caplog.set_level(logging.INFO)
    r = _call(api_app.setup_app(), 'POST', '/v2/accelerator_requests',
              {'device_profile_name': dp['name']})
    fault = _fault_of_503(r, caplog, '1', '503, database contended: '
                          '(sqlite3.OperationalError) database is locked')
    assert fault == ('Concurrent requests held the locks this one needed; '
                     'it was rolled back and not carried out. Retry.')


def test_another_database_error_is_still_a_500(sqlite_database, monkeypatch,
                                               caplog):
    def broken(*args, **kwargs):
        raise db_exc.DBError('(sqlite3.OperationalError) disk I/O error')

    monkeypatch.setattr(arqs, 'list_', broken)
    r = _call(api_app.setup_app(), 'GET', '/v2/accelerator_requests')
    assert r.status_int == 500
    assert [rec for rec in caplog.records if rec.exc_info]
