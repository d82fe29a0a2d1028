# SPDX-License-Identifier: Apache-2.0
"""Engine and transactions, plus list pagination.

All DB modules open transactions through `reader()`/`writer()`; one API
request is one writer transaction, so nothing is ever half-written. A
reader whose whole work is one query runs it with `read()`, which needs
no transaction for a consistent answer (on SQLite it has none). A
transaction is a Core connection (every query here is a Core statement, so
an ORM session would only add its own set-up and tear-down per call).

MariaDB and PostgreSQL engines come from oslo.db's enginefacade, with every
[database] option (max_retries and retry_interval are for the services'
and commands' start: wait_until_reachable()); on MariaDB read() has a
second one, whose connections are in autocommit (_autocommit_engine). A
SQLite file gets a pooled engine of its own: oslo.db gives SQLite files a
NullPool, i.e. a new connection per transaction, and opening one (the
file, the schema, the pragmas below) cost about 0.5 ms, more than the rest
of a lookup's database work. What a checkout and a checkin cost and
guarantee (fork, dead connections): cyborg.db.pooling.
"""

import contextvars
import fcntl
import functools
import itertools
import operator
import os
import random
import sqlite3
import threading
import time

from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import enginefacade
from oslo_db.sqlalchemy import exc_filters
from oslo_log import log
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.conf import CONF
from cyborg.db import pooling

LOG = log.getLogger(__name__)
_LOCK = threading.Lock()
# [connection URL, engine, engine of lone reads (_lone_engine)], each
# engine None until first used.
_STATE = None


class NotConfigured(Exception):
    """No database to use: [database] connection is not set, is not a
    database URL, names a SQLite file that is not there or a driver that is
    not installed (MissingDriver). The message says which, in one line.
    """


class MissingDriver(NotConfigured):
    """[database] connection names a Python DB driver that is not
    installed (e.g. mysql+pymysql:// without PyMySQL).
    """


# Backend (SQLAlchemy's name) -> our extra that installs its driver, and the
# URL prefix that driver takes.
_EXTRAS = {
    'mysql': ('mysql', 'mysql+pymysql://'),
    'postgresql': ('postgresql', 'postgresql+psycopg2://'),
}


def check_driver(url):
    """NotConfigured (one line, no password) unless SQLAlchemy can load the
    dialect and the Python driver `url` names.
    """
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        raise NotConfigured(
            '[database] connection is not a database URL (expected e.g. '
            'mysql+pymysql://USER:PASSWORD@HOST/cyborg?charset=utf8mb4)')
    try:
        dialect = parsed.get_dialect()
    except sa.exc.NoSuchModuleError:
        raise NotConfigured(
            '[database] connection names %s, which SQLAlchemy does not know '
            '(use mysql+pymysql://, postgresql+psycopg2:// or sqlite:///)'
            % parsed.drivername)
    try:
        dialect.import_dbapi()
    except ImportError as e:
        module = e.name or str(e)
        backend = parsed.get_backend_name()
        extra, prefix = _EXTRAS.get(backend, (None, None))
        if extra is None:
            hint = 'install the package that provides it'
        elif parsed.drivername == prefix[:-3]:
            hint = 'install it with: pip install "cyborg-gpu[%s]"' % extra
        else:
            hint = ('use %s and install its driver with: pip install '
                    '"cyborg-gpu[%s]"' % (prefix, extra))
        raise MissingDriver(
            '[database] connection uses %s, whose Python driver (module %s) '
            'is not installed: %s' % (parsed.drivername, module, hint))


def require_connection(existing=False):
    """[database] connection, or NotConfigured saying what is missing.

    existing=True: a SQLite file it names must exist already (a check or
    a read must not leave an empty database behind; only `db sync` may
    create one).
    """
    url = CONF.database.connection
    if not url:
        files = list(CONF.config_file or [])
        raise NotConfigured(
            '[database] connection is not set in %s' % ', '.join(files)
            if files else
            '[database] connection is not set: no configuration file was '
            'read (pass --config-file /etc/cyborg/cyborg.conf)')
    if existing:
        parsed = sa.engine.make_url(url)
        path = parsed.database
        if (parsed.get_backend_name() == 'sqlite'
                and path not in (None, '', ':memory:')
                and 'mode=memory' not in str(parsed)
                and not os.path.exists(path)):
            raise NotConfigured(
                '[database] connection names the SQLite file %s, which does '
                'not exist (create it with "cyborg-manage db sync")'
                % os.path.abspath(path))
    check_driver(url)
    return url


def configure(connection=None):
    """Point the DB layer at `connection` or [database] connection; the
    engine is created on first use. NotConfigured when there is neither.
    """
    global _STATE
    if connection:
        check_driver(connection)
    else:
        connection = require_connection()
    with _LOCK:
        old, _STATE = _STATE, [connection, None, None]
    _dispose(old)


def _engine():
    state = _STATE
    if state is None:
        configure()
        state = _STATE
    engine = state[1]
    if engine is None:
        with _LOCK:
            if state[1] is None:
                state[1] = _create_engine(state[0])
            engine = state[1]
    return engine


def _create_engine(url):
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() == 'sqlite' and parsed.database not in (
            None, '', ':memory:') and 'mode=memory' not in str(parsed):
        return _sqlite_file_engine(parsed)
    engine = _oslo_engine(url)
    pooling.guard(engine, ping=True)
    return engine


