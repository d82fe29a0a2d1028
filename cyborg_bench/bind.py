#!/usr/bin/env python3
"""Bind latency benchmark: Nova's PATCH, and PATCH → accelerator-request-bound.

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
py-spy`` into the venv first); ``--experiment NAME`` starts cyborg-aio with
a candidate fix monkeypatched in (see EXPERIMENTS; the repository's code is
not changed), for A/B runs. See docs/bind-latency.md for results.

Examples::

    .venv/bin/python benchmarks/bind_bench.py --quick
    .venv/bin/python benchmarks/bind_bench.py --json /tmp/bind.json
    .venv/bin/python benchmarks/bind_bench.py --rounds 1:100,10:30,100:10
    .venv/bin/python benchmarks/bind_bench.py --rounds 10:20 \
        --py-spy /tmp/aio.txt --py-spy-mode gil
    .venv/bin/python benchmarks/bind_bench.py --experiment wal \
        --experiment fake-notify

The client threads and the receiver run in this process, on the same
machine as the service: on a small machine they compete with it for CPU,
as Nova would. Latencies use one clock (time.perf_counter) for sends and
arrivals. Exit status 0 when every bind was verified (targets missed or not),
1 otherwise.
"""

import argparse
import datetime
import http.server
import json
import math
import os
import platform
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from cyborg_bench import events as bench_events

import _common
import _distributed

HOST = '127.0.0.1'
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVENT_PATH = '/os-server-external-events'
EVENT_NAME = 'accelerator-request-bound'
PROFILE_NAME = 'bind-bench-fpga'
PROFILE_GROUPS = [{'resources:FPGA': '1',
                   'trait:CUSTOM_FAKE_DEVICE': 'required'}]
PROJECT = 'bind-bench-project'
# Nova's identity on its calls to the accelerator API (service token).
NOVA_HEADERS = {'X-Roles': 'member', 'X-Service-Roles': 'service',
                'X-Project-Id': PROJECT, 'X-User-Id': 'nova',
                'Content-Type': 'application/json'}
TARGETS_MS = {'patch_p99': 20.0, 'event_p99': 100.0}

# concurrency -> rounds
ROUNDS = {
    'full': {1: 50, 10: 20, 100: 5},
    'quick': {1: 5, 10: 2, 100: 1},
}


def log(msg):
    print('[bind-bench %s] %s' % (time.strftime('%H:%M:%S'), msg),
          file=sys.stderr, flush=True)


def summary(values_s):
    """p50/p90/p99/max/mean in ms of a list of seconds."""
    v = sorted(values_s)
    if not v:
        return {'n': 0}
    ms = lambda x: round(x * 1000, 2)  # noqa: E731
    return {'n': len(v), 'p50_ms': ms(_common.percentile(v, 50)),
            'p90_ms': ms(_common.percentile(v, 90)),
            'p99_ms': ms(_common.percentile(v, 99)),
            'max_ms': ms(v[-1]), 'mean_ms': ms(sum(v) / len(v))}


# --------------------------------------------------------------------------
# The host spec


def write_host_spec(path, devices, functions):
    """FPGA cards on buses 0x20.., each with `functions` functions (the
    fake driver numbers them device*8+function from the card's address, so
    8 functions fill one PCI device slot)."""
    if not 1 <= devices <= 0xdf:
        raise ValueError('--devices must be 1..223')
    lines = ['# Written by benchmarks/bind_bench.py', 'devices:']
    for i in range(devices):
        lines += ['  - type: FPGA',
                  '    vendor_id: "0xabcd"',
                  '    product_id: "0xabcd"',
                  '    model: Bind bench FPGA',
                  '    pci_address: "0000:%02x:00.0"' % (0x20 + i),
                  '    numa_node: %d' % (i % 2),
                  '    functions: %d' % functions,
                  '    traits: [CUSTOM_FAKE_DEVICE]']
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')


# --------------------------------------------------------------------------
# Nova's events API, recording arrivals


