# SPDX-License-Identifier: Apache-2.0
"""NVIDIA driver on the fake NVML: discovery, and bind/release.

Everything runs in this process, over the fake GPU host
(cyborg_emulators.nvidia.fake_sysfs.FakeGpuHost: a fake sysfs tree and a
fake NVML C layer under the real nvidia-ml-py bindings). No GPU is used, so
the times are those of our code, the bindings and the fake, not of a real
libnvidia-ml; the NVML call counts carry over to hardware as they are.

1. Discovery: ``NvidiaDriver.discover()`` on a host of 1 and of 8 fake
   H200s (``--gpus``) with MIG mode on, (a) with no GPU instances, (b) with
   3g.71gb + 2g.35gb + 1g.18gb + 1g.18gb on every GPU (made by the driver's
   own ``prepare()``, so they are owned, not orphans), ``--discovery-runs``
   times each after one warm-up call. Reported: ms per discovery
   (p50/p90/p99/max), NVML C calls per discovery (``FakeNvml.call_counts``)
   and, to separate the fake's own cost, the p50 again with the fake's
   per-call visibility check (a sysfs read of the GPU's driver link)
   answered from memory; and ms and NVML calls per MIG ``prepare()``
   while laying the instances out.
2. Bind and release through the service: ``EmbeddedStack`` (API,
   Placement, conductor, agent, Nova's events API; SQLite, in-process
   messaging) on free loopback ports over
   ``etc/cyborg/fake-hosts/h200-dc.yaml`` in a temp state dir. With the
   ``h200-mig-1g-18gb`` profile on GPU 0000:43:00.0 (``--mig-binds``) and
   ``h200-whole`` on 0000:1b:00.0 (``--whole-binds``; the stack sets
   ``[nvidia] rebind_for_passthrough``), one ARQ at a time, as Nova does:
   create the ARQ, PATCH the bind (hostname, device_rp_uuid,
   instance_uuid; no Placement claim: the driver does not need one), wait
   for the ``accelerator-request-bound`` event, check the ARQ is Bound and
   the MIG instance / vfio-pci binding exists and the provider in
   Placement (inventories, traits) changed, then ``DELETE ?instance=`` and
   wait until the driver has released the device (MIG instance destroyed /
   GPU back on nvidia) and the agent has republished the provider; check
   the fake NVML/sysfs and that the provider is as before the first
   bind.

   Times, from the PATCH's send: the 202 (PATCH), Bound (the conductor's
   ``finish_many()`` committed), the event reaching Nova's events API; from the
   DELETE's send: the 204, the driver's ``release()`` returned, the agent's
   ``release()`` returned (inventory republished; release is an RPC cast,
   so it ends after the 204). Those inside the service are taken by
   wrapping the calls named (the only change to the service; see Probes),
   the event's by wrapping the events API's waiter. Also: time and NVML
   calls spent in the driver's ``prepare()``/``release()`` and in the
   agent's republish (its discovery and Placement sync), and this
   process's CPU time per bind + release.

Warm-up: ``--warmup`` unmeasured binds of each kind first. Output:
Markdown tables on stdout, ``--json FILE`` with raw samples, the service
log under the temp dir (``--keep`` keeps it). Exit status 1 when any bind
or release was not verified. See docs/benchmarks/nvidia.md.

Examples::

    cyborg-bench nvidia
    cyborg-bench nvidia --json /tmp/nvidia.json
    cyborg-bench nvidia --discovery-runs 10 --mig-binds 10 --whole-binds 5
"""

import collections
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
import warnings

from cyborg import data
from cyborg_harness import stats as harness_stats

from cyborg_bench import client as http
from cyborg_bench import machine
from cyborg_bench import stats

REPO = machine.REPO
HOST_SPEC = data.fake_host('h200-dc')
# A realistic full H200: 4 + 2 + 1 + 1 of the 8 memory slices.
LAYOUT = ('h200-mig-3g-71gb', 'h200-mig-2g-35gb', 'h200-mig-1g-18gb',
          'h200-mig-1g-18gb')