def _lone_engine():
    """The engine read() and writer(lone=True) take their connection
    from: on MariaDB (PyMySQL) one of its own (_autocommit_engine),
    created on first use and disposed of with the main one; elsewhere the
    main engine.
    """
    state = _STATE
    if state is not None and state[2] is not None:
        return state[2]
    engine = _engine()
    state = _STATE
    with _LOCK:
        if state[2] is None:
            state[2] = (_autocommit_engine(state[0])
                        if engine.dialect.driver == 'pymysql' else engine)
        return state[2]


def _autocommit_engine(url):
    """An engine for MariaDB's lone reads and lone writers, whose
    connections are always in autocommit: one statement there is a
    consistent read of its own, at any isolation level, and needs no
    transaction; a lone writer's statement commits on its own. In a
    transaction, the implicit one InnoDB begins at the statement, it
    needs a COMMIT, one more round trip; and switching a shared connection
    in and out of autocommit is a round trip each way (SET AUTOCOMMIT),
    so such connections stay apart, in a pool of their own.

    oslo.db builds it as the main engine: the same URL, settings, session
    variables, error translation and pool sizes ([database]
    max_pool_size, max_overflow, pool_timeout, connection_recycle_time).
    So a process may hold up to twice the pool's connections to MariaDB,
    one pool of each; bounding both by one limit would cost every
    checkout a shared count, and readers would wait for connections
    while idle ones sat in the other pool.

    PyMySQL opens its connections in autocommit when asked at connect
    (the server's default, so nothing is sent); the pool is a
    pooling.Pool, so that read() checks a connection out and in with
    take() and give_back(), guard()'s checks included, which reset
    nothing (a reset would be a ROLLBACK, another round trip).
    """
    engine = _oslo_engine(url)

    @sa.event.listens_for(engine, 'do_connect')
    def autocommit(dialect, record, cargs, cparams):
        cparams['autocommit'] = True

    engine.pool = pooling.Pool.replacing(engine.pool)
    pooling.guard(engine, ping=True)
    return engine


def _oslo_engine(url):
    """A MariaDB or PostgreSQL engine of oslo.db's, with [database]'s
    settings.

    Made on its first use, which may be an API request during an outage:
    oslo.db must not test the engine by connecting ([database]
    max_retries attempts, retry_interval apart: 10 × 10 s by default,
    holding the request past any WSGI server's timeout, and _LOCK). Its
    first statement connects, and fails as an outage if it must (the
    API's 503). Services and commands that should wait for the database
    at their start call wait_until_reachable(), which honours those two
    options.
    """
    facade = enginefacade.transaction_context()
    facade.configure(
        max_retries=0,
        connection=url,
        sqlite_fk=True,
        max_pool_size=CONF.database.max_pool_size,
        max_overflow=CONF.database.max_overflow,
        pool_timeout=CONF.database.pool_timeout,
        # oslo.db's checkin listener yields to other greenthreads
        # (time.sleep(0)); nothing here runs on eventlet.
        thread_checkin=False)
    return facade.writer.get_engine()


def _sqlite_file_engine(url):
    """A pooled SQLite engine, with oslo.db's error translation
    (DBDuplicateEntry, DBReferenceError, ...).
    """
    engine = sa.create_engine(
        url, poolclass=pooling.Pool,
        pool_size=CONF.database.max_pool_size or 5,
        max_overflow=CONF.database.max_overflow or 0,
        pool_timeout=CONF.database.pool_timeout or 30)
    exc_filters.register_engine(engine)
    engine.cyborg_write_lock = _WriteLock(url.database)
    synchronous = CONF.database.sqlite_synchronous

    @sa.event.listens_for(engine, 'connect')
    def connect(dbapi_conn, record):
        # The driver's own transaction handling is off; `begin` below
        # starts every transaction, reads included (SQLAlchemy's recipe
        # for pysqlite).
        dbapi_conn.isolation_level = None
        dbapi_conn.execute('PRAGMA foreign_keys=ON')
        if not synchronous:
            dbapi_conn.execute('PRAGMA synchronous=OFF')

    @sa.event.listens_for(engine, 'begin')
    def begin(conn):
        if 'in_transaction' not in conn.info:
            # A deferred BEGIN takes no lock and cannot meet a busy
            # database, so it goes straight to the driver, past
            # SQLAlchemy's statement machinery (a tenth of a lookup).
            conn.connection.driver_connection.execute('BEGIN')
            conn.info['in_transaction'] = True

    @sa.event.listens_for(engine, 'commit')
    @sa.event.listens_for(engine, 'rollback')
    def end(conn):
        conn.info.pop('in_transaction', None)

    pooling.guard(engine, ping=False)
    return engine


class _WriteLock:
    """Writers of one SQLite file take turns here before BEGIN IMMEDIATE:
    threads on a lock, processes on an flock() of a file beside the
    database. SQLite lets one writer in at a time and one that finds the
    lock taken polls for it, sleeping up to 100 ms between tries: under
    concurrent binds those sleeps, not the work, made the latency. Here
    the next writer starts the moment the previous one is done.
    """

    def __init__(self, database):
        self._threads = threading.RLock()
        self._path = database + '.writelock'
        self._depth = 0              # only touched by the owning thread
        self._fd = self._pid = None

    def __enter__(self):
        self._threads.acquire()
        if self._depth == 0:
            try:
                fd = self._file()
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                self._threads.release()
                raise
        self._depth += 1

    def __exit__(self, *exc_info):
        self._depth -= 1
        try:
            if self._depth == 0 and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def _file(self):
        # A forked child opens its own: an inherited descriptor would share
        # the parent's lock instead of contending for it.
        if self._pid != os.getpid():
            self._pid = os.getpid()
            try:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError:
                self._fd = None      # a read-only directory: threads only
        return self._fd


