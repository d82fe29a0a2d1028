# SPDX-License-Identifier: Apache-2.0
"""One log line when the conductor loses its database, one when it has it
back, instead of a traceback from every pass and message meanwhile; one
line, not an outage, for a statement the database gave up on because of
other transactions (a deadlock, a lock wait or a busy SQLite that timed
out), as the API answers them (cyborg.api.errors: 503 "unreachable" and
503 "contended").
"""

import threading
import time

from oslo_log import log

from cyborg.db import api as db_api
from cyborg.db import bindings

LOG = log.getLogger(__name__)

UNREACHABLE = 'unreachable'
CONTENDED = 'contended'


def kind(exc):
    """CONTENDED for a database error that other transactions caused and
    a later run may not meet (db.api.contended(): a deadlock's victim, a
    lock wait that timed out, SQLite's "database is locked" once its busy
    timeout is spent), UNREACHABLE for any other that is the database's
    state rather than the statement's (bindings.transient(): a connection
    refused or lost, above all), None for any other error.
    """
    if db_api.contended(exc):
        return CONTENDED
    if bindings.transient(exc):
        return UNREACHABLE
    return None


class DatabaseOutage:

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.since = None
        self._lock = threading.Lock()

    def failed(self, exc, doing):
        """Note a failure while `doing` something. True when it is the
        database's state (kind(): unreachable, said once per outage, or
        contended, said each time) and the caller retries later, False
        for any other error (the caller reports it).
        """
        found = kind(exc)
        if found is None:
            return False
        what = '%s while %s: %s' % (type(exc).__name__, doing,
                                    str(exc).splitlines()[0][:200])
        if found == CONTENDED:
            LOG.warning('The database is contended (%s); will retry', what)
            return True
        with self._lock:
            first, self.since = self.since is None, self.since or self.clock()
        if first:
            LOG.warning('The database is unreachable (%s); binds, reports '
                        'and Nova events wait until it is back', what)
        return True

    def ok(self):
        """Note a successful round trip: ends an outage."""
        with self._lock:
            since, self.since = self.since, None
        if since is not None:
            LOG.info('The database is reachable again, after %.0f s; '
                     'resuming', self.clock() - since)


# The conductor process's: its binder, heartbeat and RPC endpoint share it.
DATABASE = DatabaseOutage()
