# SPDX-License-Identifier: Apache-2.0
"""Waiting for something that happens in another thread or process."""

import time


class TimedOut(AssertionError):
    """What was waited for did not happen in time."""


def eventually(fn, what, timeout=60.0, interval=0.1, check=None,
               detail=None):
    """Call fn() every `interval` seconds until it returns something true,
    and return that. `check()`, called before each try, may raise to stop
    early (a process that died). After `timeout` seconds raise TimedOut
    naming `what`, with detail() appended when given.
    """
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        value = fn()
        if value:
            return value
        if time.monotonic() >= deadline:
            message = 'timed out after %ss waiting for %s' % (timeout, what)
            if detail is not None:
                message += ':\n%s' % detail()
            raise TimedOut(message)
        time.sleep(interval)