@sa.event.listens_for(sa.engine.Engine, 'connect')
def _sqlite_pragmas(dbapi_conn, record):
    """SQLite: write-ahead logging, so readers never wait for a writer and
    a commit costs one fsync of the log; and writers wait up to 30 s for
    the lock rather than 5 before giving up. The wait is set first: the
    switch to WAL (a no-op once the file is in WAL) takes a lock too.
    """
    if isinstance(dbapi_conn, sqlite3.Connection):
        cursor = dbapi_conn.cursor()
        cursor.execute('PRAGMA busy_timeout=30000')
        cursor.execute('PRAGMA journal_mode=WAL')
        cursor.close()


# SQLite: a transaction that reads and then writes cannot upgrade its lock
# while another one holds the write lock; SQLite answers "database is locked"
# at once instead of waiting. So a writer begins IMMEDIATE, taking the write
# lock up front (others wait for it, up to the busy timeout), and two
# concurrent writers queue instead of one failing. The engines' own "begin"
# listeners emit a plain BEGIN unless `in_transaction` is already set;
# class-level listeners run before them.
_WRITING = contextvars.ContextVar('cyborg_db_writing', default=False)


@sa.event.listens_for(sa.engine.Engine, 'begin')
def _sqlite_begin_immediate(conn):
    if (_WRITING.get() and conn.dialect.name == 'sqlite'
            and 'in_transaction' not in conn.info):
        # Straight to the driver (SQLAlchemy's statement machinery was a
        # tenth of a create); a failure, such as "database is locked" once
        # the busy timeout is spent, is the DBError oslo.db would make of
        # it, which callers retry on.
        try:
            conn.connection.driver_connection.execute('BEGIN IMMEDIATE')
        except sqlite3.Error as e:
            raise db_exc.DBError(e) from e
        conn.info['in_transaction'] = True


class CommitOutcomeUnknown(db_exc.DBConnectionError):
    """The connection was lost while a writer's COMMIT was on its way: the
    server may have applied the transaction or not, and nothing here can
    tell which. A DBConnectionError still (an outage), worded for what it
    is. (A reader's lost COMMIT is a plain DBConnectionError.)
    """


class Prepared:
    """A Core statement compiled once per database dialect and run on the
    driver's own cursor, past SQLAlchemy's execution layer (events,
    execution context, result wrapping: six to ten times the driver's
    own cost for a one-row read). Bind and result types are processed as
    SQLAlchemy would (SQLite's date strings come back as datetimes);
    driver errors are translated by the same handlers (oslo.db's: a
    DBDuplicateEntry, a DBConnectionError) that an engine execution runs.

    Column defaults and onupdate values that are a value or a Python
    function (created_at, updated_at) are filled in here, as SQLAlchemy
    would. Statements SQLAlchemy must expand or fill in otherwise per
    execution (expanding IN lists, other defaults it computes in Python)
    run through SQLAlchemy, in the same transaction, and so does every
    later statement of that transaction.
    """

    def __init__(self, statement):
        self.statement = statement
        self._compiled = {}

    def compiled(self, dialect, keys):
        """(sql, positional names or None, bind processors, result
        processors, defaults to fill in) or None for SQLAlchemy's path.
        """
        try:
            return self._compiled[dialect, keys]
        except KeyError:
            pass
        compiled = self.statement.compile(
            dialect=dialect, column_keys=list(keys) if keys else None)
        plan = _plan(compiled, dialect)
        self._compiled[dialect, keys] = plan
        return plan


def _plan(compiled, dialect):
    if any(b.expanding for b in compiled.binds.values()) or \
            compiled.literal_execute_params or compiled.post_compile_params:
        return None
    # The values SQLAlchemy computes in Python per execution: an INSERT's
    # defaults of the columns not given, an UPDATE's onupdate (every
    # table's updated_at).
    defaults = []
    for column, default in [(c, c.default) for c in compiled.insert_prefetch] \
            + [(c, c.onupdate) for c in compiled.update_prefetch]:
        if default is None or not (default.is_scalar or default.is_callable):
            return None
        defaults.append((column.key, default.is_callable, default.arg))
    results = tuple(
        (i, process) for i, process in enumerate(
            entry[3]._cached_result_processor(dialect, None)
            for entry in compiled._result_columns) if process is not None)
    positions = compiled.positiontup if compiled.positional else None
    return (compiled.string, positions, compiled._bind_processors, results,
            tuple(defaults), compiled,
            None if defaults else _direct(compiled, positions))


def _direct(compiled, positions):
    """args(params), the driver's arguments taken straight from the
    caller's parameters, for a statement whose every bind is a parameter
    the caller gives under its own name, passed to the driver as given
    (no value of its own, no bind processor, no escaped name); else None
    (_args(), SQLAlchemy's construct_params() and the processors, for
    the rest). What construct_params() would make of such parameters is
    the same values; a missing one is a KeyError here, for which _args()
    then raises SQLAlchemy's own error.
    """
    if compiled.escaped_bind_names or compiled._bind_processors:
        return None
    for bind, name in compiled.bind_names.items():
        if (not bind.required or bind.callable is not None
                or bind.key != name):
            return None
    if positions is None:
        # Named parameters (psycopg2, PyMySQL): a mapping of the binds
        # alone (PyMySQL escapes every value it is given).
        return functools.partial(_named, tuple(set(
            compiled.bind_names.values())))
    if len(positions) == 1:
        return functools.partial(_one, positions[0])
    if not positions:
        return _none
    return operator.itemgetter(*positions)


