# SPDX-License-Identifier: Apache-2.0
"""Bind latency: Nova's PATCH, and PATCH → accelerator-request-bound.

What it does, all on 127.0.0.1:

1. writes a fake host spec with enough attach handles (``--devices`` FPGA
   cards × ``--functions`` PCI functions each; every function is one attach
   handle) and starts its own Nova events receiver: a threaded HTTP server
   that answers ``POST /os-server-external-events`` with 200 (code 200 per
   event) and records, per event tag (= ARQ uuid), when the event arrived;
2. starts ``cyborg-aio --no-demo --nova-endpoint <receiver> --host-spec
   <spec> --state-dir <tmp> --port 0 --placement-port 0`` as a subprocess
   and parses its ready line;
3. creates a device profile (``resources:FPGA=1`` +
   ``trait:CUSTOM_FAKE_DEVICE`` required) and finds the deployables'
   ``rp_uuid``;
4. for each concurrency C (1, 10, 100 by default), repeats a round R times:

   * C client threads, each with its own keep-alive connection and
     Nova's service identity (``X-Roles: member``, ``X-Service-Roles:
     service``), create one ARQ each (``POST /v2/accelerator_requests``,
     timed separately), wait at a barrier, then all send Nova's bind
     ``PATCH /v2/accelerator_requests`` (``/hostname``, ``/device_rp_uuid``,
     ``/instance_uuid``; one instance per thread) at once;
   * it times each PATCH (send → 202 read) and the time from that PATCH's
     send to the arrival of its event at the receiver;
   * it checks that every event arrived with status ``completed`` for the
     right instance, that every ARQ is ``Bound`` (``GET
     ?instance=<uuid>``) with a handle no other ARQ holds, then deletes the
     ARQs (``DELETE ?instance=<uuid>``, service role) so the next round
     finds the handles free;

5. prints p50/p90/p99/max of both latencies per concurrency as a Markdown
   table, with the targets (PATCH p99 < 20 ms, PATCH → event p99 < 100 ms)
   checked, and optionally writes JSON (``--json FILE``, raw samples too).

Two warm-up rounds at concurrency 10 come first (not measured). ``--py-spy
FILE`` records the aio process during the measured rounds (``pip install
py-spy`` into the venv first). ``--deployment distributed`` runs the same
rounds against Placement, cyborg-api, cyborg-conductor and cyborg-agent as
separate processes over RabbitMQ. See docs/bind-latency.md for
results.

Examples::

    cyborg-bench bind --quick
    cyborg-bench bind --json /tmp/bind.json
    cyborg-bench bind --rounds 1:100,10:30,100:10
    cyborg-bench bind --rounds 10:20 --py-spy /tmp/aio.txt --py-spy-mode gil
    cyborg-bench bind --deployment distributed --db mysql --quick

The client threads and the receiver run in this process, on the same
machine as the service: on a small machine they compete with it for CPU,
as Nova would. Latencies use one clock (time.perf_counter) for sends and
arrivals. Exit status 0 when every bind was verified (targets missed or not),
1 otherwise.
"""

import json
import math
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from cyborg_harness import aio as harness_aio
from cyborg_harness import distributed
from cyborg_harness import net
from cyborg_harness import nova
from cyborg_harness import processes

from cyborg_bench import client as http
from cyborg_bench import hostspec
from cyborg_bench import machine
from cyborg_bench import stats

EVENT_NAME = 'accelerator-request-bound'
PROFILE_NAME = 'bind-bench-fpga'
PROFILE_GROUPS = [{'resources:FPGA': '1',
                   'trait:CUSTOM_FAKE_DEVICE': 'required'}]
TARGETS_MS = {'patch_p99': 20.0, 'event_p99': 100.0}

# concurrency -> rounds
ROUNDS = {
    'full': {1: 50, 10: 20, 100: 5},
    'quick': {1: 5, 10: 2, 100: 1},
}


def log(msg):
    print('[cyborg-bench bind %s] %s' % (time.strftime('%H:%M:%S'), msg),
          file=sys.stderr, flush=True)


