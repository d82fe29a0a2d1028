# SPDX-License-Identifier: Apache-2.0
"""Conductor failover (issue #19): two conductors; the one holding a
bind is SIGKILLed while the agent prepares the device, 20 times. The live
one takes the bind over once the dead one's heartbeat is older than
[conductor] heartbeat_timeout (the defaults: heartbeat every 2 s, dead
after 6 s) and binds it; each ARQ ends Bound with one handle and one
event. The time from the kill to Bound is recorded, not asserted.
"""

import threading
import time
import uuid

from tests.faults import burst as fault_burst
from tests.reliability import figures

ROUNDS = 20
PREPARE_SECONDS = 1.0
KEYS = ('cyborg-conductor', 'cyborg-conductor-2')


def _wait(what, predicate, timeout=60, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(interval)
    raise AssertionError('timed out waiting for %s' % what)


def test_owning_conductor_sigkilled_mid_bind(deployment):
    deployment.start_conductor(KEYS[1])
    deployment.slow_prepare(PREPARE_SECONDS)
    deployment.profile()
    rp = deployment.rp()
    arqs = deployment.create_arqs(ROUNDS)
    instances = {a: str(uuid.uuid4()) for a in arqs}
    to_bound, patch_to_bound, restarts = [], [], []
    for arq in arqs:
        patched = time.monotonic()
        r = deployment.call('PATCH', '/accelerator_requests',
                            deployment.bind_body(arq, instances[arq], rp))
        assert r.status_code == 202, r.text
        holder = _wait('a conductor to hold %s' % arq,
                       lambda: deployment.conductor_holding(arq))
        deployment.kill(holder)
        killed = time.monotonic()
        # The killed one comes back meanwhile, under a new name: the next
        # round has two conductors again.
        restart = threading.Thread(target=deployment.start_conductor,
                                   args=(holder,))
        restart.start()
        restarts.append(restart)
        row = _wait('%s to be resolved' % arq, lambda: (
            deployment.arq_rows()[arq]['state'] in fault_burst.RESOLVED
            and deployment.arq_rows()[arq]))
        done = time.monotonic()
        assert row['state'] == 'Bound', row
        to_bound.append(done - killed)
        patch_to_bound.append(done - patched)
        restart.join(120)
        assert set(KEYS) <= set(deployment.procs), deployment.log_tail()

    def every_event():
        events = deployment.events.by_tag()
        return all(any(e['status'] == 'completed' for e in events.get(a, []))
                   for a in arqs) and events

    events = _wait('every event', every_event)
    rows = deployment.arq_rows()
    handles = [rows[a]['attach_handle_id'] for a in arqs]
    took_over = deployment.all_logs('cyborg-conductor').count(
        'Taking over ')
    to_bound.sort()
    figures.record(
        'fault: owning conductor SIGKILLed mid-bind', rounds=ROUNDS,
        bound=sum(rows[a]['state'] == 'Bound' for a in arqs),
        bind_failed=sum(rows[a]['state'] == 'BindFailed' for a in arqs),
        takeovers_logged=took_over, prepare_s=PREPARE_SECONDS,
        kill_to_bound_s_min=round(to_bound[0], 1),
        kill_to_bound_s_median=round(to_bound[len(to_bound) // 2], 1),
        kill_to_bound_s_max=round(to_bound[-1], 1),
        patch_to_bound_s_max=round(max(patch_to_bound), 1),
        kill_to_bound_s=[round(t, 1) for t in to_bound])
    assert [rows[a]['state'] for a in arqs] == ['Bound'] * ROUNDS
    # One handle per ARQ, none shared, none leaked.
    assert len(set(handles)) == ROUNDS and None not in handles
    assert deployment.handles_in_use() == ROUNDS
    assert all(len(events[a]) >= 1 for a in arqs)