class EventReceiver:
    """POST /os-server-external-events → 200, every event code 200.

    arrivals: tag → (perf_counter at arrival, event); the first event per
    tag counts, later ones are counted in `duplicates`.
    """

    def __init__(self):
        self.cond = threading.Condition()
        self.arrivals = {}
        self.duplicates = []
        self.batches = []      # (perf_counter, events in the POST)
        self.versions = set()  # microversion headers seen
        self.bad_requests = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'  # keep-alive, as Nova's API

            def do_POST(self):
                length = int(self.headers.get('Content-Length') or 0)
                raw = self.rfile.read(length)
                now = time.perf_counter()
                try:
                    events = json.loads(raw)['events']
                    if not isinstance(events, list):
                        raise TypeError('events is not a list')
                except (ValueError, KeyError, TypeError) as e:
                    receiver.bad_requests.append('%s: %r' % (e, raw[:200]))
                    self._answer(400, {'badRequest': {'message': str(e)}})
                    return
                if self.path.rstrip('/').rsplit('/', 1)[-1] != \
                        EVENT_PATH.lstrip('/'):
                    receiver.bad_requests.append('path %s' % self.path)
                    self._answer(404, {'itemNotFound': {}})
                    return
                receiver.record(now, events, self.headers)
                self._answer(200, {'events': [dict(e, code=200)
                                              for e in events]})

            def _answer(self, status, body):
                bench_events.reply_json(self, status, body)

            def log_message(self, fmt, *args):
                pass

        self.server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        name='event-receiver', daemon=True)

    @property
    def url(self):
        return 'http://%s:%d' % self.server.server_address[:2]

    def start(self):
        self._thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def record(self, now, events, headers):
        with self.cond:
            self.batches.append((now, len(events)))
            self.versions.add((headers.get('OpenStack-API-Version'),
                               headers.get('X-OpenStack-Nova-API-Version')))
            for e in events:
                tag = e.get('tag')
                if tag in self.arrivals:
                    self.duplicates.append(e)
                else:
                    self.arrivals[tag] = (now, e)
            self.cond.notify_all()

    def wait_for(self, tags, timeout):
        """True once every tag arrived; False at the timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                if all(t in self.arrivals for t in tags):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)


# --------------------------------------------------------------------------
# Experiments: candidate fixes applied to the aio process at start-up
# (monkeypatches in the child only; the service code is not changed).

EXPERIMENTS = {
    'wal': 'SQLite journal_mode=WAL (kept in the database file; commits '
           'stay durable: synchronous is still FULL)',
    'sync-normal': 'SQLite synchronous=NORMAL on every connection (with '
                   'WAL: no fsync per commit, only at checkpoints)',
    'fake-notify': 'oslo.messaging fake:// listeners wake on delivery '
                   'instead of polling every 50 ms',
}


def apply_experiments(names):
    import sqlite3

    pragmas = []
    if 'wal' in names:
        pragmas.append('PRAGMA journal_mode=WAL')
    if 'sync-normal' in names:
        pragmas.append('PRAGMA synchronous=NORMAL')
    if pragmas:
        import sqlalchemy as sa

        @sa.event.listens_for(sa.engine.Engine, 'connect')
        def _pragmas(dbapi_conn, record):
            if isinstance(dbapi_conn, sqlite3.Connection):
                for pragma in pragmas:
                    dbapi_conn.execute(pragma).close()

    if 'fake-notify' in names:
        from oslo_messaging._drivers import base as drv_base
        from oslo_messaging._drivers import impl_fake

        cond = threading.Condition()
        generation = [0]
        deliver = impl_fake.FakeExchange.deliver_message

        def deliver_message(self, *a, **kw):
            result = deliver(self, *a, **kw)
            with cond:
                generation[0] += 1
                cond.notify_all()
            return result

        def poll(self, timeout=None):
            # impl_fake.FakeListener.poll, waiting on `cond` instead of
            # time.sleep(0.05).
            deadline = None if timeout is None else time.time() + timeout
            while not self._stopped.is_set():
                with cond:
                    seen = generation[0]
                for target in self._targets:
                    exchange = self._exchange_manager.get_exchange(
                        target.exchange)
                    ctxt, message, reply_q, requeue = exchange.poll(
                        target, self._pool)
                    if message is not None:
                        return impl_fake.FakeIncomingMessage(
                            ctxt, message, reply_q, requeue)
                pause = 0.050
                if deadline is not None:
                    pause = min(deadline - time.time(), 0.050)
                    if pause < 0:
                        break
                with cond:
                    if generation[0] == seen:
                        cond.wait(pause)
            return None

        impl_fake.FakeExchange.deliver_message = deliver_message
        impl_fake.FakeListener.poll = drv_base.batch_poll_helper(poll)


def run_aio_child(argv):
    """`bind_bench.py --run-aio EXP[,EXP] -- AIO ARGS`: cyborg-aio with
    the experiments applied."""
    names = [n for n in argv[0].split(',') if n and n != 'none']
    unknown = set(names) - set(EXPERIMENTS)
    if unknown:
        sys.exit('unknown experiment(s) %s' % sorted(unknown))
    apply_experiments(names)
    from cyborg.cmd import aio
    return aio.main(argv[2:] if argv[1:2] == ['--'] else argv[1:])


# --------------------------------------------------------------------------
# The service


class Aio:
    """cyborg-aio in a subprocess (its own session), stderr to a log."""

    def __init__(self, workdir, spec, nova_url, timeout=90.0, debug=False,
                 exe=None, experiments=()):
        self.log_path = os.path.join(workdir, 'aio.log')
        self._log = open(self.log_path, 'wb')
        if exe:
            cmd = exe.split()
        elif experiments:
            cmd = [sys.executable, os.path.abspath(__file__), '--run-aio',
                   ','.join(experiments), '--']
        else:
            exe = os.path.join(os.path.dirname(sys.executable), 'cyborg-aio')
            cmd = [exe] if os.path.exists(exe) else [
                sys.executable, '-m', 'cyborg.cmd.aio']
        cmd += ['--no-demo', '--nova-endpoint', nova_url,
                '--host-spec', spec,
                '--state-dir', os.path.join(workdir, 'state'),
                '--port', '0', '--placement-port', '0',
                '--metrics-port', '0']
        if debug:
            cmd.append('--debug')
        self.cmd = cmd
        env = dict(os.environ, PYTHONUNBUFFERED='1',
                   PYTHONWARNINGS='ignore')
        self.proc = subprocess.Popen(cmd, cwd=workdir, env=env,
                                     stdout=subprocess.PIPE,
                                     stderr=self._log,
                                     start_new_session=True)
        self.api_url = self.placement_url = None
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()  # also on Ctrl-C: never leave it running
            raise
        rest = self.api_url.split('//', 1)[1]
        hostport, self.prefix = rest.split('/', 1)
        self.prefix = '/' + self.prefix.rstrip('/')
        self.port = int(hostport.rsplit(':', 1)[1])

    def _wait_ready(self, timeout):
        lines = queue.Queue()
        threading.Thread(target=self._pump, args=(lines,), daemon=True,
                         name='aio-stdout').start()
        deadline = time.monotonic() + timeout
        while self.api_url is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError('cyborg-aio printed no ready line within '
                                   '%.0fs:\n%s' % (timeout, self.log_tail()))
            try:
                line = lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise RuntimeError('cyborg-aio exited with %s:\n%s' % (
                        self.proc.returncode, self.log_tail()))
                continue
            if line is not None and 'cyborg-aio ready:' in line:
                for word in line.split():
                    if word.startswith('api='):
                        self.api_url = word[4:]
                    elif word.startswith('placement='):
                        self.placement_url = word[10:]

    def _pump(self, lines):
        try:
            for raw in self.proc.stdout:
                lines.put(raw.decode(errors='replace').strip())
        except (OSError, ValueError):  # closed by stop()
            pass
        lines.put(None)

    @property
    def pid(self):
        return self.proc.pid

    def cpu_seconds(self):
        """user+system CPU time of the aio process so far."""
        try:
            with open('/proc/%d/stat' % self.proc.pid) as f:
                fields = f.read().rsplit(')', 1)[1].split()
            ticks = os.sysconf('SC_CLK_TCK')
            return (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, ValueError, IndexError):
            return None

    def log_tail(self, lines=40):
        if not self._log.closed:
            self._log.flush()
        with open(self.log_path, errors='replace') as f:
            return ''.join(f.readlines()[-lines:])

    def log_problems(self):
        if not self._log.closed:
            self._log.flush()
        keys = ('Traceback', 'ERROR', 'CRITICAL', 'WARNING', 'locked')
        with open(self.log_path, errors='replace') as f:
            return [line.rstrip() for line in f
                    if any(k in line for k in keys)]

    def stop(self):
        _distributed.stop_group(self.proc, on_kill=lambda: log(
            'cyborg-aio did not stop within 20 s of SIGTERM; killing it'))
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()


class PySpy:
    """py-spy record attached to the aio process for the measured rounds."""

    def __init__(self, pid, output, rate, workdir, mode='default'):
        exe = os.path.join(os.path.dirname(sys.executable), 'py-spy')
        if not os.path.exists(exe):
            exe = shutil.which('py-spy')
        if not exe:
            raise RuntimeError('py-spy not found (pip install py-spy into '
                               'the venv)')
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
# Client


class Client(_common.Client):
    """One keep-alive connection with Nova's headers."""

    def __init__(self, port, prefix, timeout):
        super().__init__(port, timeout, prefix=prefix, headers=NOVA_HEADERS)

    def json(self, method, path, body=None, expect=200, headers=None):
        status, payload = self.request(method, path, body, headers)
        if status != expect:
            raise RuntimeError('%s %s -> %s (expected %s): %s' % (
                method, path, status, expect, payload[:500]))
        return json.loads(payload) if payload else None