def _named(names, params):
    return {name: params[name] for name in names}


def _one(name, params):
    return (params[name],)


def _none(params):
    return ()


def _processed(row, results):
    row = list(row)
    for i, process in results:
        row[i] = process(row[i])
    return row


def _keys(prepared, params):
    """The column keys a Prepared statement is compiled for: an INSERT's
    depend on the values given.
    """
    if not prepared.statement.is_insert:
        return None
    first = params[0] if isinstance(params, list) else params
    return tuple(sorted(first or {}))


def _args(compiled, positions, binds, defaults, params):
    values = compiled.construct_params(params)
    for key, is_callable, arg in defaults:
        if values.get(key) is None:
            values[key] = arg(None) if is_callable else arg
    for key, process in binds.items():
        if key in values:
            values[key] = process(values[key])
    if positions is None:
        return values
    return tuple(values[k] for k in positions)


def _query(dialect, dbapi_conn, plan, params, stored, failed):
    """The Result of a Prepared statement's plan run on the driver's
    connection; failed(error, cursor) raises what a driver error is.
    """
    sql, positions, binds, results, defaults, compiled, direct = plan
    many = isinstance(params, list)
    batch = params if many else [params]
    args = None
    if direct is not None:
        try:
            args = [direct(p or {}) for p in batch]
        except KeyError:
            pass
    if args is None:
        args = [_args(compiled, positions, binds, defaults, p or {})
                for p in batch]
    cursor = None
    try:
        cursor = dbapi_conn.cursor()
        if many and len(args) > 1:
            cursor.executemany(sql, args)
        else:
            cursor.execute(sql, args[0])
        rows = cursor.fetchall() if cursor.description else []
        rowcount = cursor.rowcount
    except dialect.loaded_dbapi.Error as e:
        failed(e, cursor)
    finally:
        if cursor is not None:
            cursor.close()
    names = _Names(compiled)
    if stored:
        result = Result(names, rows, rowcount)
        result.process = (lambda row: _processed(row, results)) \
            if results else tuple
        return result
    if results and rows:
        rows = [_processed(row, results) for row in rows]
    return Result(names, rows, rowcount)


class _Names:
    """A compiled statement's result column names, listed only when
    asked for (most callers unpack rows by position).
    """

    __slots__ = ('_compiled',)

    def __init__(self, compiled):
        self._compiled = compiled

    def __iter__(self):
        return (entry[0] for entry in self._compiled._result_columns)


class Result:
    """The rows of a Prepared statement: what the callers use of
    SQLAlchemy's result (first, one, all, scalar, mappings, keys,
    iteration, rowcount).
    """

    def __init__(self, names, rows, rowcount):
        self._names = names
        self._rows = rows
        self.rowcount = rowcount

    def keys(self):
        return list(self._names)

    def __iter__(self):
        return iter(self._rows)

    def all(self):
        return list(self._rows)

    def first(self):
        return self._rows[0] if self._rows else None

    def one(self):
        if len(self._rows) != 1:
            raise sa.exc.NoResultFound('expected one row, found %d'
                                       % len(self._rows)) \
                if not self._rows else sa.exc.MultipleResultsFound(
                    'expected one row, found %d' % len(self._rows))
        return self._rows[0]

    def scalar(self):
        return self._rows[0][0] if self._rows else None

    def mappings(self):
        names = list(self._names)
        return _Mappings([dict(zip(names, r)) for r in self._rows])


class _Mappings(list):
    def all(self):
        return list(self)

    def first(self):
        return self[0] if self else None


