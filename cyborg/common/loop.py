"""A background thread that runs a pass every `interval` seconds, or at
once when woken (an RPC asked for it), until stopped."""

import threading

from oslo_log import log

LOG = log.getLogger(__name__)


class Loop:

    def __init__(self, name, body, interval, setup=None):
        """body(): one pass; exceptions are logged and the loop goes on.
        setup(stopped): runs once first (may wait on `stopped`); returning
        False ends the loop."""
        self.name = name
        self.body = body
        self.interval = interval
        self.setup = setup
        self.stopped = threading.Event()
        self._wakeup = threading.Event()
        self._thread = None

    def wake(self):
        self._wakeup.set()

    def start(self):
        self._thread = threading.Thread(target=self._run, name=self.name,
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout=10):
        self.stopped.set()
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self):
        if self.setup is not None and self.setup(self.stopped) is False:
            return
        while not self.stopped.is_set():
            try:
                self.body()
            except Exception:
                LOG.exception('%s: pass failed, will retry', self.name)
            self._wakeup.wait(self.interval() if callable(self.interval)
                              else self.interval)
            self._wakeup.clear()
