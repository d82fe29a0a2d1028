# SPDX-License-Identifier: Apache-2.0
"""Soak: cyborg-aio under a mixed boot/delete load for minutes.

    cyborg-bench soak [--minutes 10] [--workers 4] [--json FILE]

Starts ``cyborg-aio --no-demo --metrics-port 0`` (SQLite, in-process
messaging and Placement, fake FPGA cards) with its Nova events sent to a
receiver in this process, then runs `--workers` loops of what Nova does to
boot and delete a server with accelerators: POST ARQs of a one- or
two-device profile (picked at random), PATCH them bound to a new instance,
wait for the accelerator-request-bound events, check the ARQs are Bound,
DELETE them by instance. Any unexpected answer, BindFailed or missing
event is an error.

Every `--sample` seconds (30) it samples the aio process: resident memory,
open file descriptors (sockets and SQLite files apart: the latter are its
database connections), threads; plus cycles and errors so far. It prints
the table and a JSON summary.

Exit status 1 when there was any error, or when from the first sample
after `--warmup` seconds (60) to the last one the process grew beyond the
thresholds: resident memory by more than 10% + 16 MiB, file descriptors
(sockets, database connections) by more than 8, threads by more than 4.
"""

import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid

from cyborg_harness import aio as harness_aio
from cyborg_harness import nova
from cyborg_harness import stats

from cyborg_bench import client as http
from cyborg_bench import hostspec
from cyborg_bench import machine

PROFILES = {'soak-one': [{'resources:FPGA': '1'}],
            'soak-two': [{'resources:FPGA': '2'}]}
RSS_GROWTH = (0.10, 16.0)      # fraction, plus MiB
FD_GROWTH = 8
THREAD_GROWTH = 4


def log(msg):
    print('[cyborg-bench soak %s] %s' % (time.strftime('%H:%M:%S'), msg),
          file=sys.stderr, flush=True)


def sample_process(pid):
    """RSS (MiB), fds by kind, threads of a live process (Linux /proc)."""
    status = {}
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            key, _, value = line.partition(':')
            status[key] = value.strip()
    fds = sockets = sqlite = 0
    fd_dir = '/proc/%d/fd' % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        fds += 1
        if target.startswith('socket:'):
            sockets += 1
        elif '.sqlite' in target:
            sqlite += 1
    return {'rss_mib': round(int(status['VmRSS'].split()[0]) / 1024.0, 1),
            'fds': fds, 'sockets': sockets, 'db_files': sqlite,
            'threads': int(status['Threads'])}