class Session:
    """One transaction on one pooled connection: Prepared statements go
    to the driver, anything else through a SQLAlchemy Connection on the
    same connection (made when first needed). What reader()/writer()
    yield.
    """

    def __init__(self, engine, writing, lone=False):
        self.engine = engine
        self.dialect = engine.dialect
        self._sa = None
        self._done = False
        self._autocommit = False
        # A lone writer (writer(lone=True)) runs one statement, which
        # commits on its own (_autocommitting): SQLite's connections are
        # in autocommit already (no BEGIN IMMEDIATE is sent), MariaDB's
        # lone engine's always, PostgreSQL's for the statement.
        self._lone = lone
        self._statements = 0
        self._autocommitting = lone
        if lone:
            # In autocommit from the start (SQLite's file engine, MariaDB's
            # lone engine), a lone writer needs nothing of the connection
            # but its statement: taken as read() takes one (pooling.take),
            # without SQLAlchemy's proxy.
            record = _take(engine)
            if record is not None:
                self._raw = _Taken(record)
                return
        self._raw = _proxied(engine)
        try:
            if self.dialect.name == 'sqlite':
                if not lone:
                    self._raw.driver_connection.execute(
                        'BEGIN IMMEDIATE' if writing else 'BEGIN')
                    self._raw.info['in_transaction'] = True
            elif self.dialect.driver == 'psycopg2':
                try:
                    if self._autocommitting:
                        self._autocommit = _autocommit_lone(self._raw)
                    elif writing:
                        _no_autocommit(self._raw)
                    else:
                        self._autocommit = _autocommit_reads(self._raw)
                except self.dialect.loaded_dbapi.Error as e:
                    self._failed(e, None)
        except sqlite3.Error as e:
            try:
                if self.dialect.is_disconnect(
                        e, self._raw.driver_connection, None):
                    # Closed underneath: an outage, as read() makes it;
                    # _failed() invalidates the connection, so the pool
                    # opens a new one in its place (its rollback on
                    # return would fail on this one).
                    self._failed(e, None)
            finally:
                self._raw.close()
            # "database is locked" once the busy timeout is spent: the
            # DBError oslo.db would make of it, which callers retry on.
            raise db_exc.DBError(e) from e
        except BaseException:
            self._raw.close()
            raise

    @property
    def insert_returning(self):
        """Whether an INSERT here can give back the rows it wrote
        (INSERT ... RETURNING: SQLite 3.35+, PostgreSQL, MariaDB 10.5+;
        not MySQL), so that a create needs no second statement to read
        its row's id and timestamps. The dialect knows from the server's
        version, read when the engine first connected.
        """
        return self.dialect.insert_returning

    @property
    def delete_returning(self):
        """Whether a DELETE here can give back the rows it deleted
        (SQLite 3.35+, PostgreSQL, MariaDB; not MySQL).
        """
        return self.dialect.delete_returning

    def execute(self, statement, params=None):
        if self._lone:
            return self._lone_statement(self._execute, statement, params)
        return self._execute(statement, params)

    def _execute(self, statement, params):
        if self._sa is None and isinstance(statement, Prepared):
            return self._run(statement, params)
        if isinstance(statement, Prepared):
            statement = statement.statement
        if self._sa is None:
            # Its autobegin finds the transaction begun (SQLite's listeners
            # see `in_transaction`; the other drivers begin implicitly).
            self._sa = self._connection()
        return self._sa.execute(statement, params)

    def _connection(self):
        """A SQLAlchemy Connection on the session's pooled connection,
        for what it runs through SQLAlchemy. A lone writer's taken
        connection is given back for one checked out through SQLAlchemy's
        proxy first: nothing has run on it yet.
        """
        if type(self._raw) is _Taken:
            self._raw.close()
            self._raw = _proxied(self.engine)
        return sa.engine.Connection(self.engine, self._raw)

    def _lone_statement(self, run, statement, params):
        """A lone writer's statement: its only one, which commits on its
        own where it runs in autocommit.
        """
        self._statements += 1
        if self._statements > 1:
            raise RuntimeError('a lone writer runs one statement: each '
                               'commits on its own')
        try:
            return run(statement, params)
        except CommitOutcomeUnknown:
            raise
        except db_exc.DBConnectionError as lost:
            if not self._autocommitting:
                raise
            # Lost while the statement was on its way: it may have been
            # applied, as a lost COMMIT may.
            raise CommitOutcomeUnknown(lost.inner_exception) from lost

    def execute_stored(self, statement, params=None):
        """(rows, process): the rows of a query as tuples of the values
        the driver gives (hashable, and the same for the same stored
        values), and process(row) the row execute() gives for one.
        """
        if self._lone:
            return self._lone_statement(self._execute_stored, statement,
                                        params)
        return self._execute_stored(statement, params)

    def _execute_stored(self, statement, params):
        if self._sa is None and isinstance(statement, Prepared):
            result = self._run(statement, params, stored=True)
            if isinstance(result, Result):
                return result._rows, result.process
            rows = result.all()
        else:
            rows = self._execute(statement, params).all()
        return [tuple(r) for r in rows], tuple

    def _run(self, prepared, params, stored=False):
        plan = prepared.compiled(self.dialect, _keys(prepared, params))
        if plan is None:
            self._sa = self._connection()
            return self._sa.execute(prepared.statement, params)
        return _query(self.dialect, self._raw.driver_connection, plan,
                      params, stored, self._failed)

    def _end_autocommit(self):
        # Before the connection goes back to the pool: the next session
        # on it may be a writer.
        if self._autocommit:
            self._autocommit = False
            if not self._raw.is_valid:
                return                  # thrown away, never handed out
            try:
                self._raw.driver_connection.autocommit = False
            except self.dialect.loaded_dbapi.Error as e:
                self._raw.invalidate(e)

    def _failed(self, error, cursor):
        _raise_driver_error(self.engine, error, cursor, self._raw)

    def _end(self, commit):
        self._done = True
        if self._sa is not None:
            # Its commit or rollback runs the engine's events (SQLite's
            # listeners drop `in_transaction`) and translates errors.
            try:
                if commit:
                    self._sa.commit()
                else:
                    self._sa.rollback()
            finally:
                self._raw.info.pop('in_transaction', None)
                self._end_autocommit()
                self._sa.close()
            return
        ended = False
        try:
            if self._autocommitting:
                # Its statement committed on its own (autocommit); there
                # is no transaction to end.
                ended = self._raw.is_valid
            elif self._raw.is_valid:
                if commit:
                    self._raw.driver_connection.commit()
                else:
                    self._raw.driver_connection.rollback()
                ended = True
        except self.dialect.loaded_dbapi.Error as e:
            if commit:
                self._failed(e, None)
        finally:
            self._raw.info.pop('in_transaction', None)
            self._end_autocommit()
            # A transaction ended here needs no reset on return: the
            # pool's rollback would be one more round trip to MariaDB per
            # transaction (what SQLAlchemy's own Connection.close() skips
            # the same way).
            self._raw._close_special(transaction_reset=ended)


