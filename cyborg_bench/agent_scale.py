# SPDX-License-Identifier: Apache-2.0
"""Agent scale: N agents × D devices, one conductor, one Placement.

What it does, all on 127.0.0.1:

1. creates a throw-away database for the conductor (SQLite file, or a fresh
   database on the local MariaDB/MySQL or PostgreSQL server) and migrates it
   with ``cyborg.db.migration.upgrade``;
2. starts the real Placement service as its own process (``python -m
   cyborg_harness.placement``), so every Placement call is a real HTTP
   request over loopback: by default on a throw-away MariaDB database; with
   ``--placement-db sqlite`` on SQLite (which answers 500 "database is
   locked" to concurrent writers);
3. creates N compute-node resource providers (``bench-node-0001`` …) the
   way nova-compute does (``nova_cyborg_client.compute_node.ensure``:
   provider, VCPU/MEMORY_MB/DISK_GB inventory, COMPUTE_ACCELERATORS trait);
4. starts ONE conductor: an oslo.messaging RPC server (threading executor)
   with ``ConductorManager``, over ``inproc://`` (in-process, as cyborg-aio;
   default) or the local RabbitMQ (``--transport rabbit``; a vhost of its
   own, deleted at the end);
5. simulates N agents in this process: each is an ``AgentManager`` with a
   ``FakeDriver`` reading its own generated host spec (D GPUs with distinct
   PCI addresses), its own host/nodename and its own ``PlacementClient``
   (so its own trait/resource-class cache, as a real agent process has);
   all share one ``ConductorAPI`` client and one keystoneauth session (a
   connection pool sized to the concurrency);
6. phase 1: every agent does its first report (``report_once(full=True)``,
   as the agent's first pass does) from a bounded thread pool; agents whose
   pass failed are run again (``--first-report-retries`` rounds, as the
   agent retries at its next pass). Measures the time until all N have
   reported, per-agent latency, DB write statements (as the conductor counts
   them, and independently by counting the SQL statements this process
   sends), Placement calls by endpoint (by wrapping the adapter's
   ``request``) and CPU time (per thread, per process); then verifies N×D
   deployables in the DB and N×D child providers in Placement, carrying
   OWNER_CYBORG, with exact traits/inventories on a sample of agents;
7. phase 2: ``--rounds`` steady-state rounds of ``report_once()`` for every
   agent, which must cause zero DB writes and zero Placement calls, then one
   ``report_once(full=True)`` round, which reads Placement but must write
   nothing; provider generations and DB row counts are compared before and
   after;
8. prints a Markdown report (and ``--json FILE``), and removes everything it
   made (processes, databases, RabbitMQ vhost, temp dir).

Examples::

    cyborg-bench agent-scale --quick
    cyborg-bench agent-scale                   # 1000 × 8, MariaDB
    cyborg-bench agent-scale --placement-db sqlite
    cyborg-bench agent-scale --transport rabbit
    cyborg-bench agent-scale --db postgresql --agents 200

Exit status: 0 when every check passed, 1 when one failed, 2 when the time
limit cut the run short (no agent pass starts after ``--time-limit``; a
watchdog cleans up and exits 180 s later at the latest).
"""

import collections
import concurrent.futures
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings

from cyborg_harness import cpu
from cyborg_harness import databases
from cyborg_harness import embedded
from cyborg_harness import placement as harness_placement
from cyborg_harness import rabbit
from cyborg_harness import stats

from cyborg_bench import hostspec
from cyborg_bench import machine

SAMPLE_AGENTS = 10

# oslo.service (imported through cyborg/placement) warns about eventlet.
warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')

PLACEMENT_MICROVERSION = '1.26'

LOG = logging.getLogger('agent_scale')


def log(msg, *args):
    print('[cyborg-bench agent-scale %s] %s'
          % (time.strftime('%H:%M:%S'), msg % args if args else msg),
          file=sys.stderr, flush=True)


class TimeLimit(Exception):
    """The run's time limit cut a phase short."""


class CheckFailed(Exception):
    pass


# --------------------------------------------------------------------------
# Clean-up: every resource registers how to undo itself as soon as it exists


class Cleanup:
    def __init__(self):
        self._steps = []
        self._lock = threading.Lock()

    def add(self, name, fn, timeout=60.0):
        with self._lock:
            self._steps.append((name, fn, timeout))

    def run(self):
        """Undo in reverse order; each step bounded, failures logged."""
        while True:
            with self._lock:
                if not self._steps:
                    return
                name, fn, timeout = self._steps.pop()
            errors = []

            def step():
                try:
                    fn()
                except Exception as e:  # noqa: BLE001 - keep cleaning up
                    errors.append(e)

            t = threading.Thread(target=step, name='cleanup-' + name,
                                 daemon=True)
            t.start()
            t.join(timeout)
            if t.is_alive():
                log('cleanup: %s did not finish within %.0fs', name, timeout)
            elif errors:
                log('cleanup: %s failed: %s', name, errors[0])


# --------------------------------------------------------------------------
# Measurement


_UUID = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                   r'[0-9a-f]{12}')


