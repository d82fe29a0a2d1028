# SPDX-License-Identifier: Apache-2.0
"""A background thread that runs a pass every `interval` seconds, or at
once when woken (an RPC asked for it), until stopped."""

import threading
import time

from oslo_log import log

LOG = log.getLogger(__name__)


class Loop:

    def __init__(self, name, body, interval, setup=None, min_gap=0.0):
        """body(): one pass; exceptions are logged and the loop goes on.
        setup(stopped): runs once first (may wait on `stopped`); returning
        False ends the loop. min_gap: a pass woken early still starts no
        sooner than this many seconds after the previous one ended, so a
        burst of wake-ups costs one pass, not one each.
        """
        self.name = name
        self.body = body
        self.interval = interval
        self.setup = setup
        self.min_gap = min_gap
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
            ended = time.monotonic()
            self._wakeup.wait(self.interval() if callable(self.interval)
                              else self.interval)
            self._wakeup.clear()
            early = self.min_gap - (time.monotonic() - ended)
            if early > 0:
                self.stopped.wait(early)
