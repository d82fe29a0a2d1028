# SPDX-License-Identifier: Apache-2.0
"""Combining concurrent callers' work into batches.

Callers hand in items; whichever caller finds nobody working runs the work
for everything queued meanwhile, batch after batch, while the others wait
for their own items (or go their way at once, when they need not know).
Alone, a caller runs its items at once; under load one transaction, one
lock hand-over and one notification serve a whole batch instead of one
item each.
"""

import threading

from oslo_log import log

LOG = log.getLogger(__name__)


class _Ticket:
    __slots__ = ('items', 'done')

    def __init__(self, items):
        self.items = items
        self.done = threading.Event()


class Combiner:

    def __init__(self, work, after=None):
        """work(items): processes one batch and handles its own errors;
        one it lets through is logged, and the next batch still runs.
        after(): runs after each batch (e.g. to wake a notifier).
        """
        self._work = work
        self._after = after
        self._lock = threading.Lock()
        self._queued = []
        self._busy = False

    def run(self, items, wait=True):
        """Returns once `items` went through work() (by us or another);
        with wait=False, at once if another caller is working (it takes
        our items too).
        """
        ticket = _Ticket(list(items))
        with self._lock:
            self._queued.append(ticket)
            lead = not self._busy
            self._busy = True
        if not lead:
            if wait:
                ticket.done.wait()
            return
        while True:
            with self._lock:
                batch, self._queued = self._queued, []
                if not batch:
                    self._busy = False
                    return
            try:
                self._work([item for t in batch for item in t.items])
            except Exception:
                LOG.exception('A batch of %d item(s) failed',
                              sum(len(t.items) for t in batch))
            finally:
                for t in batch:
                    t.done.set()
                if self._after is not None:
                    self._after()
