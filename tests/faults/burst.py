# SPDX-License-Identifier: Apache-2.0
"""A paced burst of binds, and the tally every fault check ends with:
"N requests, M lost, K stuck".

lost: an ARQ whose bind PATCH was answered 202 but which did not end
Bound or BindFailed, or whose accelerator-request-bound event (with the
matching status) never reached Nova. stuck: an ARQ left in BindStarted
after recovery, or accepted and left in Initial. A PATCH that was refused
(4xx/5xx, or no answer) is counted apart: the client knows it failed.
"""

import threading
import time
import uuid

import requests

from tests.reliability import figures

RESOLVED = {'Bound': 'completed', 'BindFailed': 'failed'}


class Burst:
    """PATCH each ARQ to an instance of its own from `threads` threads,
    one request per thread every `interval` seconds; `on_progress(n)` is
    called after each answer (a check injects its fault from there).
    """

    def __init__(self, deployment, arq_uuids, threads=4, interval=0.5,
                 on_progress=None):
        self.deployment = deployment
        self.pending = list(arq_uuids)
        self.threads = threads
        self.interval = interval
        self.on_progress = on_progress
        self.instances = {a: str(uuid.uuid4()) for a in arq_uuids}
        self.answers = {}
        self.seconds = {}
        self._lock = threading.Lock()

    def run(self):
        rp = self.deployment.rp()
        workers = [threading.Thread(target=self._work, args=(rp,))
                   for _ in range(self.threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return self

    def _work(self, rp):
        while True:
            with self._lock:
                if not self.pending:
                    return
                arq = self.pending.pop(0)
            started = time.monotonic()
            try:
                r = self.deployment.call(
                    'PATCH', '/accelerator_requests',
                    self.deployment.bind_body(arq, self.instances[arq], rp),
                    timeout=60)
                answer = r.status_code
            except requests.RequestException as e:
                answer = type(e).__name__
            with self._lock:
                self.answers[arq] = answer
                self.seconds[arq] = time.monotonic() - started
                done = len(self.answers)
            if self.on_progress is not None:
                self.on_progress(done)
            time.sleep(self.interval)

    @property
    def accepted(self):
        return [a for a, code in self.answers.items() if code == 202]

    @property
    def refused(self):
        return {a: code for a, code in self.answers.items() if code != 202}


def settle(deployment, burst, timeout=120):
    """Wait until every accepted ARQ is resolved and Nova heard of it (or
    the timeout), then count. Returns the tally.
    """
    deadline = time.time() + timeout
    while True:
        tally = count(deployment, burst)
        if (tally['lost'] == 0 and tally['stuck'] == 0) or \
                time.time() > deadline:
            return tally
        time.sleep(0.5)


def count(deployment, burst):
    rows = deployment.arq_rows()
    events = deployment.events.by_tag()
    lost, stuck = [], []
    for arq in burst.accepted:
        row = rows.get(arq)
        status = RESOLVED.get(row['state']) if row else None
        heard = [e for e in events.get(arq, [])
                 if e['server_uuid'] == burst.instances[arq]
                 and e['status'] == status]
        if status is None or not heard:
            lost.append(arq)
        if row is not None and row['state'] == 'Initial':
            stuck.append(arq)
    stuck += [a for a, r in rows.items() if r['state'] == 'BindStarted']
    states = [rows[a]['state'] for a in burst.accepted if a in rows]
    reasons = {}
    for a in burst.accepted:
        reason = (rows.get(a) or {}).get('bind_failure')
        if reason:
            reasons[reason[:120]] = reasons.get(reason[:120], 0) + 1
    return {'N': len(burst.answers), 'accepted': len(burst.accepted),
            'refused': len(burst.refused), 'lost': len(set(lost)),
            'stuck': len(set(stuck)), 'bound': states.count('Bound'),
            'bind_failed': states.count('BindFailed'),
            'events': sum(len(events.get(a, [])) for a in burst.accepted),
            # Delivery is at least once: a conductor killed between Nova's
            # answer and recording it sends that event again.
            'duplicate_events': sum(max(0, len(events.get(a, [])) - 1)
                                    for a in burst.accepted),
            'slowest_patch_s': round(max(burst.seconds.values(),
                                         default=0), 1),
            'failure_reasons': reasons,
            'lost_uuids': sorted(set(lost)), 'stuck_uuids': sorted(
                set(stuck))}


def report(check, tally, **extra):
    """Print and record the line, then assert 0 lost, 0 stuck."""
    shown = {k: v for k, v in tally.items() if not k.endswith('_uuids')}
    figures.record(check, **dict(shown, **extra))
    line = '%s: %d requests, %d lost, %d stuck' % (
        check, tally['N'], tally['lost'], tally['stuck'])
    print(line, flush=True)
    assert tally['lost'] == 0, (line, tally['lost_uuids'])
    assert tally['stuck'] == 0, (line, tally['stuck_uuids'])
    return line