# PCI addresses of the GPUs of an HGX H200 8-GPU board.
HGX_ADDRESSES = ('0000:18:00.0', '0000:2a:00.0', '0000:3a:00.0',
                 '0000:5d:00.0', '0000:9a:00.0', '0000:ab:00.0',
                 '0000:ba:00.0', '0000:db:00.0')
# (device profile, GPU) of each kind of bind.
KINDS = (('mig', 'h200-mig-1g-18gb', '0000:43:00.0'),
         ('whole', 'h200-whole', '0000:1b:00.0'))
EVENT_NAME = 'accelerator-request-bound'
# Bind measures → label in the report.
MEASURES = (('patch', 'PATCH → 202'), ('bound', 'PATCH → Bound'),
            ('event', 'PATCH → event at Nova'),
            ('delete', 'DELETE → 204'),
            ('released', 'DELETE → device released'),
            ('republished', 'DELETE → inventory republished'),
            ('settled', 'DELETE → GPU and provider as before the bind'))
# Calls timed inside the service → label in the report.
SPANS = (('driver prepare', "in the driver's prepare()"),
         ('driver release', "in the driver's release()"),
         ('agent republish', "in the agent's republish (each bind and "
                             "release)"),
         ('discovery', '… of which discovery (all GPUs)'),
         ('Placement sync', '… of which Placement sync'))


def log(msg):
    print('[cyborg-bench nvidia %s] %s' % (time.strftime('%H:%M:%S'), msg),
          file=sys.stderr, flush=True)


def profile_doc(name):
    return data.profile(name)


# --------------------------------------------------------------------------
# 1. Discovery


