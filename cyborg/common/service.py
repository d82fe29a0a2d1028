"""Running a service in the foreground until SIGINT/SIGTERM."""

import signal
import threading

from oslo_log import log

LOG = log.getLogger(__name__)


def run_until_signalled(name, start, stop):
    """start(); block until SIGINT or SIGTERM; stop(). Returns 0."""
    stopping = threading.Event()

    def _handler(signum, frame):
        LOG.info('%s: signal %d received, stopping', name, signum)
        stopping.set()

    previous = {s: signal.signal(s, _handler)
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        start()
        LOG.info('%s started', name)
        while not stopping.wait(1.0):
            pass
    finally:
        stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0