def bind_body(arq_uuid, hostname, rp_uuid, instance):
    """What Nova's cyborg client PATCHes (one instance per PATCH)."""
    return {arq_uuid: [
        {'path': '/hostname', 'op': 'add', 'value': hostname},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]}


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
            body = client.json('POST', '/accelerator_requests',
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
        body = bind_body(arqs[i], hostname, rps[i], instances[i])
        t0 = time.perf_counter()
        try:
            status, payload = client.request('PATCH', '/accelerator_requests',
                                             body)
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
    with receiver.cond:
        batch_sizes = [n for _, n in receiver.batches[batches0:]]

    # Verify (the way Nova looks ARQs up), then free the handles.
    verifier = clients[0]
    handles = {}
    for i, instance in enumerate(instances):
        if not accepted[i]:
            continue
        try:
            found = verifier.json(
                'GET', '/accelerator_requests?instance=%s' % instance)['arqs']
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
            verifier.json('DELETE', '/accelerator_requests?instance=%s'
                          % instance, expect=204)
        except Exception as e:  # noqa: BLE001 - reported
            errors.append('DELETE ?instance=%s: %s' % (instance, e))
    for i, arq in enumerate(arqs):
        # ARQs whose instance was never bound (a failed PATCH).
        if arq is not None and not accepted[i]:
            try:
                verifier.json('DELETE', '/accelerator_requests?arqs=%s' % arq,
                              expect=204)
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
           'patch': summary(level['patch']),
           'event': summary(level['event']),
           'event_after_response': summary(level['after_response']),
           'create': summary(level['create']),
           'round_wall': summary(level['walls']),
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


def serve_floor_child():
    """`bind_bench.py --serve-floor`: cyborg.wsgi.floor on cheroot with
    cyborg-aio's thread count; prints the port."""
    from cyborg.common import wsgi_server
    from cyborg.wsgi import floor
    server = wsgi_server.ThreadedServer('floor', floor.application)
    server.start()
    print(server.port, flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop()
    return 0


class FloorServer:
    """The web server of the deployment under test, serving the no-op app:
    cheroot (10 threads) for aio, gunicorn sync workers for distributed."""

    def __init__(self, deployment, workers):
        bindir = os.path.dirname(sys.executable)
        if deployment == 'distributed':
            with socket.socket() as sock:
                sock.bind(('127.0.0.1', 0))
                self.port = sock.getsockname()[1]
            cmd = [os.path.join(bindir, 'gunicorn'), '--workers',
                   str(workers), '--bind', '127.0.0.1:%d' % self.port,
                   '--log-level', 'warning', 'cyborg.wsgi.floor:application']
            self.proc = subprocess.Popen(cmd, start_new_session=True,
                                         stdout=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while not _listening(self.port):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError('gunicorn (floor) did not start')
                time.sleep(0.1)
        else:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), '--serve-floor'],
                stdout=subprocess.PIPE, text=True, start_new_session=True)
            self.port = int(self.proc.stdout.readline())

    def stop(self):
        _distributed.stop_group(self.proc)


