# SPDX-License-Identifier: Apache-2.0
"""An engine is made on its first use without oslo.db's connection test,
so an API request during an outage is answered as one at once; services
and commands that should wait for the database at their start call
api.wait_until_reachable(), which honours [database] max_retries and
retry_interval as oslo.db's test did.
"""

from oslo_db import exception as db_exc
import pytest
import sqlalchemy as sa

from cyborg.conf import CONF
from cyborg.db import api
from cyborg.db import device_profiles
from tests.db import outage

WHO = api.Prepared(sa.select(sa.func.connection_id()))


def test_a_first_transaction_while_mariadb_is_down_is_an_outage(
        database, monkeypatch):
    if database.backend != 'mysql':
        pytest.skip('MariaDB only')
    api.configure(api._STATE[0])        # the engines made anew
    with outage.mariadb_down(monkeypatch):
        with pytest.raises(db_exc.DBConnectionError):
            with api.writer() as session:
                session.execute(WHO)
        with pytest.raises(db_exc.DBConnectionError):
            api.read(WHO)
    # The server back: the next ones work.
    device_profiles.create(uuid='9d8d2a2c-6e31-4b57-a0a3-7f5a3cbe0d11',
                           name='after', groups=[{'resources:FPGA': '1'}])
    assert api.read(WHO).scalar()


class _Engine:
    """An engine whose first `failures` connections fail as an outage."""

    def __init__(self, failures):
        self.failures = failures
        self.tries = 0

    def connect(self):
        self.tries += 1
        if self.tries <= self.failures:
            raise db_exc.DBConnectionError(Exception('refused'))
        return self

    def close(self):
        pass


@pytest.fixture
def waits(monkeypatch):
    slept = []
    monkeypatch.setattr(api.time, 'sleep', slept.append)
    CONF.set_override('retry_interval', 7, group='database')
    yield slept
    CONF.clear_override('retry_interval', group='database')
    CONF.clear_override('max_retries', group='database')


@pytest.mark.parametrize('tries, failures, slept', [
    (3, 0, []),                 # there at once
    (3, 2, [7, 7]),             # there at the third try
    (-1, 5, [7] * 5),           # -1: until it answers
    (0, 9, []),                 # 0: not tried at all
])
def test_waiting_for_the_database(monkeypatch, waits, tries, failures,
                                  slept):
    CONF.set_override('max_retries', tries, group='database')
    engine = _Engine(failures)
    monkeypatch.setattr(api, '_engine', lambda: engine)
    api.wait_until_reachable()
    assert waits == slept
    assert engine.tries == (0 if tries == 0 else failures + 1)


def test_waiting_ends_once_the_tries_are_spent(monkeypatch, waits, caplog):
    CONF.set_override('max_retries', 3, group='database')
    engine = _Engine(10)
    monkeypatch.setattr(api, '_engine', lambda: engine)
    with pytest.raises(db_exc.DBConnectionError):
        api.wait_until_reachable()
    assert engine.tries == 3 and waits == [7, 7]
    warned = [r.getMessage() for r in caplog.records
              if r.levelname == 'WARNING']
    assert len(warned) == 2
    assert '1 attempt(s) left' in warned[-1]
