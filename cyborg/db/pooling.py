# SPDX-License-Identifier: Apache-2.0
"""What a transaction pays to take a pooled connection and give it back,
and what the pool guarantees for it.

Every transaction checks a connection out of the engine's pool and back
in (cyborg.db.api.Session). Per checkout, one listener (guard()) does what
oslo.db's process guard and SQLAlchemy's pre-ping did, for less:

- Fork: a connection opened by another process (a worker forked from a
  parent that had connections) is never used. os.register_at_fork()
  empties the pool in the child, but uWSGI runs those hooks only with
  py-call-uwsgi-fork-hooks, so every checkout also compares the pid. Such
  a connection is dropped, not closed: closing it would end the parent's
  session on the server (oslo.db's guard closed it).
- A dead connection (MariaDB, PostgreSQL): SQLAlchemy's pre-ping was a
  round trip per transaction. A server that ends a session (KILL,
  pg_terminate_backend, a restart, wait_timeout, a proxy's timeout) closes
  its socket, which a zero-timeout poll() sees, so a connection is pinged
  when its socket has something to read, and when it sat unused for more
  than IDLE_PING seconds: a peer can also lose the session without a word
  (a host that rebooted, an address that moved to another host), which
  no socket shows, but that takes seconds, and a connection used in the
  meantime failed then. A failed ping invalidates the pool, as the
  pre-ping did, and the transaction gets a new connection.

The pool itself stays SQLAlchemy's QueuePool (size, overflow, timeout,
recycle, dispose). The SQLite file engine, which is ours, keeps its idle
connections in a queue.SimpleQueue (Pool below); oslo.db builds the
MariaDB and PostgreSQL engines with their pools.

A read of one statement (cyborg.db.api.read) takes its connection with
take() and gives it back with give_back(): the pool's own checkout and
checkin (its limits, timeout, recycle, invalidation, connect and checkin
listeners), guard()'s checks included, without the proxy SQLAlchemy wraps
around a connection for its users, which was three quarters of their
cost. That is the SQLite file engine's pool, and on MariaDB the pool of
the engine kept for such reads, whose QueuePool oslo.db made becomes a
Pool (Pool.replacing).
"""

import os
import queue
import select
import threading
import time
import weakref

import sqlalchemy as sa
from sqlalchemy.util import queue as sa_queue

# A connection unused for longer than this is pinged before use even when
# its socket shows nothing (seconds). Under load a pooled connection is
# back in use within milliseconds; below one transaction a second per
# connection, each is pinged as before.
IDLE_PING = 1.0

# oslo.db's listeners that guard() makes redundant, removed when found.
_SUPERSEDED = (
    # Its process guard: the pid check above (which closed the connection).
    ('checkout', '_add_process_guards.<locals>.checkout'),
    # It clears the exception that made a savepoint roll back, which it
    # keeps on the connection; cyborg uses no savepoints (and its commit
    # and rollback listeners clear it too).
    ('checkin', 'register_engine.<locals>.pop_exc_checkin'),
)

_PID = 'cyborg_pid'
_USED = 'cyborg_used'
_POLL = 'cyborg_poll'


class _IdleConnections(sa_queue.QueueCommon):
    """A pool's idle connections, on the C-implemented queue.SimpleQueue
    (SQLAlchemy's queue is Python under a condition variable: some twenty
    calls per checkout and checkin). First in, first out; a put never
    blocks (QueuePool closes the connection it cannot keep).
    """

    use_lifo = False

    def __init__(self, maxsize=0, use_lifo=False):
        if use_lifo:
            raise ValueError('pool_use_lifo is not supported')
        self.maxsize = maxsize
        self._idle = queue.SimpleQueue()
        # Only puts take it: a get only makes room, so the size a put sees
        # under it is never too small and the pool never keeps more than
        # `maxsize` idle.
        self._adding = threading.Lock()

    def empty(self):
        return self._idle.empty()

    def full(self):
        return 0 < self.maxsize <= self._idle.qsize()

    def qsize(self):
        return self._idle.qsize()

    def offer(self, item):
        """Keep `item` if there is room for it; whether it was kept."""
        with self._adding:
            if 0 < self.maxsize <= self._idle.qsize():
                return False
            self._idle.put(item)
            return True

    def put(self, item, block=True, timeout=None):
        if not self.offer(item):
            raise sa_queue.Full()

    def put_nowait(self, item):
        self.put(item, False)

    def get(self, block=True, timeout=None):
        try:
            return self._idle.get(block, timeout)
        except queue.Empty:
            raise sa_queue.Empty() from None

    def get_nowait(self):
        return self.get(False)


class Pool(sa.pool.QueuePool):
    """QueuePool (its limits, timeout, recycle and dispose unchanged) with
    its idle connections in _IdleConnections.
    """

    _queue_class = _IdleConnections
    # Its log lines under QueuePool's logger, as before (oslo.log sets
    # sqlalchemy's level), not cyborg's.
    _sqla_logger_namespace = 'sqlalchemy.pool.impl.QueuePool'

    def _do_get(self):
        # An idle connection straight off the queue. QueuePool's own path
        # (its overflow arithmetic, then _IdleConnections.get) hands out
        # an idle one at once too, whether it would wait or not, and
        # counts nothing for it; with none idle, that path decides.
        try:
            return self._pool._idle.get_nowait()
        except queue.Empty:
            return super()._do_get()

    def _do_return_conn(self, record):
        # Back on the queue when there is room; a full pool's QueuePool
        # path closes it.
        if not self._pool.offer(record):
            super()._do_return_conn(record)

    @classmethod
    def replacing(cls, pool):
        """A Pool with the settings and listeners of `pool`, a QueuePool
        (those QueuePool.recreate() carries over), for an engine oslo.db
        made: it takes no pool class. `pool` is disposed of.
        """
        new = cls(
            pool._creator,
            pool_size=pool._pool.maxsize,
            max_overflow=pool._max_overflow,
            pre_ping=pool._pre_ping,
            timeout=pool._timeout,
            recycle=pool._recycle,
            echo=pool.echo,
            logging_name=pool._orig_logging_name,
            reset_on_return=pool._reset_on_return,
            _dispatch=pool.dispatch,
            dialect=pool._dialect)
        pool.dispose()
        return new