class _Taken:
    """A connection from pooling.take() as a Session uses a pooled
    connection of SQLAlchemy's (its proxy's driver_connection, info,
    is_valid, invalidate and check-in), for a lone writer: nothing is
    reset on its return, where no transaction is ever open.

    It is given back once: after that (Session._connection gives it back
    before checking one out through the proxy, which may fail) it is no
    longer valid, and its info is not the pool record's, which another
    session may hold by then.
    """

    __slots__ = ('record',)

    def __init__(self, record):
        self.record = record

    @property
    def driver_connection(self):
        return self.record.dbapi_connection

    @property
    def info(self):
        return self.record.info if self.record is not None else {}

    @property
    def is_valid(self):
        return self.record is not None and \
            self.record.dbapi_connection is not None

    def invalidate(self, e=None):
        self.record.invalidate(e)

    def close(self):
        record, self.record = self.record, None
        if record is not None:
            pooling.give_back(record)

    def _close_special(self, transaction_reset=False):
        self.close()


def _autocommit_reads(raw):
    """Put a psycopg2 connection in autocommit for a reader and return
    True, when its transactions are READ COMMITTED (PostgreSQL's
    default); else leave it as it is and return False.

    At READ COMMITTED every statement takes a snapshot of its own, inside
    a transaction or not, and a reader takes no locks: a transaction
    around its SELECTs changes nothing it sees, and costs two round trips
    of its own (psycopg2 sends BEGIN before the first statement, and the
    session a COMMIT). At REPEATABLE READ or SERIALIZABLE (an operator's
    default_transaction_isolation, or the connection's) its statements
    share one snapshot, so readers keep their transaction there. The
    level is read once per connection.
    """
    conn = raw.driver_connection
    if conn.get_transaction_status() != _PG_IDLE:
        return False
    conn.autocommit = True
    try:
        level = raw.info.get('cyborg_isolation')
        if level is None:
            cursor = conn.cursor()
            try:
                cursor.execute('SHOW transaction_isolation')
                level = raw.info['cyborg_isolation'] = cursor.fetchone()[0]
            finally:
                cursor.close()
    except BaseException:
        _no_autocommit(raw)
        raise
    if level != 'read committed':
        conn.autocommit = False
        return False
    return True


def _autocommit_lone(raw):
    """Put a lone writer's psycopg2 connection in autocommit and return
    True (when no transaction is open on it, as after any session): its
    one statement commits on its own, without the BEGIN psycopg2 sends
    before the first statement of a transaction and the COMMIT, two
    round trips. One statement is atomic at every isolation level.
    """
    conn = raw.driver_connection
    if conn.get_transaction_status() != _PG_IDLE:
        raise RuntimeError('a lone writer needs a connection outside any '
                           'transaction')
    conn.autocommit = True
    return True


def _no_autocommit(raw):
    """A writer's psycopg2 connection in transactions, whatever a session
    before it left (readers put it back; this is the guarantee).
    """
    try:
        if raw.driver_connection.autocommit:
            raw.driver_connection.autocommit = False
    except Exception:
        # A dead connection: the statement that follows fails and is
        # handled as a lost connection.
        pass


# psycopg2.extensions.TRANSACTION_STATUS_IDLE: no transaction open.
_PG_IDLE = 0


class _Writer:
    """writer()'s context, a plain class as _Reader is: its turn on the
    engine's write lock (SQLite's file engines have one), a writing
    Session, committed when the block ends without an exception and
    rolled back otherwise; the writing flag up meanwhile.
    """

    __slots__ = ('_lone', '_lock', '_session', '_token')

    def __init__(self, lone):
        self._lone = lone

    def __enter__(self):
        engine = _lone_engine() if self._lone else _engine()
        lock = getattr(engine, 'cyborg_write_lock', None)
        if lock is not None:
            lock.__enter__()
        self._lock = lock
        self._token = _WRITING.set(True)
        try:
            self._session = Session(engine, True, self._lone)
        except BaseException:
            self._release()
            raise
        return self._session

    def __exit__(self, exc_type, exc, traceback):
        try:
            if exc_type is not None:
                self._session._end(commit=False)
                return False
            try:
                self._session._end(commit=True)
            except db_exc.DBConnectionError as lost:
                # Lost during the COMMIT: applied or not, nobody here can
                # tell.
                raise CommitOutcomeUnknown(lost.inner_exception) from lost
        finally:
            self._release()

    def _release(self):
        try:
            if self._lock is not None:
                self._lock.__exit__(None, None, None)
        finally:
            _WRITING.reset(self._token)


class _Reader:
    """reader()'s context: a reading Session, committed when the block
    ends without an exception and rolled back otherwise, in a plain class
    (a generator's context manager, and the lock a reader does not take,
    were a tenth of a reader's own cost).
    """

    __slots__ = ('_session', '_token')

    def __enter__(self):
        engine = _engine()
        # A reader inside a writer's context must not begin as a writer;
        # elsewhere the flag is already down.
        self._token = _WRITING.set(False) if _WRITING.get() else None
        try:
            self._session = Session(engine, False)
        except BaseException:
            self._restore()
            raise
        return self._session

    def __exit__(self, exc_type, exc, traceback):
        try:
            # A lost COMMIT is a plain outage: a reader changed nothing.
            self._session._end(commit=exc_type is None)
        finally:
            self._restore()

    def _restore(self):
        if self._token is not None:
            _WRITING.reset(self._token)


def reader():
    return _Reader()


