# SPDX-License-Identifier: Apache-2.0
"""Running a service in the foreground until SIGINT/SIGTERM."""

import gc
import signal
import time

from oslo_log import log

LOG = log.getLogger(__name__)


def settle_heap():
    """Hide what start-up allocated from the garbage collector.

    Start-up leaves hundreds of thousands of long-lived objects (modules,
    options, Placement's and SQLAlchemy's metadata). Every full collection
    would walk them all again, a pause of tens of milliseconds landing in
    the middle of some request; frozen, they are never scanned.
    """
    gc.collect()
    gc.freeze()


def run_until_signalled(name, start, stop):
    """start(); block until SIGINT or SIGTERM; stop(). Returns 0."""
    # A plain flag, polled: Event.set() in a signal handler can deadlock
    # against the main thread's own wait on the same lock.
    stopping = []

    def _handler(signum, frame):
        stopping.append(signum)

    previous = {s: signal.signal(s, _handler)
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        start()
        settle_heap()
        LOG.info('%s started', name)
        while not stopping:
            time.sleep(0.2)
        LOG.info('%s: signal %d received, stopping', name, stopping[0])
    finally:
        began = time.monotonic()
        stop()
        LOG.info('%s stopped in %.1f s', name, time.monotonic() - began)
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0