def take(engine):
    """A connection record of `engine`'s pool, checked out as the pool
    would, its connection (record.dbapi_connection) of this process,
    outside any transaction and, on an engine guard() pings for, alive
    as far as guard() can tell; None where the engine's pool is not a
    Pool, or where listeners other than guard()'s would see a checkout or
    a reset (the caller takes SQLAlchemy's checkout, which runs them).
    Give it back with give_back().
    """
    pool = engine.pool
    dispatch = pool.dispatch
    if (type(pool) is not Pool or dispatch.reset
            or len(dispatch.checkout) != 1
            or getattr(engine, 'cyborg_checkout', None)
            not in dispatch.checkout):
        return None
    record = pool._do_get()
    try:
        record.get_connection()     # recycled or reconnected when due
        if record.info[_PID] != os.getpid():
            # guard()'s checkout: forget another process's connection
            # without closing it, and open one of this process.
            record.dbapi_connection = None
            record.get_connection()
        elif engine.cyborg_ping and _dead(
                record.dbapi_connection, record.info, engine.dialect):
            # What SQLAlchemy does with the checkout's InvalidatePoolError:
            # every connection opened before now is replaced when next
            # used, this one at once.
            error = sa.exc.InvalidatePoolError(_DEAD)
            record.invalidate(error)
            pool._invalidate(None, error, _checkin=False)
            record.get_connection()
    except BaseException as e:
        # What SQLAlchemy's checkout does with a failed connection: closed
        # and its place in the pool given back.
        record._checkin_failed(e, _fairy_was_created=False)
        raise
    return record


def give_back(record):
    """Check in a record from take(), through the pool's checkin (its
    listeners, the pool size; an invalidated one is reopened when next
    used).
    """
    record.checkin(_fairy_was_created=False)


def _socket(dbapi_conn):
    """A poll() object for the connection's socket, or None for a driver
    whose socket we cannot see (its connections are always pinged).
    """
    if hasattr(dbapi_conn, 'fileno'):             # psycopg2
        fd = dbapi_conn.fileno()
    else:
        sock = getattr(dbapi_conn, '_sock', None)  # PyMySQL
        if sock is None:
            return None
        fd = sock.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return poller


_DEAD = 'the database closed the connection'


def _dead(dbapi_conn, info, dialect):
    """Whether a connection of an engine guard() pings for is dead: pinged
    when its socket has something to read (the server closed it) or it
    sat unused for more than IDLE_PING seconds. The ping is the pre-ping's
    own call: the same error translation (oslo.db counts more errors as a
    lost connection) and outcome.
    """
    # Unused since its previous checkout (its transaction included: a
    # long one only makes the next ping likelier).
    now = time.monotonic()
    idle = now - info[_USED]
    info[_USED] = now
    poller = info[_POLL]
    if idle > IDLE_PING or poller is None or poller.poll(0):
        return not dialect._do_ping_w_event(dbapi_conn)
    return False


def guard(engine, ping):
    """Install the checkout listener on `engine`; `ping`: look after dead
    connections (the engine's own pre-ping is turned off).
    """
    dialect = engine.dialect

    @sa.event.listens_for(engine, 'connect')
    def connect(dbapi_conn, record):
        info = record.info
        info[_PID] = os.getpid()
        if ping:
            info[_USED] = time.monotonic()
            info[_POLL] = _socket(dbapi_conn)

    # First among the checkout listeners: none runs on another process's
    # connection.
    @sa.event.listens_for(engine, 'checkout', insert=True)
    def checkout(dbapi_conn, record, fairy):
        info = record.info
        if info[_PID] != os.getpid():
            # Forget it without closing it; SQLAlchemy opens a new one.
            record.dbapi_connection = fairy.dbapi_connection = None
            raise sa.exc.DisconnectionError(
                'connection of process %d, not reused in process %d'
                % (info[_PID], os.getpid()))
        if ping and _dead(dbapi_conn, info, dialect):
            raise sa.exc.InvalidatePoolError(_DEAD)

    # take() does the same checks, for a pool with no other checkout
    # listener.
    engine.cyborg_checkout = checkout
    engine.cyborg_ping = ping
    if ping:
        # The listener above pings when needed; this was every checkout.
        engine.pool._pre_ping = False
    for event, name in _SUPERSEDED:
        for listener in list(getattr(engine.pool.dispatch, event)):
            if (getattr(listener, '__module__', '').startswith('oslo_db.')
                    and listener.__qualname__ == name):
                sa.event.remove(engine, event, listener)
    # Connections opened before these listeners (oslo.db tests one when it
    # creates the engine) are closed; a new pool keeps the settings above.
    engine.dispose()

    # A forked child (a gunicorn or uWSGI worker of a pre-loaded app)
    # starts with an empty pool, its parent's connections left alone.
    ref = weakref.ref(engine)

    def after_fork():
        forked = ref()
        if forked is not None:
            forked.dispose(close=False)
    os.register_at_fork(after_in_child=after_fork)