def writer(lone=False):
    """A write transaction's Session, committed when the block ends
    without an exception, rolled back otherwise.

    lone=True: the caller runs one statement in it (a second raises
    RuntimeError). That statement then runs in autocommit, where it
    commits on its own: one round trip, where a transaction's statement
    and COMMIT were two on MariaDB (on the connections lone reads use,
    _autocommit_engine) and three on PostgreSQL (BEGIN, the statement,
    COMMIT); on SQLite one call into the driver instead of three (BEGIN
    IMMEDIATE, the statement, COMMIT). It is as atomic and as durable as
    in a transaction (SQLite runs a statement outside one in a transaction
    of its own, committed, with its fsync, when the statement ends); only
    a connection lost while it is on its way leaves its outcome unknown
    (CommitOutcomeUnknown), as a lost COMMIT does. On SQLite it still
    takes its turn on the engine's _WriteLock first, as every writer
    does, and a write lock held by another program is waited for as a
    BEGIN IMMEDIATE waits for it (the busy timeout).
    """
    return _Writer(lone)


def retrying(worth_retrying, attempts, first_wait, jitter=False):
    """A decorator that runs a function again when it raises an error
    worth_retrying(error) accepts: `attempts` runs at most, waiting
    first_wait seconds before the second and twice as long before each
    next (with jitter, a random wait up to that), then the last error is
    raised. It logs nothing: the caller says once what the error means
    (an outage would otherwise print a traceback per call).
    """
    def decorate(fn):
        @functools.wraps(fn)
        def retried(*args, **kwargs):
            wait = first_wait
            for attempt in range(attempts):
                try:
                    return fn(*args, **kwargs)
                except Exception as e:
                    if attempt == attempts - 1 or not worth_retrying(e):
                        raise
                time.sleep(random.uniform(0, wait) if jitter else wait)
                wait *= 2
        return retried
    return decorate


def lock_wait_timed_out(exc):
    """Whether `exc` is MariaDB's lock wait that timed out (its 1205, a
    DBDeadlock to oslo.db): it has waited innodb_lock_wait_timeout (50 s
    by default) already, and run again would wait as long again.
    """
    return (isinstance(exc, db_exc.DBDeadlock)
            and 'Lock wait timeout' in str(exc))


def sqlite_busy(exc):
    """Whether `exc` is SQLite's "database is locked" (the DBError made of
    it here). Our writers take the write lock with BEGIN IMMEDIATE, so it
    comes once the busy timeout (30 s) is spent waiting for that lock,
    not at once as a deferred transaction's upgrade would get it.
    """
    return type(exc) is db_exc.DBError and 'database is locked' in str(exc)


def waited_out(exc):
    """Whether `exc` ends a wait for another transaction's locks that
    lasted the database's whole timeout (a MariaDB lock wait that timed
    out, a busy SQLite): running the statement again at once would most
    likely wait as long again.
    """
    return lock_wait_timed_out(exc) or sqlite_busy(exc)


def deadlocked(exc):
    """Whether `exc` made its transaction a deadlock's victim (below);
    not a lock wait that timed out.
    """
    return isinstance(exc, db_exc.DBDeadlock) and not lock_wait_timed_out(
        exc)


def contended(exc):
    """Whether the database gave a statement up because of other
    transactions: a deadlock's victim or a lock wait that timed out
    (oslo.db's DBDeadlock), or SQLite's "database is locked" once the busy
    timeout is spent (sqlite_busy). Nothing was carried out, and a later
    run may go through.
    """
    return isinstance(exc, db_exc.DBDeadlock) or sqlite_busy(exc)


# A write the database chose as a deadlock's victim: InnoDB and PostgreSQL
# roll the victim's transaction back whole and let the other one go on
# (MariaDB's error 1213, PostgreSQL's 40P01, both oslo.db's DBDeadlock),
# so running it again is safe and, once the other has committed, goes
# through. Two writers that lock the same rows in opposite orders meet
# this: on MariaDB, a profile's DELETE and the ARQ creates of that profile
# (the profile's row and the ARQ table's index, locked by each).
# Six runs, the waits random up to 20, 40, ... 320 ms so that two victims
# do not meet again; what still deadlocks after that is the API's 503.
retry_on_deadlock = retrying(deadlocked, attempts=6, first_wait=0.02,
                             jitter=True)


def read(statement, params=None):
    """The Result of a query that is a reader's only statement: what
    `with reader() as s: s.execute(statement, params)` gives, every row
    fetched. A reader of several statements keeps reader(): they must
    all see one state of the database, which only a transaction gives.

    One statement needs no transaction around it for that. On a SQLite
    file it runs on its own, in the read transaction SQLite gives every
    statement outside one (its own snapshot, as a BEGIN would take at the
    statement), on a pooled connection checked out without SQLAlchemy's
    proxy (pooling.take): BEGIN, COMMIT and the proxy were more than
    half of a lookup's database work. On MariaDB it runs the same way on
    a connection in autocommit, of a pool kept for such reads
    (_autocommit_engine): one round trip, where a reader's SELECT and
    COMMIT were two; InnoDB reads a statement outside a transaction from
    a snapshot of its own, which has everything committed before it
    began. Elsewhere, and for a statement that SQLAlchemy must expand
    (Prepared), it runs in a reader() (PostgreSQL's readers at READ
    COMMITTED run each statement on its own already).
    """
    return _read(statement, params, False)


def read_stored(statement, params=None):
    """read() as Session.execute_stored() gives it: (rows, process)."""
    return _read(statement, params, True)


def _read(statement, params, stored):
    if isinstance(statement, Prepared):
        if not statement.statement.is_select:
            raise ValueError('read() runs queries only')
        engine = _lone_engine()
        plan = statement.compiled(engine.dialect, None)
        if plan is not None:
            record = _take(engine)
            if record is not None:
                try:
                    result = _query(
                        engine.dialect, record.dbapi_connection, plan,
                        params, stored, functools.partial(
                            _raise_driver_error, engine, connection=record))
                finally:
                    pooling.give_back(record)
                return (result._rows, result.process) if stored else result
    elif not statement.is_select:
        raise ValueError('read() runs queries only')
    with reader() as session:
        if stored:
            return session.execute_stored(statement, params)
        result = session.execute(statement, params)
    if isinstance(result, Result):
        return result
    return Result(list(result.keys()), result.all(), result.rowcount)


