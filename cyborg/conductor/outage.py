# SPDX-License-Identifier: Apache-2.0
"""One log line when the conductor loses its database, one when it has it
back, instead of a traceback from every pass and message meanwhile.
"""

import threading
import time

from oslo_log import log

from cyborg.db import bindings

LOG = log.getLogger(__name__)


class DatabaseOutage:

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.since = None
        self._lock = threading.Lock()

    def failed(self, exc, doing):
        """Note a failure while `doing` something. True when it is the
        database being unreachable (said once per outage; the caller
        retries later), False for any other error (the caller reports it).
        """
        if not bindings.transient(exc):
            return False
        with self._lock:
            first, self.since = self.since is None, self.since or self.clock()
        if first:
            LOG.warning('The database is unreachable (%s while %s: %s); '
                        'binds, reports and Nova events wait until it is '
                        'back', type(exc).__name__, doing,
                        str(exc).splitlines()[0][:200])
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
