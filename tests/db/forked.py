# SPDX-License-Identifier: Apache-2.0
"""Run by tests/db/test_pool.py in a process of its own (one thread, no
test runner around it): `python -m tests.db.forked URL`.

A parent uses a pooled connection, then forks twice: once with os.fork()
(os.register_at_fork hooks run: gunicorn) and once with the C library's
fork() (they do not: uWSGI without py-call-uwsgi-fork-hooks). Each child
runs a transaction and a lone read (api.read: on MariaDB, a pool of its
own); the parent runs them once more after each child has exited.
Prints, as JSON, per way of forking, the connections each of the three
got: [pid of the process that opened the transaction's, its server
session id, the lone read's server session id] (the ids None on SQLite).
"""

import ctypes
import json
import os
import sys

import sqlalchemy as sa

from cyborg.conf import CONF
from cyborg.db import api

_SESSION_ID = {'mysql': sa.func.connection_id,
               'postgresql': sa.func.pg_backend_pid}


def _connection():
    with api.reader() as session:
        # Whoever first used the pooled connection marked it.
        opener = session._raw.info.setdefault('test_opened_by', os.getpid())
        whoami = _SESSION_ID.get(session.dialect.name)
        server = session.execute(
            sa.select(whoami())).scalar() if whoami else None
    lone = api.read(api.Prepared(sa.select(whoami()))).scalar() \
        if whoami else None
    return [opener, server, lone]


def _in_child(fork):
    read, write = os.pipe()
    pid = fork()
    if pid == 0:
        try:
            os.write(write, json.dumps(_connection()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, 'rb') as pipe:
        seen = json.loads(pipe.read() or b'null')
    os.waitpid(pid, 0)
    return seen


def main(url):
    CONF([], project='cyborg', default_config_files=[])
    api.configure(url)
    forks = {'os.fork': os.fork,
             # Not through Python's fork: its at-fork hooks do not run.
             'libc fork': ctypes.PyDLL(None).fork}
    seen = {}
    for name, fork in forks.items():
        before = _connection()
        child = _in_child(fork)
        seen[name] = {'before': before, 'child': child,
                      'after': _connection()}
    api.dispose()
    print(json.dumps(seen))


if __name__ == '__main__':
    main(sys.argv[1])