def _take(engine):
    """pooling.take(), its driver's errors (a database that cannot be
    opened) translated as a Session's are.
    """
    try:
        return pooling.take(engine)
    except engine.dialect.loaded_dbapi.Error as e:
        _raise_driver_error(engine, e)


def _proxied(engine):
    """A pooled connection checked out through SQLAlchemy's proxy
    (engine.raw_connection()), its driver's errors translated as _take()
    translates them.
    """
    try:
        return engine.raw_connection()
    except engine.dialect.loaded_dbapi.Error as e:
        _raise_driver_error(engine, e)


def _raise_driver_error(engine, error, cursor=None, connection=None):
    """Raise what the driver's `error` is, as SQLAlchemy's Connection
    would (oslo.db's handlers turn it into DBConnectionError, DBError,
    ...). `connection` (a pooled connection or its pool record; None
    when none was had) is invalidated when the error says it is lost.
    """
    disconnect = None           # without a connection SQLAlchemy asks
    if connection is not None:
        disconnect = engine.dialect.is_disconnect(
            error, connection.driver_connection, cursor)
        if disconnect:
            connection.invalidate(error)
    sa.engine.Connection._handle_dbapi_exception_noconnection(
        error, engine.dialect, engine, is_disconnect=disconnect)


def insert_returning():
    """Whether an INSERT ... RETURNING runs on this database
    (Session.insert_returning), as known to the engine: False until it
    has first connected to MariaDB, whose version decides it.
    """
    return _engine().dialect.insert_returning


def get_engine():
    return _engine()


def wait_until_reachable():
    """At a service's or a command's start: connect to the database once,
    trying [database] max_retries times (-1: until it answers; 0: not at
    all), [database] retry_interval seconds apart, as oslo.db's engines
    do when they are made. DBConnectionError once the tries are spent.
    """
    tries = CONF.database.max_retries
    attempts = itertools.count(1) if tries == -1 else range(1, tries + 1)
    for attempt in attempts:
        try:
            _engine().connect().close()
            return
        except db_exc.DBConnectionError as e:
            if attempt == tries:
                raise
            left = 'until it answers' if tries == -1 else (
                '%d attempt(s) left' % (tries - attempt))
            LOG.warning('The database is not reachable (%s); trying again '
                        'in %s s, %s.', e, CONF.database.retry_interval,
                        left)
            time.sleep(CONF.database.retry_interval)


def _dispose(state):
    if state is None:
        return
    engine, lone = state[1], state[2]
    if engine is not None:
        engine.dispose()
    if lone is not None and lone is not engine:
        lone.dispose()


def dispose():
    global _STATE
    with _LOCK:
        old, _STATE = _STATE, None
    _dispose(old)


def in_(column, name, count):
    """`column IN (:name_0, ..., :name_<count-1>)`: an IN list of a fixed
    length, which a Prepared statement can hold (an expanding bind
    parameter is expanded by SQLAlchemy on every execution).
    """
    return column.in_([sa.bindparam('%s_%d' % (name, i))
                       for i in range(count)])


def in_params(name, values):
    """The parameters of in_(column, name, len(values))."""
    return {'%s_%d' % (name, i): v for i, v in enumerate(values)}


# The most values one in_() list holds where a caller may have thousands
# (in_chunks()): each length is a statement of its own, compiled once.
IN_MAX = 500


def in_chunks(name, values):
    """(count, in_params(name, chunk)) for each chunk of at most IN_MAX of
    `values` (a list), in order: the IN lists of a statement run once per
    chunk, in one transaction.
    """
    for start in range(0, len(values), IN_MAX):
        chunk = values[start:start + IN_MAX]
        yield len(chunk), in_params(name, chunk)


def page(query, table, after_marker, limited):
    """`query` ordered by id, after the item whose id is the bound
    `marker_id` and up to the bound `limit` when asked (see bounds()).

    Lists whose shape is fixed build this once per combination of filters
    and keep it: SQLAlchemy then reuses its compiled form instead of
    building, keying and compiling a new statement for every request.
    """
    if after_marker:
        query = query.where(table.c.id > sa.bindparam('marker_id'))
    query = query.order_by(table.c.id)
    return Prepared(query.limit(sa.bindparam('limit')) if limited
                    else query)


def bounds(session, table, limit=None, marker=None):
    """The `limit` and `marker_id` parameters of a page() statement; 400
    when the marker (the uuid of the last item seen) names no item.
    """
    params = {} if limit is None else {'limit': limit}
    if marker is not None:
        found = session.execute(
            sa.select(table.c.id).where(table.c.uuid == marker)).scalar()
        if found is None:
            raise exception.Invalid(
                reason='marker %s does not match any item' % marker)
        params['marker_id'] = found
    return params


def paginate(session, query, table, limit=None, marker=None):
    """page() of a statement built per call, with its bounds bound."""
    return page(query, table, marker is not None,
                limit is not None).statement.params(
        bounds(session, table, limit, marker))


def rows(result):
    """The result's rows as dicts (cheaper than dict() of each mapping)."""
    keys = list(result.keys())
    return [dict(zip(keys, r)) for r in result]