def _listening(port):
    with socket.socket() as sock:
        return sock.connect_ex(('127.0.0.1', port)) == 0


def measure_floor(deployment, workers, plan, request_timeout):
    """PATCH latency of the bare web server: C threads, each with its own
    keep-alive connection, send Nova's bind body at once, `rounds` times
    per concurrency, like the measured rounds. No service can answer
    faster than this on the same machine with the same client."""
    server = FloorServer(deployment, workers)
    try:
        results = {}
        for c, rounds in plan.items():
            clients = [Client(server.port, '', request_timeout)
                       for _ in range(c)]
            samples = []
            for _ in range(rounds):
                barrier = threading.Barrier(c)
                times = [None] * c

                def worker(i):
                    body = bind_body(str(uuid.uuid4()), 'host',
                                     str(uuid.uuid4()), str(uuid.uuid4()))
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
            results[c] = summary(samples)
        return results
    finally:
        server.stop()


# --------------------------------------------------------------------------
# Report


def _fmt(s, key):
    v = s.get(key)
    return '—' if v is None else '%.1f' % v


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
            c, _fmt(s, 'p50_ms'), _fmt(s, 'p90_ms'), _fmt(s, 'p99_ms'),
            _fmt(s, 'max_ms')))
    return lines


def markdown(meta, levels):
    lines = [
        '**Bind latency** — %s, %d card(s) × %d function(s); %s CPU(s) '
        '(%s); Python %s; load average %s → %s'
        % (_deployment_words(meta), meta['devices'], meta['functions'],
           meta['cpus'],
           meta['cpu_model'], meta['python'], meta['loadavg_start'][0],
           meta.get('loadavg_end', ['?'])[0])
        + ('; **experiments: %s** (not the shipped code)'
           % ', '.join(meta['experiments']) if meta.get('experiments')
           else ''),
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
                         _fmt(p, 'p50_ms'), _fmt(p, 'p90_ms'),
                         _fmt(p, 'p99_ms'), _fmt(p, 'max_ms'),
                         _fmt(e, 'p50_ms'), _fmt(e, 'p90_ms'),
                         _fmt(e, 'p99_ms'), _fmt(e, 'max_ms'),
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
                         _fmt(a, 'p50_ms'), _fmt(a, 'p99_ms'),
                         _fmt(cr, 'p50_ms'), _fmt(cr, 'p99_ms'),
                         _fmt(w, 'p50_ms'), _fmt(w, 'max_ms'),
                         epp['mean'], epp['max'],
                         lv['server_cpu_ms_per_bind']))
    if meta.get('floor'):
        lines += _floor_table(meta['floor'])
    return '\n'.join(lines)


