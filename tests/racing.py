# SPDX-License-Identifier: Apache-2.0
"""Releasing several calls at the same instant, for race tests."""

import threading


def race(calls, timeout=120):
    """Run each call in its own thread, all released at once by a barrier.
    Returns per call ('ok', result) or ('error', exception).
    """
    barrier = threading.Barrier(len(calls))
    outcomes = [None] * len(calls)

    def run(i, call):
        barrier.wait()
        try:
            outcomes[i] = ('ok', call())
        except Exception as e:  # noqa: B902 - reported to the test
            outcomes[i] = ('error', e)

    threads = [threading.Thread(target=run, args=(i, c))
               for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), 'a racer hung'
    return outcomes
