# SPDX-License-Identifier: Apache-2.0
"""A MariaDB server that is down, for tests of what a first use of an
engine does then.
"""

import contextlib

from oslo_db.sqlalchemy import engines
import pymysql.connections


@contextlib.contextmanager
def mariadb_down(monkeypatch):
    """PyMySQL's new connections refused while inside; and, from now on
    in the test, oslo.db's connection test failing the test if it ever
    waits to retry (a request held 10 × 10 s).
    """
    def refused(self, sock=None):
        raise pymysql.err.OperationalError(
            2003, "Can't connect to MySQL server (Connection refused)")

    def no_wait(seconds):
        raise AssertionError('a connection test retried')
    monkeypatch.setattr(engines.time, 'sleep', no_wait)
    with monkeypatch.context() as down:
        down.setattr(pymysql.connections.Connection, 'connect', refused)
        yield