class Load:
    """The boot/delete loops and their counters."""

    def __init__(self, aio, receiver, hostname, rp_uuids, workers):
        self.aio, self.receiver = aio, receiver
        self.hostname, self.rp_uuids = hostname, rp_uuids
        self.workers = workers
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.cycles = 0
        self.errors = []
        self.seconds = []
        self.threads = []

    def start(self):
        for i in range(self.workers):
            t = threading.Thread(target=self._loop, name='soak-%d' % i,
                                 daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(60)

    def _loop(self):
        client = self._client()
        rng = random.Random()
        try:
            while not self.stopping.is_set():
                started = time.perf_counter()
                try:
                    self._cycle(client, rng)
                except Exception as e:  # noqa: B902 - counted and reported
                    with self.lock:
                        self.errors.append('%s: %s' % (type(e).__name__,
                                                       str(e)[:300]))
                    client.close()
                    continue
                with self.lock:
                    self.cycles += 1
                    self.seconds.append(time.perf_counter() - started)
        finally:
            client.close()

    def _client(self):
        return http.local(self.aio.port, self.aio.prefix, http.NOVA_HEADERS,
                          timeout=30)

    @staticmethod
    def _expect(client, method, path, body, status):
        got, payload = client.request(method, path, body)
        if got != status:
            raise RuntimeError('%s %s -> %d: %s' % (method, path, got,
                                                    payload[:300]))
        return json.loads(payload) if payload else None

    def _cycle(self, client, rng):
        profile = rng.choice(sorted(PROFILES))
        arqs = self._expect(client, 'POST', '/v2/accelerator_requests',
                            {'device_profile_name': profile}, 201)['arqs']
        instance = str(uuid.uuid4())
        rp = rng.choice(self.rp_uuids)
        body = {}
        for arq in arqs:
            body.update(http.bind_body(arq['uuid'], self.hostname, rp,
                                       instance))
        self._expect(client, 'PATCH', '/v2/accelerator_requests', body, 202)
        tags = [a['uuid'] for a in arqs]
        if not self.receiver.wait_for(tags, 30):
            raise RuntimeError('no event for %s within 30 s' % tags)
        got = self._expect(client, 'GET',
                           '/v2/accelerator_requests?instance=%s'
                           '&bind_state=resolved' % instance, None, 200)
        states = sorted({a['state'] for a in got['arqs']})
        if states != ['Bound'] or len(got['arqs']) != len(arqs):
            raise RuntimeError('instance %s ended %s' % (instance, states))
        self._expect(client, 'DELETE', '/v2/accelerator_requests?instance=%s'
                     % instance, None, 204)

    def counters(self):
        with self.lock:
            seconds = sorted(self.seconds)
            self.seconds = []
            return self.cycles, len(self.errors), seconds


def growth(first, last):
    """Which thresholds the run broke, from `first` to `last` sample."""
    broken = []
    limit = first['rss_mib'] * (1 + RSS_GROWTH[0]) + RSS_GROWTH[1]
    if last['rss_mib'] > limit:
        broken.append('rss %.1f > %.1f MiB' % (last['rss_mib'], limit))
    for key in ('fds', 'sockets', 'db_files'):
        if last[key] > first[key] + FD_GROWTH:
            broken.append('%s %d > %d' % (key, last[key],
                                          first[key] + FD_GROWTH))
    if last['threads'] > first['threads'] + THREAD_GROWTH:
        broken.append('threads %d > %d' % (last['threads'],
                                           first['threads'] + THREAD_GROWTH))
    return broken


def table(samples):
    head = ('t_s', 'cycles', 'cycles_per_s', 'cycle_p50_ms', 'cycle_p99_ms',
            'errors', 'rss_mib', 'fds', 'sockets', 'db_files', 'threads')
    lines = ['| ' + ' | '.join(head) + ' |',
             '|' + '---:|' * len(head)]
    for s in samples:
        lines.append('| ' + ' | '.join(str(s[k]) for k in head) + ' |')
    return '\n'.join(lines)


def add_arguments(parser):
    parser.add_argument('--minutes', type=float, default=10.0)
    parser.add_argument('--workers', type=int, default=4)
    parser.add_argument('--sample', type=float, default=30.0,
                        help='seconds between samples (default 30)')
    parser.add_argument('--warmup', type=float, default=60.0,
                        help='seconds before the baseline sample')
    parser.add_argument('--json', metavar='FILE',
                        help='also write the JSON summary here')
    parser.add_argument('--keep', action='store_true',
                        help='keep the work directory (aio log, state)')


def run(args):

    workdir = tempfile.mkdtemp(prefix='cyborg-soak-')
    spec = os.path.join(workdir, 'host.yaml')
    hostspec.write_fpgas(spec, devices=4, functions=16)
    receiver = nova.NovaEvents()
    aio = load = None
    try:
        aio = harness_aio.Aio(workdir, host_spec=spec,
                              nova_endpoint=receiver.url)
        log('cyborg-aio pid %d at %s' % (aio.pid, aio.api_url))
        admin = http.local(aio.port, aio.prefix, timeout=30)
        for name, groups in PROFILES.items():
            status, payload = admin.request(
                'POST', '/v2/device_profiles',
                [{'name': name, 'groups': groups}])
            if status != 201:
                raise RuntimeError('profile %s: %d %s' % (name, status,
                                                          payload[:300]))
        deps = http.wait_for_deployables(admin, 4)
        hostname = admin.call('GET', '/v2/devices')['devices'][0]['hostname']
        admin.close()
        load = Load(aio, receiver, hostname,
                    [d['rp_uuid'] for d in deps], args.workers)
        samples = []
        started = time.monotonic()
        load.start()
        end = started + args.minutes * 60
        next_at = started
        while True:
            now = time.monotonic()
            if now >= next_at or now >= end:
                cycles, errors, seconds = load.counters()
                s = dict(sample_process(aio.pid), t_s=round(now - started),
                         cycles=cycles, errors=errors)
                previous = samples[-1] if samples else None
                span = (now - started) - (previous['t_s'] if previous
                                          else 0)
                done = cycles - (previous['cycles'] if previous else 0)
                s['cycles_per_s'] = round(done / span, 1) if span else 0
                s['cycle_p50_ms'] = round(1000 * stats.percentile(
                    seconds, 50), 1) if seconds else None
                s['cycle_p99_ms'] = round(1000 * stats.percentile(
                    seconds, 99), 1) if seconds else None
                samples.append(s)
                log('t=%(t_s)ss cycles=%(cycles)s errors=%(errors)s '
                    'rss=%(rss_mib)sMiB fds=%(fds)s threads=%(threads)s' % s)
                next_at += args.sample
                if now >= end:
                    break
            if aio.proc.poll() is not None:
                raise RuntimeError('cyborg-aio exited: %s'
                                   % aio.log_tail())
            time.sleep(min(1.0, max(0.0, min(next_at, end) - now)))
        load.stop()
        baseline = next((s for s in samples if s['t_s'] >= args.warmup),
                        samples[0])
        broken = growth(baseline, samples[-1])
        result = {
            'minutes': args.minutes, 'workers': args.workers,
            'cycles': samples[-1]['cycles'], 'errors': len(load.errors),
            'first_errors': load.errors[:10],
            'duplicate_events': len(receiver.duplicates),
            'baseline_t_s': baseline['t_s'],
            'thresholds': {'rss': '+%d%% +%.0f MiB' % (
                RSS_GROWTH[0] * 100, RSS_GROWTH[1]),
                'fds_sockets_db_files': '+%d' % FD_GROWTH,
                'threads': '+%d' % THREAD_GROWTH},
            'broken': broken, 'samples': samples,
            'revision': machine.git_revision(),
            'log_problems': aio.problems()[:20],
        }
        print(table(samples))
        print(json.dumps(result, indent=1))
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(result, f, indent=1)
        ok = not load.errors and not broken
        log('%s: %d cycles, %d errors%s' % (
            'OK' if ok else 'FAILED', result['cycles'], result['errors'],
            '; grew: ' + ', '.join(broken) if broken else ''))
        return 0 if ok else 1
    finally:
        if load is not None:
            load.stop()
        if aio is not None:
            aio.stop()
        receiver.stop()
        if args.keep:
            log('work directory kept: %s' % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
