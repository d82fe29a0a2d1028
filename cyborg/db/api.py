"""Engine and transactions (oslo.db enginefacade), plus list pagination.

All DB modules open transactions through `reader()`/`writer()`; one API
request is one writer transaction, so nothing is ever half-written.
"""

import contextlib
import contextvars
import sqlite3
import threading

from oslo_db.sqlalchemy import enginefacade
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.conf import CONF

_LOCK = threading.Lock()
_FACADE = None


class _Scope:
    """Holder enginefacade keeps its per-call transaction state on."""


def configure(connection=None):
    """(Re)create the engine facade, for `connection` or [database]."""
    global _FACADE
    with _LOCK:
        facade = enginefacade.transaction_context()
        facade.configure(
            connection=connection or CONF.database.connection,
            sqlite_fk=True,
            max_pool_size=CONF.database.max_pool_size,
            max_overflow=CONF.database.max_overflow,
            pool_timeout=CONF.database.pool_timeout)
        old, _FACADE = _FACADE, facade
    if old is not None:
        old.dispose_pool()


def _facade():
    if _FACADE is None:
        configure()
    return _FACADE


@sa.event.listens_for(sa.engine.Engine, 'connect')
def _sqlite_pragmas(dbapi_conn, record):
    """SQLite: write-ahead logging, so readers never wait for a writer and
    a commit costs one fsync of the log; and writers wait up to 30 s for
    the lock rather than 5 before giving up."""
    if isinstance(dbapi_conn, sqlite3.Connection):
        cursor = dbapi_conn.cursor()
        cursor.execute('PRAGMA journal_mode=WAL')
        cursor.execute('PRAGMA busy_timeout=30000')
        cursor.close()


# SQLite: a transaction that reads and then writes cannot upgrade its lock
# while another one holds the write lock; SQLite answers "database is locked"
# at once instead of waiting. So a writer begins IMMEDIATE, taking the write
# lock up front (others wait for it, up to the busy timeout), and two
# concurrent writers queue instead of one failing. oslo.db emits a plain
# BEGIN from an engine-level "begin" listener unless `in_transaction` is
# already set; class-level listeners run before it.
_WRITING = contextvars.ContextVar('cyborg_db_writing', default=False)


@sa.event.listens_for(sa.engine.Engine, 'begin')
def _sqlite_begin_immediate(conn):
    if (_WRITING.get() and conn.dialect.name == 'sqlite'
            and 'in_transaction' not in conn.info):
        conn.exec_driver_sql('BEGIN IMMEDIATE')
        conn.info['in_transaction'] = True


@contextlib.contextmanager
def _transaction(mode, writing):
    token = _WRITING.set(writing)
    try:
        with mode.using(_Scope()) as session:
            yield session
    finally:
        _WRITING.reset(token)


def reader():
    return _transaction(_facade().reader, False)


def writer():
    return _transaction(_facade().writer, True)


def get_engine():
    return _facade().writer.get_engine()


def dispose():
    global _FACADE
    with _LOCK:
        if _FACADE is not None:
            _FACADE.dispose_pool()
        _FACADE = None


def paginate(session, query, table, limit=None, marker=None):
    """Order by id and apply limit/marker (marker = uuid of the last item)."""
    if marker is not None:
        marker_id = session.execute(
            sa.select(table.c.id).where(table.c.uuid == marker)).scalar()
        if marker_id is None:
            raise exception.Invalid(
                reason='marker %s does not match any item' % marker)
        query = query.where(table.c.id > marker_id)
    query = query.order_by(table.c.id)
    if limit is not None:
        query = query.limit(limit)
    return query


def rows(result):
    return [dict(r) for r in result.mappings()]