class PySpy:
    """py-spy record attached to the aio process for the measured rounds."""

    def __init__(self, pid, output, rate, workdir, mode='default'):
        exe = os.path.join(os.path.dirname(sys.executable), 'py-spy')
        if not os.path.exists(exe):
            exe = shutil.which('py-spy')
        if not exe:
            raise RuntimeError("py-spy not found (pip install -e "
                               "'.[profile]' into the venv)")
        fmt = ('speedscope' if output.endswith('.json')
               or output.endswith('.speedscope') else
               'raw' if output.endswith('.txt') else 'flamegraph')
        self.output = output
        self._log = open(os.path.join(workdir, 'py-spy.log'), 'wb')
        self.proc = subprocess.Popen(
            [exe, 'record', '--pid', str(pid), '--rate', str(rate),
             '--threads', '--format', fmt, '--output', output,
             '--nonblocking'] + {'idle': ['--idle'], 'gil': ['--gil']}.get(
                 mode, []),
            stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        time.sleep(1.0)  # let it attach before the first round
        if self.proc.poll() is not None:
            self._log.close()
            raise RuntimeError('py-spy exited at once: %s' % open(
                self._log.name, errors='replace').read()[-2000:])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # writes the output
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


# --------------------------------------------------------------------------
# The deployment under test, either kind


class Aio:
    """cyborg-aio: one process."""

    def __init__(self, proc):
        self.proc = proc
        self.api_url, self.port, self.prefix = (proc.api_url, proc.port,
                                                proc.prefix)
        self.pid, self.cmd = proc.pid, proc.argv

    def cpu_seconds(self):
        return self.proc.cpu_seconds()

    def log_problems(self):
        return self.proc.problems()

    def stop(self):
        self.proc.stop(on_kill=lambda: log(
            'cyborg-aio did not stop within 30 s of SIGTERM; killing it'))


class Distributed:
    """Placement, cyborg-conductor, cyborg-agent and cyborg-api."""

    def __init__(self, deployment):
        self.deployment = deployment
        self.api_url, self.port, self.prefix = (deployment.api_url,
                                                deployment.port,
                                                deployment.prefix)
        self.pid = deployment.procs['cyborg-conductor'].pid  # for py-spy
        self.cmd = [p.argv[0] for p in deployment.procs.values()]

    def cpu_seconds(self):
        """The cyborg processes' (gunicorn workers included)."""
        return self.deployment.cpu_seconds()

    def log_problems(self):
        return self.deployment.log_problems()

    def stop(self):
        self.deployment.close()


# --------------------------------------------------------------------------
# Clients


def nova_client(port, prefix, timeout):
    """One keep-alive connection with Nova's identity (service token)."""
    return http.local(port, prefix, http.NOVA_HEADERS, timeout)


# --------------------------------------------------------------------------
# Rounds


class RoundFailed(Exception):
    pass


def run_round(aio, receiver, clients, concurrency, hostname, rp_uuids,
              event_timeout, request_timeout):
    """One round: C ARQs created, bound at once, verified, deleted.

    Returns {patch, event, after_response, create (lists of seconds),
    wall, server_cpu, batches, errors}.
    """
    c = concurrency
    instances = [str(uuid.uuid4()) for _ in range(c)]
    # Spread the ARQs over the cards (at most `functions` per card).
    rps = [rp_uuids[i % len(rp_uuids)] for i in range(c)]
    arqs = [None] * c
    creates = [None] * c
    sends = [None] * c
    patches = [None] * c
    responded = [None] * c
    accepted = [False] * c
    errors = []
    counts = {'patch_failed': 0, 'event_missing': 0, 'event_failed': 0,
              'not_bound': 0}
    barrier = threading.Barrier(c + 1, timeout=request_timeout + 30)

    def worker(i):
        client = clients[i]
        try:
            t0 = time.perf_counter()
            # Also warms this thread's connection for the PATCH.
            body = client.call('POST', '/v2/accelerator_requests',
                               {'device_profile_name': PROFILE_NAME},
                               expect=201)
            creates[i] = time.perf_counter() - t0
            [arq] = body['arqs']
            arqs[i] = arq['uuid']
        except Exception as e:  # noqa: BLE001 - reported
            errors.append('create #%d: %s' % (i, e))
            barrier.abort()
            return
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return
        body = http.bind_body(arqs[i], hostname, rps[i], instances[i])
        t0 = time.perf_counter()
        try:
            status, payload = client.request(
                'PATCH', '/v2/accelerator_requests', body)
        except Exception as e:  # noqa: BLE001 - reported
            status, payload = 'exc:%s' % type(e).__name__, repr(e).encode()
        t1 = time.perf_counter()
        sends[i], patches[i], responded[i] = t0, t1 - t0, t1
        accepted[i] = status == 202
        if status != 202:
            errors.append('PATCH #%d -> %s %s' % (i, status, payload[:300]))

    threads = [threading.Thread(target=worker, args=(i,), daemon=True,
                                name='nova-%d' % i) for i in range(c)]
    for t in threads:
        t.start()
    cpu0 = None
    try:
        barrier.wait()
        cpu0 = aio.cpu_seconds()
        batches0 = len(receiver.batches)
    except threading.BrokenBarrierError:
        for t in threads:
            t.join(request_timeout + 5)
        raise RoundFailed('; '.join(errors[:5]) or 'barrier broken')
    for t in threads:
        t.join(request_timeout + 5)
    if any(t.is_alive() for t in threads):
        raise RoundFailed('PATCH threads still running after %.0fs'
                          % (request_timeout + 5))
    counts['patch_failed'] = c - sum(accepted)
    # Only an accepted (202) PATCH owes an event.
    tags = [a for i, a in enumerate(arqs) if accepted[i]]
    arrived = receiver.wait_for(tags, event_timeout)
    cpu1 = aio.cpu_seconds()
    if not arrived:
        missing = [t for t in tags if t not in receiver.arrivals]
        counts['event_missing'] = len(missing)
        errors.append('%d event(s) not received within %.0fs (e.g. %s)'
                      % (len(missing), event_timeout, missing[:3]))

    events, after_response, last_arrival = [], [], None
    for i, tag in enumerate(arqs):
        got = receiver.arrivals.get(tag)
        if got is None or not accepted[i]:
            continue
        at, event = got
        events.append(at - sends[i])
        after_response.append(at - responded[i])
        last_arrival = at if last_arrival is None else max(last_arrival, at)
        wrong = {k: event.get(k) for k, v in (
            ('name', EVENT_NAME), ('status', 'completed'),
            ('server_uuid', instances[i])) if event.get(k) != v}
        if wrong:
            counts['event_failed'] += 1
            errors.append('event for ARQ %s: %s' % (tag, wrong))
    batch_sizes = [n for _, n in list(receiver.batches)[batches0:]]

    # Verify (the way Nova looks ARQs up), then free the handles.
    verifier = clients[0]
    handles = {}
    for i, instance in enumerate(instances):
        if not accepted[i]:
            continue
        try:
            found = verifier.call(
                'GET', '/v2/accelerator_requests?instance=%s'
                % instance)['arqs']
        except Exception as e:  # noqa: BLE001 - reported
            errors.append('GET ?instance=%s: %s' % (instance, e))
            continue
        if [a['uuid'] for a in found] != [arqs[i]]:
            errors.append('instance %s has ARQs %s, expected [%s]' % (
                instance, [a['uuid'] for a in found], arqs[i]))
            continue
        arq = found[0]
        if (arq['state'] != 'Bound' or arq['hostname'] != hostname
                or arq['device_rp_uuid'] != rps[i]
                or not arq['attach_handle_uuid']):
            counts['not_bound'] += 1
            errors.append('ARQ %s: state %s host %s rp %s handle %s' % (
                arq['uuid'], arq['state'], arq['hostname'],
                arq['device_rp_uuid'], arq['attach_handle_uuid']))
            continue
        other = handles.setdefault(arq['attach_handle_uuid'], arq['uuid'])
        if other != arq['uuid']:
            errors.append('ARQs %s and %s share attach handle %s' % (
                other, arq['uuid'], arq['attach_handle_uuid']))
    for i, instance in enumerate(instances):
        if not accepted[i]:
            continue
        try:
            verifier.call('DELETE', '/v2/accelerator_requests?instance=%s'
                          % instance, expect=204)
        except Exception as e:  # noqa: BLE001 - reported
            errors.append('DELETE ?instance=%s: %s' % (instance, e))
    for i, arq in enumerate(arqs):
        # ARQs whose instance was never bound (a failed PATCH).
        if arq is not None and not accepted[i]:
            try:
                verifier.call('DELETE', '/v2/accelerator_requests?arqs=%s'
                              % arq, expect=204)
            except Exception as e:  # noqa: BLE001 - reported
                errors.append('DELETE ?arqs=%s: %s' % (arq, e))

    first_send = min(s for s in sends if s is not None)
    return {
        'create': [x for x in creates if x is not None],
        'patch': [x for x in patches if x is not None],
        'event': events,
        'after_response': after_response,
        'wall': (last_arrival - first_send) if last_arrival else None,
        'server_cpu': (cpu1 - cpu0) if None not in (cpu0, cpu1) else None,
        'batches': batch_sizes,
        'errors': errors,
        'counts': counts,
    }


def run_level(aio, receiver, clients, concurrency, rounds, hostname,
              rp_uuids, args, deadline):
    level = {'concurrency': concurrency, 'rounds_planned': rounds,
             'rounds': 0, 'create': [], 'patch': [], 'event': [],
             'after_response': [], 'walls': [], 'server_cpu': [],
             'batches': [], 'errors': [],
             'counts': {'patch_failed': 0, 'event_missing': 0,
                        'event_failed': 0, 'not_bound': 0}}
    for r in range(rounds):
        if time.monotonic() >= deadline:
            level['errors'].append('time budget spent after %d of %d '
                                   'round(s)' % (r, rounds))
            log('C=%d: time budget spent after %d round(s)'
                % (concurrency, r))
            break
        try:
            out = run_round(aio, receiver, clients, concurrency, hostname,
                            rp_uuids, args.event_timeout,
                            args.request_timeout)
        except RoundFailed as e:
            level['errors'].append('round %d: %s' % (r + 1, e))
            log('C=%d round %d failed: %s' % (concurrency, r + 1, e))
            break
        level['rounds'] += 1
        for key in ('create', 'patch', 'event', 'after_response', 'batches'):
            level[key] += out[key]
        if out['wall'] is not None:
            level['walls'].append(out['wall'])
        if out['server_cpu'] is not None:
            level['server_cpu'].append(out['server_cpu'])
        level['errors'] += ['round %d: %s' % (r + 1, e)
                            for e in out['errors']]
        for k, v in out['counts'].items():
            level['counts'][k] += v
        if out['errors']:
            log('C=%d round %d: %d problem(s), e.g. %s' % (
                concurrency, r + 1, len(out['errors']), out['errors'][0]))
        if args.pause:
            # Jittered, so rounds do not phase-lock with periodic work in
            # the service (e.g. the fake transport's 50 ms polling).
            time.sleep(args.pause * random.uniform(0.5, 1.5))
    return level


def finish_level(level):
    """Raw samples → summaries (raw ms kept for --json)."""
    c = level['concurrency']
    out = {'concurrency': c, 'rounds': level['rounds'],
           'rounds_planned': level['rounds_planned'],
           'binds': len(level['patch']),
           'patch': stats.summarize(level['patch']),
           'event': stats.summarize(level['event']),
           'event_after_response': stats.summarize(level['after_response']),
           'create': stats.summarize(level['create']),
           'round_wall': stats.summarize(level['walls']),
           'events_per_post': {
               'posts': len(level['batches']),
               'mean': round(sum(level['batches']) / len(level['batches']),
                             2) if level['batches'] else None,
               'max': max(level['batches']) if level['batches'] else None},
           'server_cpu_ms_per_bind': round(
               1000 * sum(level['server_cpu']) / len(level['event']), 2)
           if level['server_cpu'] and level['event'] else None,
           'errors': level['errors'][:50],
           'failures': level['counts'],
           'error_count': len(level['errors']),
           'samples_ms': {k: [round(x * 1000, 3) for x in level[k]]
                          for k in ('patch', 'event', 'create')}}
    out['targets'] = {
        'patch_p99_lt_%g_ms' % TARGETS_MS['patch_p99']:
            out['patch'].get('p99_ms', math.inf) < TARGETS_MS['patch_p99'],
        'event_p99_lt_%g_ms' % TARGETS_MS['event_p99']:
            out['event'].get('p99_ms', math.inf) < TARGETS_MS['event_p99'],
    }
    return out


# --------------------------------------------------------------------------
# The floor: the same PATCH bursts against an app that does nothing


class FloorServer:
    """The web server of the deployment under test, serving the no-op app:
    cheroot (10 threads) for aio, gunicorn sync workers for distributed.
    """

    def __init__(self, kind, workers, workdir, timeout=30):
        if kind == 'distributed':
            self.port = net.free_port()
            self.proc = processes.Process(
                'floor', [processes.script('gunicorn'), '--workers',
                          str(workers), '--bind',
                          '%s:%d' % (net.LOOPBACK, self.port),
                          '--log-level', 'warning',
                          'cyborg.wsgi.floor:application'], workdir)
            ready = (lambda: net.reachable(net.LOOPBACK, self.port))
        else:
            self.proc = processes.Process(
                'floor', [sys.executable, '-m', 'cyborg_bench.floor'],
                workdir, stdout_lines=True)
            ready = (lambda: self.proc.stdout)
        try:
            self.proc.wait_for(ready, 'the floor listening', timeout)
        except BaseException:
            self.stop()
            raise
        if kind != 'distributed':
            self.port = int(self.proc.stdout[0])

    def stop(self):
        self.proc.stop()


def measure_floor(kind, workers, plan, request_timeout, workdir):
    """PATCH latency of the bare web server: C threads, each with its own
    keep-alive connection, send Nova's bind body at once, `rounds` times
    per concurrency, like the measured rounds. No service can answer
    faster than this on the same machine with the same client.
    """
    server = FloorServer(kind, workers, workdir)
    try:
        results = {}
        for c, rounds in plan.items():
            clients = [http.local(server.port, timeout=request_timeout)
                       for _ in range(c)]
            samples = []
            for _ in range(rounds):
                barrier = threading.Barrier(c)
                times = [None] * c

                def worker(i):
                    body = http.bind_body(str(uuid.uuid4()), 'host',
                                          str(uuid.uuid4()),
                                          str(uuid.uuid4()))
                    clients[i].request('GET', '/')   # connected, warm
                    barrier.wait()
                    t0 = time.perf_counter()
                    clients[i].request('PATCH', '/', body)
                    times[i] = time.perf_counter() - t0

                threads = [threading.Thread(target=worker, args=(i,))
                           for i in range(c)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                samples += times
                time.sleep(0.1 * random.uniform(0.5, 1.5))
            for client in clients:
                client.close()
            results[c] = stats.summarize(samples)
        return results
    finally:
        server.stop()


# --------------------------------------------------------------------------
# Report


def _deployment_words(meta):
    if meta.get('deployment') == 'distributed':
        return ('distributed (cyborg-api with %d gunicorn worker(s), '
                'cyborg-conductor, cyborg-agent with the fake driver, '
                'Placement; RabbitMQ; %s)' % (meta['api_workers'],
                                              meta['db']))
    return ('cyborg-aio (SQLite, fake driver, in-process oslo.messaging)')


def _floor_table(floor):
    lines = ['', 'Floor: the same PATCH bursts against a WSGI app that does '
             'nothing (cyborg/wsgi/floor.py) on the same web server, from '
             'the same client:', '',
             '| Concurrent instances | floor PATCH p50 | p90 | p99 | max |',
             '|---:|---:|---:|---:|---:|']
    for c, s in sorted(floor.items(), key=lambda kv: int(kv[0])):
        lines.append('| %s | %s | %s | %s | %s |' % (
            c, stats.fmt(s, 'p50_ms'), stats.fmt(s, 'p90_ms'),
            stats.fmt(s, 'p99_ms'), stats.fmt(s, 'max_ms')))
    return lines


def markdown(meta, levels):
    lines = [
        '**Bind latency** — %s, %d card(s) × %d function(s); %s CPU(s) '
        '(%s); Python %s; load average %s → %s'
        % (_deployment_words(meta), meta['devices'], meta['functions'],
           meta['cpus'],
           meta['cpu_model'], meta['python'], meta['loadavg_start'][0],
           meta.get('loadavg_end', ['?'])[0]),
        '',
        '| Concurrent instances | Rounds | Binds | PATCH p50 | p90 | p99 '
        '| max | PATCH→event p50 | p90 | p99 | max | Failures (PATCH ≠ 202 '
        '/ no event / failed event / not Bound / other) |',
        '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ]
    for lv in levels:
        p, e = lv['patch'], lv['event']
        f = lv['failures']
        other = lv['error_count'] - sum(f.values())
        lines.append('| %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s '
                     '| %s |' % (
                         lv['concurrency'], lv['rounds'], lv['binds'],
                         stats.fmt(p, 'p50_ms'), stats.fmt(p, 'p90_ms'),
                         stats.fmt(p, 'p99_ms'), stats.fmt(p, 'max_ms'),
                         stats.fmt(e, 'p50_ms'), stats.fmt(e, 'p90_ms'),
                         stats.fmt(e, 'p99_ms'), stats.fmt(e, 'max_ms'),
                         '%d / %d / %d / %d / %d' % (
                             f['patch_failed'], f['event_missing'],
                             f['event_failed'], f['not_bound'],
                             max(other, 0))))
    lines += ['', 'All times in ms. Targets: PATCH p99 < %g ms, PATCH→event '
              'p99 < %g ms.' % (TARGETS_MS['patch_p99'],
                                TARGETS_MS['event_p99']), '',
              '| Concurrent instances | PATCH p99 < %g ms | event p99 < %g ms '
              '| 202→event p50 / p99 | ARQ create p50 / p99 '
              '| burst wall p50 / max | events per Nova POST (mean / max) '
              '| server CPU ms per bind |'
              % (TARGETS_MS['patch_p99'], TARGETS_MS['event_p99']),
              '|---:|:---:|:---:|---:|---:|---:|---:|---:|']
    for lv in levels:
        t = list(lv['targets'].values())
        a, cr, w = lv['event_after_response'], lv['create'], lv['round_wall']
        epp = lv['events_per_post']
        lines.append('| %d | %s | %s | %s / %s | %s / %s | %s / %s | %s / %s '
                     '| %s |' % (
                         lv['concurrency'],
                         'met' if t[0] else '**missed**',
                         'met' if t[1] else '**missed**',
                         stats.fmt(a, 'p50_ms'), stats.fmt(a, 'p99_ms'),
                         stats.fmt(cr, 'p50_ms'), stats.fmt(cr, 'p99_ms'),
                         stats.fmt(w, 'p50_ms'), stats.fmt(w, 'max_ms'),
                         epp['mean'], epp['max'],
                         lv['server_cpu_ms_per_bind']))
    if meta.get('floor'):
        lines += _floor_table(meta['floor'])
    return '\n'.join(lines)


def parse_rounds(text):
    out = {}
    for part in text.split(','):
        c, r = part.split(':')
        out[int(c)] = int(r)
    return out


# --------------------------------------------------------------------------


def add_arguments(parser):
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: %s rounds per concurrency'
                        % ROUNDS['quick'])
    parser.add_argument('--rounds', type=parse_rounds, metavar='C:R,...',
                        help='concurrency levels and rounds of each '
                             '(default %s)' % ','.join(
                                 '%d:%d' % kv
                                 for kv in ROUNDS['full'].items()))
    parser.add_argument('--warmup-rounds', type=int, default=2,
                        help='unmeasured rounds at concurrency 10 first '
                             '(default 2)')
    parser.add_argument('--devices', type=int, default=16,
                        help='FPGA cards in the host spec (default 16)')
    parser.add_argument('--functions', type=int, default=8,
                        help='PCI functions (attach handles) per card '
                             '(default 8)')
    parser.add_argument('--pause', type=float, default=0.2,
                        help='mean seconds between rounds, jittered ±50%% '
                             '(default 0.2)')
    parser.add_argument('--event-timeout', type=float, default=30.0,
                        help='seconds to wait for a round\'s events '
                             '(default 30)')
    parser.add_argument('--request-timeout', type=float, default=30.0,
                        help='HTTP timeout per request (default 30)')
    parser.add_argument('--max-seconds', type=float, default=900,
                        help='hard bound on the measured rounds; rounds that '
                             'would start later are skipped (default 900)')
    parser.add_argument('--json', metavar='FILE',
                        help='also write the results (with raw samples) as '
                             'JSON')
    parser.add_argument('--py-spy', metavar='FILE',
                        help='record the aio process with py-spy during the '
                             'measured rounds (.svg flamegraph, .json '
                             'speedscope, .txt collapsed stacks)')
    parser.add_argument('--py-spy-rate', type=int, default=250,
                        help='py-spy samples per second (default 250)')
    parser.add_argument('--py-spy-mode', choices=('default', 'idle', 'gil'),
                        default='default',
                        help='py-spy samples: default (active threads), '
                             'idle (all threads: a wall-clock view), gil '
                             '(only the thread holding the GIL: where the '
                             'CPU goes)')
    parser.add_argument('--aio-exe', metavar='COMMAND',
                        help="run this instead of the venv's cyborg-aio "
                             '(same flags appended; for A/B tests of a '
                             'change)')
    parser.add_argument('--deployment', choices=('aio', 'distributed'),
                        default='aio',
                        help='aio: one cyborg-aio process (default); '
                             'distributed: Placement, cyborg-api '
                             '(--api-workers gunicorn workers), '
                             'cyborg-conductor and cyborg-agent as separate '
                             'processes over RabbitMQ at 127.0.0.1:5672')
    parser.add_argument('--api-workers', type=int, default=2,
                        help='distributed: cyborg-api workers (default 2)')
    parser.add_argument('--db', choices=('sqlite', 'mysql', 'postgresql'),
                        default='sqlite',
                        help='distributed: the database (default sqlite)')
    parser.add_argument('--no-floor', dest='floor', action='store_false',
                        help='skip the floor: the same PATCH bursts against '
                             'a no-op app on the same web server')
    parser.add_argument('--keep', action='store_true',
                        help='keep the temp dir (state, aio.log)')
    parser.add_argument('--debug', action='store_true',
                        help='run cyborg-aio with --debug')


def aio_command(text):
    """--aio-exe as an argv (None: the venv's cyborg-aio). A relative
    path is made absolute: cyborg-aio runs in its work directory.
    """
    if not text:
        return None
    argv = shlex.split(text)
    if os.sep in argv[0]:
        argv[0] = os.path.abspath(argv[0])
    return argv


def run(args):
    parser = args.parser
    plan = args.rounds or ROUNDS['quick' if args.quick else 'full']
    capacity = args.devices * args.functions
    if max(plan) > capacity or math.ceil(max(plan) / args.devices) \
            > args.functions:
        parser.error('concurrency %d needs more handles than %d card(s) × %d'
                     % (max(plan), args.devices, args.functions))

    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix='cyborg-bind-bench-')
    receiver = aio = spy = None
    clients = []
    meta = {}
    try:
        spec = os.path.join(workdir, 'host.yaml')
        hostspec.write_fpgas(spec, args.devices, args.functions)
        receiver = nova.NovaEvents()
        log('event receiver on %s' % receiver.url)
        if args.deployment == 'distributed':
            aio = Distributed(distributed.Distributed(
                workdir, database=args.db, host_spec=spec,
                nova_url=receiver.url, api_workers=args.api_workers))
        else:
            aio = Aio(harness_aio.Aio(
                workdir, host_spec=spec, nova_endpoint=receiver.url,
                debug=args.debug,
                cmd=aio_command(args.aio_exe)))
        log('%s ready: %s, %.1fs after start'
            % (args.deployment, aio.api_url, time.perf_counter() - started))

        # noauth: no identity headers is the admin
        admin = http.local(aio.port, aio.prefix,
                           timeout=args.request_timeout)
        clients.append(admin)
        admin.call('POST', '/v2/device_profiles',
                   [{'name': PROFILE_NAME, 'groups': PROFILE_GROUPS}],
                   expect=201)
        deps = http.wait_for_deployables(admin, args.devices)
        devices = admin.call('GET', '/v2/devices')['devices']
        rp_uuids = [d['rp_uuid'] for d in sorted(deps, key=lambda d: d['name'])
                    if d['num_accelerators'] == args.functions]
        hosts = {d['hostname'] for d in devices}
        if len(rp_uuids) != args.devices or len(hosts) != 1:
            raise RuntimeError('expected %d deployables on one host, found '
                               '%d on %s' % (args.devices, len(rp_uuids),
                                             sorted(hosts)))
        [hostname] = hosts
        log('%d deployables (%d handles) on host %s'
            % (len(rp_uuids), capacity, hostname))

        need = max(list(plan) + [10])
        clients += [nova_client(aio.port, aio.prefix, args.request_timeout)
                    for _ in range(need)]
        novas = clients[1:]

        meta = machine.describe()
        meta.update({
            'devices': args.devices, 'functions': args.functions,
            'handles': capacity, 'hostname': hostname,
            'rounds_plan': {str(k): v for k, v in plan.items()},
            'warmup_rounds': args.warmup_rounds,
            'deployment': args.deployment,
            'api_workers': (args.api_workers
                            if args.deployment == 'distributed' else None),
            'db': args.db if args.deployment == 'distributed' else 'sqlite',
            'command': ' '.join(['cyborg-bench'] + sys.argv[1:]),
            'aio_command': aio.cmd,
        })

        for r in range(args.warmup_rounds):
            out = run_round(aio, receiver, novas, min(10, capacity),
                            hostname, rp_uuids, args.event_timeout,
                            args.request_timeout)
            if out['errors']:
                raise RuntimeError('warm-up round failed: %s'
                                   % out['errors'][:3])
        log('warm-up done (%d round(s))' % args.warmup_rounds)

        if args.py_spy:
            spy = PySpy(aio.pid, os.path.abspath(args.py_spy),
                        args.py_spy_rate, workdir, mode=args.py_spy_mode)
            log('py-spy recording to %s' % args.py_spy)

        deadline = time.monotonic() + args.max_seconds
        levels = []
        for c, rounds in plan.items():
            t0 = time.perf_counter()
            level = finish_level(run_level(aio, receiver, novas, c, rounds,
                                           hostname, rp_uuids, args,
                                           deadline))
            levels.append(level)
            log('C=%-3d %d round(s) %5.1fs  PATCH p50 %6.1f p99 %6.1f ms  '
                'event p50 %6.1f p99 %6.1f ms  errors %d' % (
                    c, level['rounds'], time.perf_counter() - t0,
                    level['patch'].get('p50_ms', math.nan),
                    level['patch'].get('p99_ms', math.nan),
                    level['event'].get('p50_ms', math.nan),
                    level['event'].get('p99_ms', math.nan),
                    level['error_count']))
        if spy is not None:
            spy.stop()
            log('py-spy wrote %s' % args.py_spy)
            spy = None

        if args.floor:
            meta['floor'] = {str(c): v for c, v in measure_floor(
                args.deployment, args.api_workers, plan,
                args.request_timeout, workdir).items()}
            log('floor measured')
        meta['loadavg_end'] = machine.loadavg()
        meta['event_versions'] = sorted(
            '%s | %s' % v for v in receiver.versions)
        meta['duplicate_events'] = len(receiver.duplicates)
        meta['refused_events'] = receiver.refused[:10]
        meta['aio_log_problems'] = aio.log_problems()[:50]
        meta['total_seconds'] = round(time.perf_counter() - started, 1)

        print(markdown(meta, levels))
        print('\nTotal run time %.1fs; event microversion headers %s; '
              'duplicate events %d; aio log problem lines %d'
              % (meta['total_seconds'], meta['event_versions'],
                 meta['duplicate_events'], len(meta['aio_log_problems'])))
        for line in meta['aio_log_problems'][:10]:
            print('    ' + line)
        # A duplicate event is allowed (delivery is at-least-once): shown,
        # not a failure.
        failed = sum(lv['error_count'] for lv in levels) \
            + len(receiver.refused)
        for lv in levels:
            for e in lv['errors'][:5]:
                print('    C=%d: %s' % (lv['concurrency'], e))
        if args.json:
            with open(args.json, 'w') as f:
                json.dump({'meta': meta, 'levels': levels}, f, indent=2)
            log('wrote %s' % args.json)
        return 1 if failed else 0
    finally:
        if spy is not None:
            spy.stop()
        for client in clients:
            client.close()
        if aio is not None:
            aio.stop()
        if receiver is not None:
            receiver.stop()
        if args.keep:
            log('kept %s' % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
