# SPDX-License-Identifier: Apache-2.0
"""Closed-loop load: N threads, each running one operation after another
until the planned count is reached or the time bound passes.

An operation is a callable op(client, i) that performs one request or a
whole flow and raises on a wrong answer; it may return a dict of named
sub-timings in seconds (e.g. {'patch': 0.004, 'event': 0.02}).
"""

import threading
import time

from cyborg_bench import client as client_mod
from cyborg_bench import stats


def run(endpoint, op, count, concurrency, time_limit, warmup=0):
    """Result dict of `count` operations at `concurrency`; operations not
    started by time_limit seconds are not run (time_capped says so).
    """
    if warmup:
        run(endpoint, lambda c, i: op(c, -1 - i), warmup, concurrency,
            time_limit)
    lock = threading.Lock()
    cursor = [0]
    latencies = []
    parts = {}
    errors = {}
    samples = []
    deadline = time.monotonic() + time_limit

    def worker():
        cl = endpoint.client()
        try:
            while True:
                with lock:
                    i = cursor[0]
                    if i >= count or time.monotonic() >= deadline:
                        return
                    cursor[0] = i + 1
                t0 = time.perf_counter()
                try:
                    extra = op(cl, i) or {}
                    error = None
                except client_mod.UnexpectedStatus as e:
                    error, extra = (str(e.status), e), {}
                except Exception as e:  # noqa: BLE001 - counted, reported
                    error, extra = (type(e).__name__, e), {}
                    cl.close()
                took = time.perf_counter() - t0
                with lock:
                    if error is None:
                        latencies.append(took)
                        for key, value in extra.items():
                            parts.setdefault(key, []).append(value)
                    else:
                        errors[error[0]] = errors.get(error[0], 0) + 1
                        if len(samples) < 5:
                            samples.append(str(error[1])[:400])
        finally:
            cl.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True)
               for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    ok = len(latencies)
    failed = sum(errors.values())
    result = {
        'concurrency': concurrency, 'planned': count, 'ok': ok,
        'errors': failed, 'seconds': round(elapsed, 3),
        'ops_per_s': float('%.4g' % (ok / elapsed)) if elapsed else 0.0,
        'time_capped': ok + failed < count,
        'error_kinds': errors, 'error_samples': samples,
    }
    result.update(stats.summarize(latencies))
    for key, values in parts.items():
        result[key] = stats.summarize(values)
    return result