def _cpu_model():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def wait_for_deployables(client, headers, count, timeout=60.0):
    """The agent's first report may land after the API answers."""
    deadline = time.monotonic() + timeout
    while True:
        deps = client.json('GET', '/deployables',
                           headers=headers)['deployables']
        if len(deps) >= count or time.monotonic() > deadline:
            return deps
        time.sleep(0.3)


def parse_rounds(text):
    out = {}
    for part in text.split(','):
        c, r = part.split(':')
        out[int(c)] = int(r)
    return out


# --------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
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
    parser.add_argument('--experiment', action='append', default=[],
                        choices=sorted(EXPERIMENTS),
                        help='apply a candidate fix to the aio process '
                             '(monkeypatch at start-up; may be repeated): '
                             + '; '.join('%s: %s' % kv
                                         for kv in EXPERIMENTS.items()))
    parser.add_argument('--aio-exe', metavar='COMMAND',
                        help='run this instead of the venv\'s cyborg-aio '
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
    args = parser.parse_args(argv)
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
        write_host_spec(spec, args.devices, args.functions)
        receiver = EventReceiver()
        receiver.start()
        log('event receiver on %s' % receiver.url)
        if args.deployment == 'distributed':
            aio = _distributed.Distributed(workdir, spec, receiver.url,
                                           db=args.db,
                                           api_workers=args.api_workers)
        else:
            aio = Aio(workdir, spec, receiver.url, debug=args.debug,
                      exe=args.aio_exe, experiments=args.experiment)
        log('%s ready: %s, %.1fs after start'
            % (args.deployment, aio.api_url, time.perf_counter() - started))

        admin = Client(aio.port, aio.prefix, args.request_timeout)
        clients.append(admin)
        admin_headers = {'Content-Type': 'application/json'}  # noauth admin
        admin.json('POST', '/device_profiles',
                   [{'name': PROFILE_NAME, 'groups': PROFILE_GROUPS}],
                   expect=201, headers=admin_headers)
        deps = wait_for_deployables(admin, admin_headers, args.devices)
        devices = admin.json('GET', '/devices',
                             headers=admin_headers)['devices']
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
        clients = [admin] + [Client(aio.port, aio.prefix,
                                    args.request_timeout)
                             for _ in range(need - 1)]

        meta = {
            'devices': args.devices, 'functions': args.functions,
            'handles': capacity, 'hostname': hostname,
            'rounds_plan': {str(k): v for k, v in plan.items()},
            'warmup_rounds': args.warmup_rounds,
            'experiments': args.experiment,
            'deployment': args.deployment,
            'api_workers': (args.api_workers
                            if args.deployment == 'distributed' else None),
            'db': args.db if args.deployment == 'distributed' else 'sqlite',
            'cpus': os.cpu_count(), 'cpu_model': _cpu_model(),
            'python': platform.python_version(),
            'platform': platform.platform(),
            'git': _common.git_revision(),
            'command': ' '.join(['benchmarks/bind_bench.py'] + list(
                sys.argv[1:] if argv is None else argv)),
            'aio_command': aio.cmd,
            'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec='seconds'),
            'loadavg_start': [round(x, 2) for x in os.getloadavg()],
        }

        for r in range(args.warmup_rounds):
            out = run_round(aio, receiver, clients, min(10, capacity),
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
            level = finish_level(run_level(aio, receiver, clients, c, rounds,
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
                args.request_timeout).items()}
            log('floor measured')
        meta['loadavg_end'] = [round(x, 2) for x in os.getloadavg()]
        meta['event_versions'] = sorted(
            '%s | %s' % v for v in receiver.versions)
        meta['duplicate_events'] = len(receiver.duplicates)
        meta['bad_event_requests'] = receiver.bad_requests[:10]
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
            + len(receiver.bad_requests)
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


if __name__ == '__main__':
    if sys.argv[1:2] == ['--run-aio']:
        sys.exit(run_aio_child(sys.argv[2:]))
    if sys.argv[1:2] == ['--serve-floor']:
        sys.exit(serve_floor_child())
    # SIGTERM ends the run like Ctrl-C: the finally blocks stop cyborg-aio
    # and remove the temp dir.
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    sys.exit(main())
