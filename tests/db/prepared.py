# SPDX-License-Identifier: Apache-2.0
"""A check that a DB call stays on api.Session's fast path."""

import contextlib
from unittest import mock

import sqlalchemy as sa

from cyborg.db import api


@contextlib.contextmanager
def prepared_only():
    """Within it, a transaction whose statements leave the driver's
    connection for SQLAlchemy's (a Connection made on it: api.Session's
    slow path) fails the test: a bind's transactions run Prepared
    statements only. (The test's own reads run outside it.)
    """
    # Engines first: MariaDB's lone reads have one of their own, whose
    # first connection SQLAlchemy sets up through a Connection.
    api.read(api.Prepared(sa.select(sa.literal(1))))
    real = sa.engine.Connection.__init__

    def made(self, engine, connection=None, *args, **kwargs):
        if connection is not None:
            raise AssertionError('a statement went through SQLAlchemy')
        real(self, engine, connection, *args, **kwargs)
    with mock.patch.object(sa.engine.Connection, '__init__', made):
        yield