def discovery_host(workdir, count):
    from cyborg_emulators.nvidia import fake_sysfs

    gpus = [{'model': 'h200', 'pci_address': address, 'mig_mode': 1,
             'driver': 'nvidia', 'numa_node': 2 * i // len(HGX_ADDRESSES)}
            for i, address in enumerate(HGX_ADDRESSES[:count])]
    root = tempfile.mkdtemp(prefix='sysfs-%d-' % count, dir=workdir)
    return fake_sysfs.FakeGpuHost({'iommu': True, 'gpus': gpus}, root=root)


def lay_out(driver, nvml, addresses):
    """LAYOUT on every GPU through the driver's prepare(); returns
    (instances made, seconds per prepare(), NVML calls per prepare()).
    """
    from cyborg.objects import device as records

    made, times, calls = 0, [], []
    for address in addresses:
        for name in LAYOUT:
            [group] = profile_doc(name)[0]['groups']
            nvml.call_counts.clear()
            t0 = time.perf_counter()
            info = driver.prepare(address, {
                'uuid': str(uuid.uuid4()), 'attach_type': 'PCI',
                'attach_info': records.pci_info(address),
                'request_group': group})
            times.append(time.perf_counter() - t0)
            calls.append(sum(nvml.call_counts.values()))
            made += 'mig_uuid' in info
    return made, times, calls


def time_discovery(driver, nvml, runs):
    """(seconds per discover(), NVML C calls per discover()), after one
    unmeasured call.
    """
    driver.discover()
    times, calls = [], []
    for _ in range(runs):
        nvml.call_counts.clear()
        t0 = time.perf_counter()
        devices = driver.discover()
        times.append(time.perf_counter() - t0)
        calls.append(sum(nvml.call_counts.values()))
    return times, calls, devices


def bench_discovery(workdir, count, with_instances, runs):
    from cyborg.drivers.nvidia import backend as nvml
    from cyborg.drivers.nvidia import driver as nvidia

    host = discovery_host(workdir, count)
    host.install()
    backend = nvml.PynvmlBackend()
    try:
        driver = nvidia.NvidiaDriver(backend=backend, sysfs=host.sysfs)
        driver.discover()
        addresses = [g['pci_address'] for g in host.gpus]
        made, prepare_times, prepare_calls = lay_out(
            driver, host.nvml, addresses if with_instances else [])
        times, calls, devices = time_discovery(driver, host.nvml, runs)
        problems = []
        if sorted(d.deployables[0].name for d in devices) != addresses:
            problems.append('discovered %s' % [d.deployables[0].name
                                               for d in devices])
        if made != count * len(LAYOUT) * with_instances:
            problems.append('made %d MIG instances' % made)
        # The same calls, the fake's per-call sysfs look-up (is the GPU
        # still on nvidia?) answered from memory: what is left is our
        # code, the bindings and the fake's NVML logic.
        bound = {a: host.nvml.visible(a) for a in addresses}
        host.nvml.visible = bound.__getitem__
        memo_times, _, _ = time_discovery(driver, host.nvml, runs)
    finally:
        backend.close()
        host.uninstall()
    return {'gpus': count, 'instances_per_gpu': made // count,
            'runs': runs, 'time': stats.summarize(times),
            'nvml_calls': [min(calls), max(calls)],
            'time_visible_memoised': stats.summarize(memo_times),
            'prepare': dict(stats.summarize(prepare_times),
                            nvml_calls=[min(prepare_calls),
                                        max(prepare_calls)]
                            if prepare_calls else None),
            'errors': problems,
            'samples_ms': [round(x * 1000, 3) for x in times]}


# --------------------------------------------------------------------------
# 2. Bind and release through the service


class Probes:
    """Timestamps from inside the service, by wrapping a few calls of the
    running stack (perf_counter when the call returns or raises):

    * cyborg.db.bindings.finish_many(reasons) → ('bound', ARQ uuid) (or
      'failed') for each ARQ it recorded;
    * the nvidia driver's release(name, handle) → ('released', handle);
    * the agent's release(ctx, handles) → ('republished', handle) each;

    and, per SPANS, the time spent in a call and the NVML C calls made
    meanwhile (by any thread: binds here run one at a time). undo() puts
    the originals back.
    """

    def __init__(self, stack):
        from cyborg.db import bindings

        self.cond = threading.Condition()
        self.stamps = {}
        self.spans = collections.defaultdict(list)
        self.nvml_calls = collections.defaultdict(list)
        self._counts = stack.fake_gpus.nvml.call_counts
        self._undo = []
        agent = stack.agent
        driver = agent._driver('nvidia')
        # The conductor records a batch of outcomes at once.
        self._wrap(bindings, 'finish_many', stamp=lambda reasons, infos=None: [
            ('bound' if reason is None else 'failed', uuid)
            for uuid, reason in reasons.items()])
        self._wrap(driver, 'prepare', span='driver prepare')
        self._wrap(driver, 'release', span='driver release',
                   stamp=lambda name, handle: [('released', handle['uuid'])])
        self._wrap(agent, '_republish', span='agent republish')
        self._wrap(agent, 'discover', span='discovery')
        self._wrap(agent.sync, 'sync', span='Placement sync')
        self._wrap(agent, 'release', stamp=lambda ctx, handles: [
            ('republished', h['uuid']) for h in handles])

    def _wrap(self, owner, name, stamp=None, span=None):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            calls0 = sum(self._counts.values())
            t0 = time.perf_counter()
            failure = None
            try:
                return original(*args, **kwargs)
            except Exception as e:
                failure = '%s: %s' % (type(e).__name__, e)
                raise
            finally:
                t1 = time.perf_counter()
                with self.cond:
                    if span and failure is None:
                        self.spans[span].append(t1 - t0)
                        self.nvml_calls[span].append(
                            sum(self._counts.values()) - calls0)
                    for key in stamp(*args, **kwargs) if stamp else ():
                        self.stamps[key] = (t1, failure)
                    self.cond.notify_all()

        setattr(owner, name, wrapper)
        self._undo.append((owner, name, original))

    def undo(self):
        while self._undo:
            setattr(*self._undo.pop())

    def reset_spans(self):
        with self.cond:
            self.spans.clear()
            self.nvml_calls.clear()

    def span_summary(self, span):
        with self.cond:
            out = stats.summarize(self.spans[span])
            calls = sorted(self.nvml_calls[span])
        if calls:
            out['nvml_calls_p50'] = harness_stats.percentile(calls, 50)
        return out

    def wait(self, key, timeout):
        """(perf_counter, None) once the call stamping `key` returned;
        (None, why) when it raised or did not end within `timeout`.
        """
        with self.cond:
            if not self.cond.wait_for(lambda: key in self.stamps, timeout):
                return None, 'no %s within %.0fs' % (key[0], timeout)
            at, failure = self.stamps.pop(key)
        return (None, '%s: %s' % (key[0], failure)) if failure else (at, None)


def expect_event(receiver, instance, host, arq_uuid):
    """What Nova's compute does before a bind: the instance is on `host`,
    and a waiter for the ARQ's event; the waiter records its arrival.
    """
    receiver.instances.add(instance, host)
    waiter = receiver.instance_events.prepare_for_instance_event(
        instance, EVENT_NAME, arq_uuid)
    deliver = waiter.set

    def stamped(event):
        waiter.arrived = time.perf_counter()
        deliver(event)

    waiter.set = stamped
    return waiter


class Service:
    """The embedded stack, and what a bind needs to know about it."""

    def __init__(self, workdir):
        from cyborg.conf import CONF
        from cyborg_aio import stack as embedded

        self.stack = embedded.EmbeddedStack(
            os.path.join(workdir, 'state'), port=0, placement_port=0,
            host_spec=HOST_SPEC, conf=CONF, nova_port=0)
        self.stack.start()
        self.clients, self.probes = [], None
        try:
            self._set_up()
        except BaseException:
            self.close()
            raise

    def _set_up(self):
        url = urllib.parse.urlsplit(self.stack.api_url)
        # The Nova client and the admin (noauth: no identity headers).
        self.client, self.admin = self.clients = [
            http.local(url.port, url.path, headers, timeout=30)
            for headers in (http.NOVA_HEADERS, None)]
        for _, profile, _ in KINDS:
            self.admin.call('POST', '/v2/device_profiles',
                            profile_doc(profile), expect=201)
        deps = self.admin.call('GET', '/v2/deployables')['deployables']
        self.rp_uuids = {d['name']: d['rp_uuid'] for d in deps}
        [self.hostname] = {d['hostname'] for d in self.admin.call(
            'GET', '/v2/devices')['devices']}
        self.gpu_uuids = {g['pci_address']: g['uuid']
                          for g in self.stack.fake_gpus.nvml.gpu_info()}
        self.placement = self.stack.placement_client()
        self.idle_providers = {a: self._provider(a) for _, _, a in KINDS}
        self.probes = Probes(self.stack)

    def _provider(self, address):
        """The GPU's provider in Placement: (inventories, traits)."""
        rp_uuid = self.rp_uuids[address]
        return (self.placement.inventories(rp_uuid)[1],
                self.placement.traits(rp_uuid)[1])

    def device_state(self, address):
        """(MIG instances, kernel driver, whether the provider in
        Placement is as it was for the idle GPU).
        """
        fake = self.stack.fake_gpus
        gpu = fake.nvml.to_state()['gpus'][self.gpu_uuids[address]]
        return (len(gpu['gpu_instances']), fake.sysfs.driver(address),
                self._provider(address) == self.idle_providers[address])

    def close(self):
        for client in self.clients:
            client.close()
        try:
            self.stack.stop()
        finally:
            if self.probes is not None:
                self.probes.undo()


# Service.device_state() of a GPU bound / released, per kind.
STATES = {'mig': {'bound': (1, 'nvidia', False),
                  'released': (0, 'nvidia', True)},
          'whole': {'bound': (0, 'vfio-pci', False),
                    'released': (0, 'nvidia', True)}}


def check_state(svc, kind, address, when, timeout=0.0):
    """[] once the GPU and its provider are as expected (waiting up to
    `timeout`: after a release the agent's lifecycle pass unfences a GPU
    that was passed through), else the problem.
    """
    deadline = time.perf_counter() + timeout
    while True:
        state = svc.device_state(address)
        if state == STATES[kind][when]:
            return []
        if time.perf_counter() >= deadline:
            return ['%s: %d MIG instance(s), on %s, provider %s' % (
                when, state[0], state[1],
                'idle' if state[2] else 'not idle')]
        time.sleep(0.02)


def bind_cycle(svc, kind, profile, address, timeout):
    """Create, bind, verify, delete, verify one ARQ. Returns (samples in
    seconds by measure, errors).
    """
    client, probes = svc.client, svc.probes
    instance = str(uuid.uuid4())
    [arq] = client.call('POST', '/v2/accelerator_requests',
                        {'device_profile_name': profile}, expect=201)['arqs']
    tag = arq['uuid']
    receiver = svc.stack.nova_receiver
    waiter = expect_event(receiver, instance, svc.hostname, tag)
    body = http.bind_body(tag, svc.hostname, svc.rp_uuids[address],
                          instance)
    out, errors = {}, []
    t0 = time.perf_counter()
    status, payload = client.request('PATCH', '/v2/accelerator_requests', body)
    out['patch'] = time.perf_counter() - t0
    if status != 202:
        errors.append('PATCH -> %s %s' % (status, payload[:300]))
    event = waiter.wait(timeout)
    if event is None:
        errors.append('no event within %.0fs' % timeout)
    else:
        out['event'] = waiter.arrived - t0
        if event['status'] != 'completed':
            errors.append('event %s' % event)
    bound, problem = probes.wait(('bound', tag), 0 if errors else timeout)
    if bound is not None:
        out['bound'] = bound - t0
    elif not errors:
        errors.append(problem)
    found = client.call('GET', '/v2/accelerator_requests?instance=%s'
                        % instance)['arqs']
    handle = found[0]['attach_handle_uuid'] if found else None
    if [(a['uuid'], a['state']) for a in found] != [(tag, 'Bound')] \
            or handle is None:
        errors.append('ARQs of the instance: %s' % found)
    errors += check_state(svc, kind, address, 'bound')

    t0 = time.perf_counter()
    client.call('DELETE', '/v2/accelerator_requests?instance=%s' % instance,
                expect=204)
    out['delete'] = time.perf_counter() - t0
    if handle is not None:
        for measure in ('released', 'republished'):
            at, problem = probes.wait((measure, handle), timeout)
            if at is None:
                errors.append(problem)
            else:
                out[measure] = at - t0
    errors += check_state(svc, kind, address, 'released', timeout)
    out['settled'] = time.perf_counter() - t0
    receiver.instances.remove(instance)
    return out, errors


def bench_binds(svc, kind, profile, address, binds, warmup, timeout):
    for _ in range(warmup):
        _, errors = bind_cycle(svc, kind, profile, address, timeout)
        if errors:
            raise RuntimeError('%s warm-up bind failed: %s' % (kind, errors))
    svc.probes.reset_spans()
    samples = collections.defaultdict(list)
    errors = []
    cpu0, t0 = time.process_time(), time.perf_counter()
    for i in range(binds):
        out, problems = bind_cycle(svc, kind, profile, address, timeout)
        for measure, value in out.items():
            samples[measure].append(value)
        errors += ['bind %d: %s' % (i + 1, e) for e in problems]
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    return {'kind': kind, 'profile': profile, 'gpu': address,
            'binds': binds, 'errors': errors,
            'wall_s': round(wall, 2),
            'process_cpu_ms_per_cycle': round(1000 * cpu / binds, 2)
            if binds else None,
            'measures': {m: stats.summarize(samples[m])
                         for m, _ in MEASURES},
            'spans': {s: svc.probes.span_summary(s) for s, _ in SPANS},
            'samples_ms': {m: [round(x * 1000, 3) for x in samples[m]]
                           for m, _ in MEASURES},
            'span_samples_ms': {s: [round(x * 1000, 3)
                                    for x in svc.probes.spans[s]]
                                for s, _ in SPANS}}


# --------------------------------------------------------------------------
# Report


def _range(low, high):
    return str(low) if low == high else '%d–%d' % (low, high)


def markdown(meta, discovery, binds):
    lines = [
        '**NVIDIA driver on the fake NVML** — %s CPU(s) (%s); Python %s; '
        'load average %s → %s' % (
            meta['cpus'], meta['cpu_model'], meta['python'],
            meta['loadavg_start'][0], meta['loadavg_end'][0]),
        '',
        '| GPUs | MIG instances per GPU | Runs | discover() p50 | p90 | p99 '
        '| max | p50 per GPU | NVML calls per discover() | p50, fake\'s '
        'sysfs check memoised | MIG prepare() p50 | NVML calls per '
        'prepare() |',
        '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
    for d in discovery:
        t = d['time']
        calls = d['nvml_calls']
        prepare = d['prepare']
        lines.append('| %d | %d | %d | %s | %s | %s | %s | %.1f | %s | %s '
                     '| %s | %s |' % (
                         d['gpus'], d['instances_per_gpu'], d['runs'],
                         stats.fmt(t, 'p50_ms'), stats.fmt(t, 'p90_ms'),
                         stats.fmt(t, 'p99_ms'), stats.fmt(t, 'max_ms'),
                         t['p50_ms'] / d['gpus'], _range(*calls),
                         stats.fmt(d['time_visible_memoised'], 'p50_ms'),
                         stats.fmt(prepare, 'p50_ms'),
                         _range(*prepare['nvml_calls'])
                         if prepare['nvml_calls'] else '—'))
    lines += ['', 'Discovery and prepare() times in ms; prepare() while '
              'laying out %s on every GPU.' % ' + '.join(
                  n.split('-', 2)[-1] for n in LAYOUT), '',
              '| Profile (GPU) | Measure | n | p50 | p90 | p99 | max '
              '| NVML calls (p50) |',
              '|---|---|---:|---:|---:|---:|---:|---:|']
    for b in binds:
        name = '`%s` (%s)' % (b['profile'], b['gpu'])
        rows = ([(label, b['measures'][m]) for m, label in MEASURES]
                + [(label, b['spans'][s]) for s, label in SPANS])
        for label, s in rows:
            lines.append('| %s | %s | %d | %s | %s | %s | %s | %s |' % (
                name, label, s['n'], stats.fmt(s, 'p50_ms'),
                stats.fmt(s, 'p90_ms'), stats.fmt(s, 'p99_ms'),
                stats.fmt(s, 'max_ms'), s.get('nvml_calls_p50', '')))
    lines += ['', 'Bind/release times in ms, one ARQ at a time. '
              + '; '.join('`%s`: %d binds, %d error(s), %.1f s, CPU of '
                          'this process (service + client) %.1f ms per bind '
                          '+ release' % (
                              b['profile'], b['binds'], len(b['errors']),
                              b['wall_s'], b['process_cpu_ms_per_cycle']
                              or 0) for b in binds) + '.']
    return '\n'.join(lines)


def log_problems(path):
    keys = ('Traceback', 'ERROR', 'CRITICAL', 'WARNING')
    try:
        with open(path, errors='replace') as f:
            return [line.rstrip() for line in f
                    if any(k in line for k in keys)]
    except OSError:
        return []


def parse_counts(text):
    return [int(x) for x in text.split(',')]


# --------------------------------------------------------------------------


def add_arguments(parser):
    parser.add_argument('--gpus', type=parse_counts, default=[1, 8],
                        metavar='N,...',
                        help='fake H200s per discovery host (default 1,8; '
                             'at most %d)' % len(HGX_ADDRESSES))
    parser.add_argument('--discovery-runs', type=int, default=100,
                        help='measured discover() calls per case '
                             '(default 100)')
    parser.add_argument('--mig-binds', type=int, default=50,
                        help='measured MIG 1g.18gb binds (default 50)')
    parser.add_argument('--whole-binds', type=int, default=20,
                        help='measured whole-GPU binds (default 20)')
    parser.add_argument('--warmup', type=int, default=3,
                        help='unmeasured binds of each kind first '
                             '(default 3)')
    parser.add_argument('--timeout', type=float, default=30.0,
                        help='seconds to wait for an event or a release '
                             '(default 30)')
    parser.add_argument('--json', metavar='FILE',
                        help='also write the results (with raw samples) as '
                             'JSON')
    parser.add_argument('--keep', action='store_true',
                        help='keep the temp dir (state, service log)')


def run(args):
    if not all(1 <= n <= len(HGX_ADDRESSES) for n in args.gpus):
        args.parser.error('--gpus: 1..%d each' % len(HGX_ADDRESSES))

    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix='cyborg-nvidia-bench-')
    log_path = os.path.join(workdir, 'service.log')
    warnings.filterwarnings('ignore', message='(?s).*Eventlet is deprecated')
    from cyborg.common import config
    config.parse_args(['--log-file', log_path], config_files=[])
    # oslo.log sends uncaught exceptions to the log file: keep them here.
    sys.excepthook = sys.__excepthook__
    svc = None
    try:
        meta = machine.describe()
        meta.update({
            'command': ' '.join(['cyborg-bench'] + sys.argv[1:]),
            'host_spec': os.path.basename(HOST_SPEC),
        })
        discovery = []
        for count in args.gpus:
            for with_instances in (False, True):
                d = bench_discovery(workdir, count, with_instances,
                                    args.discovery_runs)
                discovery.append(d)
                log('discovery, %d GPU(s), %d MIG instance(s) each: p50 '
                    '%.1f ms, %s NVML calls' % (
                        count, d['instances_per_gpu'], d['time']['p50_ms'],
                        _range(*d['nvml_calls'])))
        t0 = time.perf_counter()
        svc = Service(workdir)
        meta['stack_start_s'] = round(time.perf_counter() - t0, 1)
        log('embedded stack up in %.1fs: %s' % (meta['stack_start_s'],
                                                svc.stack.api_url))
        binds = []
        for (kind, profile, address), count in zip(
                KINDS, (args.mig_binds, args.whole_binds)):
            b = bench_binds(svc, kind, profile, address, count, args.warmup,
                            args.timeout)
            binds.append(b)
            log('%s: %d binds, PATCH→event p50 %.1f ms, release p50 %.1f '
                'ms, %d error(s)' % (
                    profile, count,
                    b['measures']['event'].get('p50_ms', float('nan')),
                    b['measures']['republished'].get('p50_ms', float('nan')),
                    len(b['errors'])))
        meta['loadavg_end'] = machine.loadavg()
        meta['log_problems'] = log_problems(log_path)[:50]
        meta['total_seconds'] = round(time.perf_counter() - started, 1)

        print(markdown(meta, discovery, binds))
        print('\nTotal run time %.1fs (stack start %.1fs); service log '
              'problem lines %d' % (meta['total_seconds'],
                                    meta['stack_start_s'],
                                    len(meta['log_problems'])))
        for line in meta['log_problems'][:10]:
            print('    ' + line)
        errors = [e for d in discovery for e in d['errors']] + [
            '%s %s' % (b['kind'], e) for b in binds for e in b['errors']]
        for e in errors[:10]:
            print('    ' + e)
        if args.json:
            with open(args.json, 'w') as f:
                json.dump({'meta': meta, 'discovery': discovery,
                           'binds': binds}, f, indent=2)
            log('wrote %s' % args.json)
        return 1 if errors else 0
    finally:
        if svc is not None:
            t0 = time.perf_counter()
            svc.close()
            log('embedded stack stopped in %.1fs' % (time.perf_counter()
                                                     - t0))
        if args.keep:
            log('kept %s' % workdir)
        else:
            # The service log goes with it: stop writing there first.
            root = logging.getLogger()
            for handler in root.handlers[:]:
                root.removeHandler(handler)
                handler.close()
            shutil.rmtree(workdir, ignore_errors=True)