def endpoint(method, url):
    """'PUT /resource_providers/{uuid}/traits' from a concrete URL."""
    path = url.split('?')[0]
    path = _UUID.sub('{uuid}', path)
    path = re.sub(r'^(/traits|/resource_classes)/[^/]+$', r'\1/{name}', path)
    if '?' in url:
        params = sorted(p.split('=')[0] for p in url.split('?')[1].split('&'))
        path += '?' + '&'.join(params)
    return '%s %s' % (method, path)


class Stats:
    """Counters of one round: HTTP calls to Placement, SQL statements sent
    by this process (only the conductor talks to the DB during a round),
    conductor-side time.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self.active = False
        self.reset()

    def reset(self):
        with self._lock:
            self.http = collections.Counter()          # 'GET /path' -> n
            self.http_time = collections.Counter()     # 'GET /path' -> s
            self.http_status = collections.Counter()   # status -> n
            self.http_seconds = 0.0
            self.sql = collections.Counter()           # verb -> n
            self.conductor_seconds = []
            self.conductor_cpu = []

    def on_http(self, method, url, params, status, seconds):
        if params:
            url = url + '?' + '&'.join('%s=x' % k for k in sorted(params))
        with self._lock:
            key = endpoint(method, url)
            self.http[key] += 1
            self.http_time[key] += seconds
            self.http_status[status] += 1
            self.http_seconds += seconds

    def on_sql(self, statement):
        if not self.active:
            return
        verb = statement.lstrip().split(None, 1)[0].upper() if statement \
            else '?'
        if verb not in ('SELECT', 'INSERT', 'UPDATE', 'DELETE'):
            verb = 'other'
        with self._lock:
            self.sql[verb] += 1

    def on_conductor(self, seconds, cpu):
        with self._lock:
            self.conductor_seconds.append(seconds)
            self.conductor_cpu.append(cpu)

    def http_calls(self):
        return sum(self.http.values())

    def http_writes(self):
        return sum(n for k, n in self.http.items() if not k.startswith('GET'))

    def sql_writes(self):
        return sum(self.sql[v] for v in ('INSERT', 'UPDATE', 'DELETE'))


STATS = Stats()
STOP = threading.Event()    # set on SIGTERM/SIGINT: start no more passes
_TASK = threading.local()   # per-thread timings of the agent pass running


def _add_time(key, seconds):
    rec = getattr(_TASK, 'rec', None)
    if rec is not None:
        rec[key] = rec.get(key, 0.0) + seconds


class CountingAdapter:
    """Wraps a keystoneauth Adapter: counts and times every request."""

    def __init__(self, adapter):
        self._adapter = adapter

    def request(self, url, method, **kwargs):
        t0 = time.perf_counter()
        status = 'exception'
        try:
            response = self._adapter.request(url, method, **kwargs)
            status = response.status_code
            return response
        finally:
            dt = time.perf_counter() - t0
            STATS.on_http(method, url, kwargs.get('params'), status, dt)
            _add_time('placement_http', dt)
            rec = getattr(_TASK, 'rec', None)
            if rec is not None:
                rec['http_calls'] = rec.get('http_calls', 0) + 1

    def __getattr__(self, name):
        return getattr(self._adapter, name)


class TimedConductorAPI:
    """Per-agent view of the shared ConductorAPI, timing report_data."""

    def __init__(self, api):
        self._api = api

    def report_data(self, context, hostname, devices):
        t0 = time.perf_counter()
        try:
            result = self._api.report_data(context, hostname, devices)
            rec = getattr(_TASK, 'rec', None)
            if rec is not None:
                # Counted here too: a pass that fails later (in Placement)
                # has still written to the DB.
                rec['db_writes'] = result['writes']
            return result
        finally:
            _add_time('rpc', time.perf_counter() - t0)


def timed_driver(driver):
    """`driver` with its discover() timed; `untimed` is `driver` (the
    checks discover through it, outside the figures).
    """
    from cyborg.drivers import base

    class TimedDriver(base.Driver):
        name = driver.name
        untimed = driver

        def discover(self):
            t0 = time.perf_counter()
            try:
                return driver.discover()
            finally:
                _add_time('discover', time.perf_counter() - t0)

    return TimedDriver()


def timed_conductor_class():
    from cyborg.conductor import manager as conductor_manager

    class TimedConductor(conductor_manager.ConductorManager):
        def report_data(self, context, hostname, devices):
            t0 = time.perf_counter()
            c0 = time.thread_time()
            try:
                return super().report_data(context, hostname, devices)
            finally:
                STATS.on_conductor(time.perf_counter() - t0,
                                   time.thread_time() - c0)

    return TimedConductor


# --------------------------------------------------------------------------
# The simulated fleet


def node_name(i, n):
    return 'bench-node-%0*d' % (max(4, len(str(n))), i + 1)


CPU_PIDS = {}   # label -> pid whose CPU time a round reports


def cpu_sample():
    t = os.times()
    out = {'bench process (agents + conductor)': t.user + t.system,
           'machine (all processes)': cpu.machine_busy_seconds()}
    for label, pid in CPU_PIDS.items():
        out[label] = cpu.process_seconds(pid, children=True)
    return out


def cpu_used(before):
    after = cpu_sample()
    return {k: after[k] - v for k, v in before.items()
            if v is not None and after.get(k) is not None}


def _ms(seconds):
    return float('nan') if seconds is None else round(seconds * 1000, 1)


def run_round(name, agents, fn, concurrency, deadline):
    """fn(agent) on every agent from `concurrency` threads; returns the
    round's record (timings, counters, errors).
    """
    STATS.reset()
    STATS.active = True
    records = []
    errors = collections.Counter()
    samples = []
    lock = threading.Lock()

    def task(agent):
        if time.monotonic() > deadline or STOP.is_set():
            return None
        _TASK.rec = rec = {'agent': agent}
        t0 = time.perf_counter()
        c0 = time.thread_time()
        try:
            result = fn(agent)
            rec['result'] = result
        except Exception as e:  # noqa: BLE001 - counted and reported
            with lock:
                errors[type(e).__name__] += 1
                if len(samples) < 5:
                    samples.append('%s: %s: %s' % (agent.host,
                                                   type(e).__name__, e))
            rec['error'] = True
        finally:
            rec['latency'] = time.perf_counter() - t0
            rec['cpu'] = time.thread_time() - c0
            _TASK.rec = None
        return rec

    cpu_before = cpu_sample()
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(
            concurrency, thread_name_prefix='agent') as pool:
        futures = [pool.submit(task, a) for a in agents]
        try:
            for f in futures:
                remaining = deadline - time.monotonic() + 120
                try:
                    rec = f.result(timeout=max(remaining, 1))
                except concurrent.futures.TimeoutError:
                    raise TimeLimit('%s: an agent pass hung past the time '
                                    'limit' % name)
                if rec is not None:
                    records.append(rec)
        except BaseException:
            # Interrupted: start nothing more; passes under way finish.
            STOP.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    wall = time.perf_counter() - started
    STATS.active = False

    done = [r for r in records if not r.get('error')]
    failed = [r['agent'] for r in records if r.get('error')]
    latencies = [r['latency'] for r in done]
    db_writes = sum(r.get('db_writes', 0) for r in records)
    pl_writes = sum(r['result'][1] for r in done)
    n = len(done) or 1

    def mean(key):
        return sum(r.get(key, 0.0) for r in done) / n

    cond = STATS.conductor_seconds
    cond_cpu = STATS.conductor_cpu
    out = {
        'name': name, 'agents': len(agents), 'completed': len(done),
        'skipped_by_time_limit': len(agents) - len(records),
        'errors': sum(errors.values()), 'error_types': dict(errors),
        'failed_hosts': [a.host for a in failed][:20],
        'error_samples': samples,
        'wall_s': round(wall, 2),
        'agents_per_s': round(len(done) / wall, 1) if wall else None,
        'p50_ms': _ms(stats.percentile(latencies, 50)),
        'p99_ms': _ms(stats.percentile(latencies, 99)),
        'max_ms': round(max(latencies) * 1000, 1) if latencies else None,
        'db_writes_reported': db_writes,
        'placement_writes_reported': pl_writes,
        'sql': dict(STATS.sql), 'sql_writes': STATS.sql_writes(),
        'placement_calls': STATS.http_calls(),
        'placement_http_writes': STATS.http_writes(),
        'placement_by_endpoint': dict(sorted(STATS.http.items())),
        'placement_ms_by_endpoint': {
            k: round(STATS.http_time[k] / n * 1000, 2)
            for k, n in sorted(STATS.http.items())},
        'cpu_s': {k: round(v, 1) for k, v in cpu_used(cpu_before).items()},
        'placement_status': {str(k): v for k, v in
                             sorted(STATS.http_status.items(), key=str)},
        'mean_ms': {
            'total': round(mean('latency') * 1000, 2),
            'discover': round(mean('discover') * 1000, 2),
            'rpc_report_data': round(mean('rpc') * 1000, 2),
            'conductor': round(sum(cond) / len(cond) * 1000, 2)
            if cond else 0.0,
            'placement_http': round(mean('placement_http') * 1000, 2),
        },
        'cpu_ms_per_pass': {
            'agent_thread': round(mean('cpu') * 1000, 2),
            'conductor_thread': round(sum(cond_cpu) / len(cond_cpu) * 1000,
                                      2) if cond_cpu else 0.0,
        },
    }
    m = out['mean_ms']
    m['other'] = round(m['total'] - m['discover'] - m['rpc_report_data']
                       - m['placement_http'], 2)
    log('%-26s %5d agents in %7.1fs (%6.1f/s) p50 %7.1f ms p99 %7.1f ms; '
        'DB writes %d (SQL I/U/D %d, SELECT %d); Placement writes %d, '
        'calls %d (%d non-GET); errors %d',
        name, len(done), wall, out['agents_per_s'] or 0, out['p50_ms'],
        out['p99_ms'], db_writes, out['sql_writes'],
        out['sql'].get('SELECT', 0), pl_writes, out['placement_calls'],
        out['placement_http_writes'], out['errors'])
    if out['skipped_by_time_limit']:
        exc = TimeLimit('%s: %d agent(s) not run before the time limit'
                        % (name, out['skipped_by_time_limit']))
        exc.round = out
        raise exc
    return out, failed


# --------------------------------------------------------------------------
# Verification


def placement_get(adapter, url, **params):
    r = adapter.get(url, params=params or None,
                    microversion=PLACEMENT_MICROVERSION, raise_exc=False)
    if r.status_code != 200:
        raise CheckFailed('GET %s answered %s: %s'
                          % (url, r.status_code, r.text[:300]))
    return r.json()


def placement_snapshot(adapter):
    """{uuid: (name, parent, generation)} of every provider."""
    rps = placement_get(adapter, '/resource_providers')['resource_providers']
    return {rp['uuid']: (rp['name'], rp['parent_provider_uuid'],
                         rp['generation']) for rp in rps}


def db_counts(engine):
    import sqlalchemy as sa

    from cyborg.db import models
    with engine.connect() as conn:
        return {t.name: conn.execute(
            sa.select(sa.func.count()).select_from(t)).scalar()
            for t in models.Base.metadata.sorted_tables}


def verify_first_report(agents, devices, engine, adapter, roots, rng):
    """N×D deployables in the DB, N×D Cyborg providers under the compute
    nodes in Placement, rp_uuids agreeing, exact content on a sample.
    """
    import sqlalchemy as sa

    from cyborg.agent import providers
    from cyborg.db import models
    from cyborg.placement import client as placement

    n = len(agents)
    checks = []

    def check(what, ok, detail=''):
        checks.append({'check': what, 'ok': bool(ok), 'detail': detail})
        if not ok:
            log('CHECK FAILED: %s %s', what, detail)

    counts = db_counts(engine)
    dep = models.Deployable.__table__
    dev = models.Device.__table__
    with engine.connect() as conn:
        per_host = dict(conn.execute(
            sa.select(dev.c.hostname, sa.func.count())
            .select_from(dep.join(dev, dep.c.device_id == dev.c.id))
            .group_by(dev.c.hostname)).all())
        db_rps = set(conn.execute(sa.select(dep.c.rp_uuid)).scalars())
    check('DB: devices = N×D', counts['devices'] == n * devices,
          '%d devices' % counts['devices'])
    check('DB: deployables = N×D', counts['deployables'] == n * devices,
          '%d deployables' % counts['deployables'])
    check('DB: attach handles = N×D', counts['attach_handles'] == n * devices,
          '%d attach handles' % counts['attach_handles'])
    check('DB: D deployables on each of the N hosts',
          len(per_host) == n and set(per_host.values()) == {devices},
          '%d hosts' % len(per_host))

    snapshot = placement_snapshot(adapter)
    root_uuids = set(roots.values())
    children = {u for u, (_, parent, _) in snapshot.items()
                if parent in root_uuids}
    owned = {rp['uuid'] for rp in placement_get(
        adapter, '/resource_providers',
        required=placement.OWNER_TRAIT)['resource_providers']}
    check('Placement: N×D child providers under the compute nodes',
          len(children) == n * devices, '%d children' % len(children))
    orphans = []
    for rp_uuid in sorted(children - owned)[:5]:
        inv = placement_get(adapter, '/resource_providers/%s/inventories'
                            % rp_uuid)['inventories']
        orphans.append('%s without it, inventory %s'
                       % (snapshot[rp_uuid][0], inv or '{}'))
    check('Placement: N×D providers carry %s' % placement.OWNER_TRAIT,
          owned == children, '%d owned%s' % (
              len(owned), ': ' + '; '.join(orphans) if orphans else ''))
    check('DB deployable rp_uuids = Placement child providers',
          db_rps == children)

    sample = sorted(rng.sample(range(n), min(SAMPLE_AGENTS, n)))
    bad = []
    for i in sample:
        agent = agents[i]
        wanted = providers.wanted_providers(agent.nodename,
                                            agent.drivers[0].untimed
                                            .discover())
        tree = placement_get(adapter, '/resource_providers',
                             in_tree=roots[agent.nodename])[
                                 'resource_providers']
        got_children = {rp['uuid']: rp for rp in tree
                        if rp['uuid'] != roots[agent.nodename]}
        if set(got_children) != set(wanted):
            bad.append('%s: providers differ' % agent.nodename)
            continue
        for rp_uuid, want in wanted.items():
            if got_children[rp_uuid]['name'] != want['name']:
                bad.append('%s: name of %s' % (agent.nodename, rp_uuid))
            traits = set(placement_get(
                adapter, '/resource_providers/%s/traits' % rp_uuid)['traits'])
            if traits != set(want['traits']):
                bad.append('%s: traits of %s: %s'
                           % (agent.nodename, rp_uuid, sorted(traits)))
            inv = placement_get(adapter, '/resource_providers/%s/inventories'
                                % rp_uuid)['inventories']
            for rc, record in want['inventories'].items():
                if rc not in inv or any(inv[rc].get(k) != v
                                        for k, v in record.items()):
                    bad.append('%s: inventory of %s: %s'
                               % (agent.nodename, rp_uuid, inv))
            if set(inv) != set(want['inventories']):
                bad.append('%s: extra inventory on %s' % (agent.nodename,
                                                          rp_uuid))
    check('Placement: exact providers, traits and inventories on %d sampled '
          'agents' % len(sample), not bad, '; '.join(bad[:3]))
    example = None
    if sample:
        agent = agents[sample[0]]
        rp_uuid = sorted(providers.wanted_providers(
            agent.nodename, agent.drivers[0].untimed.discover()))[0]
        example = {
            'provider': snapshot[rp_uuid][0],
            'traits': sorted(placement_get(
                adapter, '/resource_providers/%s/traits' % rp_uuid)['traits']),
            'inventories': placement_get(
                adapter, '/resource_providers/%s/inventories'
                % rp_uuid)['inventories'],
        }
    return checks, snapshot, counts, example


# --------------------------------------------------------------------------
# Main


def configure(args, workdir, placement_url, db_url, transport_url):
    from cyborg.conf import CONF
    from cyborg.db import api as db_api

    CONF([], project='cyborg', default_config_files=[])
    CONF.set_override('transport_url', transport_url)
    CONF.set_override('rpc_response_timeout', args.rpc_timeout)
    CONF.set_override('executor_thread_pool_size',
                      max(64, args.concurrency * 2))
    CONF.set_override('auth_type', 'none', group='placement')
    CONF.set_override('endpoint_override', placement_url, group='placement')
    CONF.set_override('timeout', args.http_timeout, group='placement')
    CONF.set_override('connection', db_url, group='database')
    CONF.set_override('max_pool_size', max(5, args.concurrency),
                      group='database')
    CONF.set_override('state_path', workdir)
    db_api.configure(db_url)


def build_adapter(concurrency):
    """One keystoneauth Adapter (one requests session) for all agents,
    with a connection pool as large as the number of agent threads.
    """
    from keystoneauth1 import session as ks_session

    from cyborg.common import ksa

    adapter = ksa.get_adapter('placement',
                              default_microversion=PLACEMENT_MICROVERSION,
                              raise_exc=False)
    pool = ks_session.TCPKeepAliveAdapter(pool_connections=4,
                                          pool_maxsize=concurrency + 8)
    adapter.session.session.mount('http://', pool)
    return adapter


def create_compute_nodes(adapter, names, concurrency, deadline):
    """nova-compute's part: one provider per node with its inventory and
    traits (nova_cyborg_client.compute_node.ensure on our pooled adapter).
    Not counted in the agents' figures.
    """
    from nova_cyborg_client import compute_node
    from nova_cyborg_client import placement

    client = placement.PlacementClient(adapter=adapter)
    roots = {}

    def ensure(name):
        # Placement on SQLite answers 500 "database is locked" to concurrent
        # writers; nova-compute would try again at its next periodic task.
        for attempt in range(10):
            try:
                return compute_node.ensure(client, name)[0]
            except placement.PlacementError as e:
                if attempt == 9 or e.status < 500:
                    raise
                time.sleep(0.5)

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(
            concurrency, thread_name_prefix='nova') as pool:
        futures = {pool.submit(ensure, name): name for name in names}
        for f in concurrent.futures.as_completed(
                futures, timeout=max(deadline - time.monotonic(), 1)):
            roots[futures[f]] = f.result()
    return roots, time.perf_counter() - started


def _pidof(name):
    try:
        out = subprocess.run(['pidof', name], capture_output=True, text=True,
                             timeout=10).stdout.split()
        return int(out[0]) if out else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def run_phases(args, cleanup, result):
    from cyborg.agent import manager as agent_manager
    from cyborg.conductor import rpcapi as conductor_rpcapi
    from cyborg.drivers import fake
    from cyborg.placement import client as placement
    from cyborg import rpc

    started = time.monotonic()
    deadline = started + args.time_limit
    meta = result['meta']

    workdir = tempfile.mkdtemp(prefix='cyborg-agent-scale-')
    if args.keep:
        log('keeping %s', workdir)
    else:
        cleanup.add('temp dir', lambda: shutil.rmtree(workdir,
                                                      ignore_errors=True))

    # Databases --------------------------------------------------------
    db = databases.Database(args.db, workdir, args.server_url,
                            prefix='cyborg_bench')
    if not args.keep:
        cleanup.add('conductor database', db.drop)
    db.migrate()
    meta['db_version'] = db.server_version()
    log('conductor database: %s (%s)', args.db, meta['db_version'])

    placement_conn = None
    if args.placement_db == 'mysql':
        pdb = databases.Database(
            'mysql', workdir, args.server_url if args.db == 'mysql' else None,
            prefix='placement_bench')
        if not args.keep:
            cleanup.add('placement database', pdb.drop)
        placement_conn = pdb.url
        meta['placement_db_version'] = pdb.server_version()

    # Placement --------------------------------------------------------
    t0 = time.perf_counter()
    proc = harness_placement.PlacementProcess(workdir, placement_conn)
    cleanup.add('placement process', proc.stop)
    CPU_PIDS['placement process'] = proc.pid
    mariadb = _pidof('mariadbd') or _pidof('mysqld')
    if mariadb and 'mysql' in (args.db, args.placement_db):
        CPU_PIDS['mariadbd (shared server)'] = mariadb
    if args.transport == 'rabbit' and _pidof('beam.smp'):
        CPU_PIDS['rabbitmq (shared server)'] = _pidof('beam.smp')
    meta['placement_url'] = proc.url
    log('Placement (%s) ready at %s in %.1fs', args.placement_db, proc.url,
        time.perf_counter() - t0)

    transport_url = 'inproc://'
    if args.transport == 'rabbit':
        vhost = rabbit.VirtualHost(prefix='cyborg-bench')
        cleanup.add('RabbitMQ vhost', vhost.delete)
        transport_url = vhost.url
    configure(args, workdir, proc.url, db.url, transport_url)
    adapter = build_adapter(args.concurrency)

    # Compute nodes, as nova-compute makes them ----------------------
    names = [node_name(i, args.agents) for i in range(args.agents)]
    roots, secs = create_compute_nodes(adapter, names, args.concurrency,
                                       deadline)
    result['compute_nodes'] = {'count': len(roots), 'wall_s': round(secs, 2),
                               'per_s': round(len(roots) / secs, 1)}
    log('%d compute-node providers created in %.1fs (%.1f/s)', len(roots),
        secs, len(roots) / secs)

    # Conductor --------------------------------------------------------
    # Reports only: no binder sweeping the database beside them.
    conductor = embedded.Conductor(manager=timed_conductor_class()(),
                                   name='bench-conductor', bind=False)
    conductor.start()
    cleanup.add('transport', rpc.cleanup)
    cleanup.add('conductor', conductor.stop)
    meta['transport_url'] = transport_url

    # Agents -----------------------------------------------------------
    specs = os.path.join(workdir, 'host-specs')
    os.makedirs(specs)
    conductor_api = conductor_rpcapi.ConductorAPI(timeout=args.rpc_timeout)
    agents = []
    for name in names:
        path = os.path.join(specs, name + '.yaml')
        hostspec.write_gpus(path, args.devices)
        agents.append(agent_manager.AgentManager(
            TimedConductorAPI(conductor_api),
            placement.PlacementClient(CountingAdapter(adapter)),
            drivers=[timed_driver(fake.FakeDriver(path))],
            host=name, nodename=name))
    log('%d agents × %d devices, concurrency %d, transport %s',
        len(agents), args.devices, args.concurrency, args.transport)

    # Phase 1 ----------------------------------------------------------
    rounds = result['rounds']
    first, failed = run_round('first report (full=True)', agents,
                              lambda a: a.report_once(full=True),
                              args.concurrency, deadline)
    rounds.append(first)
    phase1 = [first]
    # A failed pass is retried by the agent at its next report; here at
    # once, for the agents that failed only.
    while failed and len(phase1) <= args.first_report_retries:
        r, failed = run_round('first report, retry %d' % len(phase1),
                              failed, lambda a: a.report_once(full=True),
                              args.concurrency, deadline)
        rounds.append(r)
        phase1.append(r)
    result['time_to_first_full_report_s'] = round(
        sum(r['wall_s'] for r in phase1), 1)

    engine = db.engine()
    cleanup.add('verification engine', engine.dispose)
    rng = random.Random(42)
    checks, snap_before, counts_before, example = verify_first_report(
        agents, args.devices, engine, adapter, roots, rng)
    result['checks'] = checks
    result['example_provider'] = example

    def check(what, ok, detail=''):
        checks.append({'check': what, 'ok': bool(ok), 'detail': detail})
        if not ok:
            log('CHECK FAILED: %s %s', what, detail)

    check('phase 1: every agent completed its first report%s'
          % (' (after %d retry round(s) of failed passes)'
             % (len(phase1) - 1) if len(phase1) > 1 else ''),
          not failed, '; '.join(phase1[-1]['error_samples']))
    reported = sum(r['db_writes_reported'] for r in phase1)
    sent = sum(r['sql_writes'] for r in phase1)
    # The conductor counts its write statements; a bulk statement over
    # many rows can reach the database as several cursor executes.
    check('phase 1: conductor wrote, with at least as many SQL '
          'INSERT/UPDATE/DELETE sent as write statements it counted',
          0 < reported <= sent, '%d vs %d' % (reported, sent))

    # Phase 2 ----------------------------------------------------------
    for k in range(args.rounds):
        r, _ = run_round('steady state %d' % (k + 1), agents,
                         lambda a: a.report_once(), args.concurrency,
                         deadline)
        rounds.append(r)
        check('steady state %d: 0 DB writes, 0 Placement calls, no errors'
              % (k + 1),
              r['errors'] == 0 and r['db_writes_reported'] == 0
              and r['sql_writes'] == 0 and r['placement_writes_reported'] == 0
              and r['placement_calls'] == 0,
              'db %d/%d placement %d calls %d errors %d'
              % (r['db_writes_reported'], r['sql_writes'],
                 r['placement_writes_reported'], r['placement_calls'],
                 r['errors']))
    r, _ = run_round('full resync (full=True)', agents,
                     lambda a: a.report_once(full=True), args.concurrency,
                     deadline)
    rounds.append(r)
    check('full resync: reads Placement, 0 DB writes, 0 Placement writes',
          r['errors'] == 0 and r['db_writes_reported'] == 0
          and r['sql_writes'] == 0 and r['placement_writes_reported'] == 0
          and r['placement_http_writes'] == 0 and r['placement_calls'] > 0,
          'db %d/%d placement %d non-GET %d errors %d'
          % (r['db_writes_reported'], r['sql_writes'],
             r['placement_writes_reported'], r['placement_http_writes'],
             r['errors']))

    snap_after = placement_snapshot(adapter)
    changed = [u for u in snap_before if snap_before[u] != snap_after.get(u)]
    check('Placement: no provider generation changed in phase 2',
          not changed and set(snap_after) == set(snap_before),
          '%d changed' % len(changed))
    counts_after = db_counts(engine)
    check('DB: row counts unchanged in phase 2',
          counts_after == counts_before)
    # Distinct lines that point at trouble, with their counts.
    found = collections.Counter(line.strip()[:300]
                                for line in proc.problems())
    meta['placement_log_problems'] = ['%d× %s' % (n, line) for line, n
                                      in found.most_common(20)]
    meta['total_s'] = round(time.monotonic() - started, 1)


def markdown(result):
    meta = result['meta']
    cn = result.get('compute_nodes') or {}
    lines = [
        '**%s agents × %s devices**, concurrency %s; conductor DB %s; '
        'Placement on %s (own process, 10 cheroot threads); transport %s; '
        '%s CPUs; Python %s; load average %s → %s'
        % (meta['agents'], meta['devices'], meta['concurrency'],
           meta.get('db_version', meta['db']),
           meta.get('placement_db_version', 'SQLite')
           if meta['placement_db'] != 'sqlite' else 'SQLite',
           meta['transport'], meta['cpus'], meta['python'],
           meta['loadavg_start'][0], meta.get('loadavg_end', ['?'])[0]),
        '',
    ]
    if result.get('time_to_first_full_report_s') is not None:
        lines += ['**Time to first full report: %.1f s** (until every '
                  "agent's first report pass has completed; see the checks "
                  'for what DB and Placement hold).'
                  % result['time_to_first_full_report_s'], '']
    if cn:
        lines += ['Compute-node providers created (nova-compute style, '
                  'before the agents start): %d in %.1f s (%.1f/s).'
                  % (cn['count'], cn['wall_s'], cn['per_s']), '']
    lines += [
        '| Phase | Agents done | Wall s | Agents/s | p50 ms | p99 ms | max ms '
        '| DB writes (conductor) | SQL I/U/D sent | SQL SELECT '
        '| Placement writes (agents) | Placement HTTP calls (non-GET) '
        '| Failed passes |',
        '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ]
    for r in result['rounds']:
        lines.append(
            '| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %d | %d | %d '
            '| %d | %d (%d) | %d |'
            % (r['name'], r['completed'], r['wall_s'], r['agents_per_s'] or 0,
               r['p50_ms'], r['p99_ms'], r['max_ms'] or 0,
               r['db_writes_reported'], r['sql_writes'],
               r['sql'].get('SELECT', 0), r['placement_writes_reported'],
               r['placement_calls'], r['placement_http_writes'], r['errors']))
    lines += ['', 'Mean time per agent pass (ms):', '',
              '| Phase | total | discover (fake driver) | RPC report_data '
              '| of which conductor | Placement HTTP | other |',
              '|---|---:|---:|---:|---:|---:|---:|']
    for r in result['rounds']:
        m = r['mean_ms']
        lines.append('| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |'
                     % (r['name'], m['total'], m['discover'],
                        m['rpc_report_data'], m['conductor'],
                        m['placement_http'], m['other']))
    lines += ['', 'CPU ms per agent pass, by thread (time.thread_time): the '
              "agent's thread (fake driver, RPC client, HTTP client) and the "
              "conductor's RPC handler (report_data: diff and DB driver):",
              '', '| Phase | agent thread | conductor thread |',
              '|---|---:|---:|']
    for r in result['rounds']:
        c = r.get('cpu_ms_per_pass') or {}
        lines.append('| %s | %.2f | %.2f |' % (
            r['name'], c.get('agent_thread', float('nan')),
            c.get('conductor_thread', float('nan'))))
    lines += ['', 'CPU seconds used during each phase (2 cores = 2 CPU '
              's per wall s; "machine" includes other users of the box):',
              '']
    labels = []
    for r in result['rounds']:
        labels += [k for k in r.get('cpu_s', {}) if k not in labels]
    lines += ['| Phase | wall s | ' + ' | '.join(labels) + ' |',
              '|---|---:|' + '---:|' * len(labels)]
    for r in result['rounds']:
        lines.append('| %s | %.1f | ' % (r['name'], r['wall_s']) + ' | '.join(
            '%.1f' % r.get('cpu_s', {}).get(k, float('nan'))
            for k in labels) + ' |')
    for r in result['rounds']:
        if not r['placement_by_endpoint']:
            continue
        n = r['completed'] or 1
        lines += ['', 'Placement calls in "%s" (statuses %s):' % (
            r['name'], ', '.join('%s×%s' % (v, k) for k, v in
                                 r['placement_status'].items())), '',
            '| Call | Total | Per agent | Mean ms |', '|---|---:|---:|---:|']
        for call, count in sorted(r['placement_by_endpoint'].items(),
                                  key=lambda kv: -kv[1]):
            lines.append('| `%s` | %d | %.2f | %.1f |' % (
                call, count, count / n,
                r.get('placement_ms_by_endpoint', {}).get(call, 0)))
    if result.get('checks'):
        lines += ['', 'Checks:', '']
        for c in result['checks']:
            lines.append('- [%s] %s%s' % ('x' if c['ok'] else ' ', c['check'],
                                          ' (%s)' % c['detail']
                                          if c['detail'] else ''))
    return '\n'.join(lines)


def add_arguments(parser):
    parser.add_argument('--agents', type=int,
                        help='simulated agents (default 1000, 20 with '
                             '--quick)')
    parser.add_argument('--devices', type=int, default=8,
                        help='GPUs per agent (default 8)')
    parser.add_argument('--concurrency', type=int, default=16,
                        help='agent passes running at once (default 16)')
    parser.add_argument('--rounds', type=int, default=3,
                        help='steady-state rounds (default 3), followed by '
                             'one full-resync round')
    parser.add_argument('--db', choices=('sqlite', 'mysql', 'postgresql'),
                        default='mysql', help='conductor database')
    parser.add_argument('--server-url',
                        help='SQLAlchemy URL of the database server for '
                             'mysql/postgresql; default %s'
                             % databases.SERVER_URLS)
    parser.add_argument('--placement-db', choices=('sqlite', 'mysql'),
                        default='mysql',
                        help="Placement's database (default mysql: a "
                             'throw-away database on the local MariaDB, '
                             'sqlite: Placement on SQLite, which answers '
                             '500 "database is locked" to concurrent '
                             'writers)')
    parser.add_argument('--transport', choices=('inproc', 'rabbit'),
                        default='inproc',
                        help='inproc: in-process messaging (default); '
                             'rabbit: the local RabbitMQ, on a vhost of '
                             'its own')
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: 20 agents unless --agents is given')
    parser.add_argument('--time-limit', type=float, default=1800.0,
                        help='seconds; no agent pass starts after it, and '
                             'the process exits (cleaning up) 180 s later '
                             'at the latest (default 1800)')
    parser.add_argument('--first-report-retries', type=int, default=5,
                        help='retry rounds for agents whose first report '
                             'failed (default 5)')
    parser.add_argument('--rpc-timeout', type=int, default=120)
    parser.add_argument('--http-timeout', type=int, default=60)
    parser.add_argument('--json', metavar='FILE')
    parser.add_argument('--verbose', action='store_true',
                        help="show the agents' Placement retry warnings")
    parser.add_argument('--keep', action='store_true',
                        help='keep the temp dir and databases (debugging)')


def run(args):
    if args.agents is None:
        args.agents = 20 if args.quick else 1000
    if args.agents < 1 or args.devices < 1 or args.concurrency < 1:
        args.parser.error('--agents, --devices and --concurrency must be '
                          '>= 1')

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format='%(asctime)s %(levelname)s %(name)s: '
                               '%(message)s')
    if not args.verbose:
        # One line per retried Placement call (the report counts them by
        # status instead).
        logging.getLogger('cyborg.placement.client').setLevel(logging.ERROR)

    import sqlalchemy as sa

    @sa.event.listens_for(sa.engine.Engine, 'before_cursor_execute')
    def _count(conn, cursor, statement, parameters, context, executemany):
        STATS.on_sql(statement)

    meta = machine.describe()
    meta.update({
        'agents': args.agents, 'devices': args.devices,
        'concurrency': args.concurrency, 'rounds': args.rounds,
        'db': args.db, 'placement_db': args.placement_db,
        'transport': args.transport, 'sqlalchemy': sa.__version__,
    })
    result = {'meta': meta, 'rounds': []}
    cleanup = Cleanup()
    status = {'done': False}

    def watchdog():
        log('hard time limit reached: cleaning up and exiting')
        cleanup.run()
        os._exit(3)

    timer = threading.Timer(args.time_limit + 180, watchdog)
    timer.daemon = True
    timer.start()

    def on_signal(signum, frame):
        raise KeyboardInterrupt('signal %d' % signum)

    signal.signal(signal.SIGTERM, on_signal)

    code = 0
    try:
        run_phases(args, cleanup, result)
    except TimeLimit as e:
        log('TIME LIMIT: %s', e)
        if getattr(e, 'round', None):
            result['rounds'].append(e.round)
        result['time_limit_hit'] = str(e)
        code = 2
    except KeyboardInterrupt:
        log('interrupted')
        code = 130
    finally:
        cleanup.run()
        timer.cancel()
        status['done'] = True
    result['meta']['loadavg_end'] = machine.loadavg()
    if result['rounds']:
        print(markdown(result))
    failed = [c for c in result.get('checks', []) if not c['ok']]
    if failed and code == 0:
        code = 1
    if result['meta'].get('placement_log_problems'):
        print('\nPlacement log lines that point at trouble:')
        for line in result['meta']['placement_log_problems']:
            print('    ' + line)
    print('\nTotal %s s; checks failed: %d; exit %d'
          % (result['meta'].get('total_s', '?'), len(failed), code))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(result, f, indent=2, default=str)
    return code
