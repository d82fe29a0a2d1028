# SPDX-License-Identifier: Apache-2.0
"""API benchmark: the API under gunicorn, a real HTTP server over loopback.

What it does, all on 127.0.0.1:

1. creates a throw-away database (SQLite file, or a fresh database on the
   local MariaDB/MySQL or PostgreSQL server), migrates it with
   ``cyborg.db.migration.upgrade`` and writes a temporary cyborg.conf
   (``[api] auth_strategy = noauth``);
2. starts gunicorn serving ``cyborg.wsgi.api:application`` in a subprocess
   (``CYBORG_CONFIG_FILE`` points at that file) on a free loopback port and
   waits until ``GET /v2/device_profiles`` answers 200;
3. drives it with a bounded load generator: a pool of threads, each with its
   own keep-alive connection (cyborg_bench.client), a fixed number of
   requests per scenario and a hard time bound per scenario;
4. reports req/s, p50/p99/max latency and the server's CPU time per
   request for

   * ``POST /v2/device_profiles``
   * ``GET /v2/device_profiles`` with 200 profiles in the table
   * ``POST /v2/accelerator_requests``
   * ``GET /v2/accelerator_requests?instance=<uuid>`` with 500, 1k, 10k and
     100k ARQs in the table (rows bulk-loaded with SQLAlchemy executemany,
     one or two ARQs per instance, so every lookup matches 1-2 rows; the
     database's plan for the query is printed too)

   as a Markdown table, and optionally as JSON (``--json FILE``).

See docs/benchmarks/api.md for the method and the figures.

Examples::

    cyborg-bench api --quick
    cyborg-bench api --db sqlite --json /tmp/s.json
    cyborg-bench api --db mysql
    cyborg-bench api --db postgresql

Speed targets belong here, not in the unit tests.
"""

import datetime
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
import warnings

import sqlalchemy as sa

from cyborg_harness import cpu
from cyborg_harness import databases
from cyborg_harness import net
from cyborg_harness import processes

from cyborg_bench import client as http
from cyborg_bench import machine
from cyborg_bench import stats

# oslo.service (imported through cyborg) warns that eventlet is deprecated.
warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')

HOST = '127.0.0.1'
NOAUTH_PROJECT = 'cyborg-bench-project'
# What Nova's keystoneauth adapter sends: no Accept header, a JSON body
# type on POST.
DP_GROUPS = [{'resources:CUSTOM_ACCELERATOR_GPU': '1',
              'trait:CUSTOM_GPU_NVIDIA': 'required'}]

# Requests per scenario, ARQ table sizes for the lookups, the time bound of
# one scenario and the minimum warm-up.
PROFILES = {
    'full': dict(dp_create=1000, dp_list=1000, arq_create=1000, lookup=3000,
                 sizes=(500, 1000, 10000, 100000), phase_seconds=60.0,
                 warmup=20),
    'quick': dict(dp_create=50, dp_list=30, arq_create=50, lookup=100,
                  sizes=(1000, 10000), phase_seconds=15.0, warmup=6),
}
DP_LIST_ROWS = 200


def log(msg):
    print('[cyborg-bench api %s] %s' % (time.strftime('%H:%M:%S'), msg),
          file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Database


def _tables():
    from cyborg.db import models
    return (models.DeviceProfile.__table__,
            models.ExtendedAcceleratorRequest.__table__)


def count_rows(engine, table):
    with engine.connect() as conn:
        return conn.execute(
            sa.select(sa.func.count()).select_from(table)).scalar()


def trim_device_profiles(engine, keep):
    """Keep only the `keep` oldest profiles (all created through the API)."""
    dp, _ = _tables()
    with engine.begin() as conn:
        ids = conn.execute(
            sa.select(dp.c.id).order_by(dp.c.id)).scalars().all()
        if len(ids) > keep:
            conn.execute(dp.delete().where(dp.c.id > ids[keep - 1]))


def delete_all_arqs(engine):
    _, arq = _tables()
    with engine.begin() as conn:
        conn.execute(arq.delete())


def _known(table, rows):
    """Rows restricted to the table's columns; columns we do not name get
    their model defaults.
    """
    names = set(table.c.keys())
    return [{k: v for k, v in row.items() if k in names} for row in rows]


def bulk_load_arqs(engine, dp_id, target, instances, batch=10000):
    """Insert ARQs until the table holds `target` rows.

    Instances get 1 or 2 ARQs alternately (as from a one-group profile asking
    for one or two devices), all in BindStarted with a host and device RP,
    so a lookup by instance matches 1-2 rows. New instance uuids are
    appended to `instances`. Returns the seconds spent.
    """
    _, arq = _tables()
    started = time.perf_counter()
    have = count_rows(engine, arq)
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    rows = []
    with engine.begin() as conn:
        while have < target:
            instance = str(uuid.uuid4())
            instances.append(instance)
            per_instance = 1 + len(instances) % 2
            for _ in range(min(per_instance, target - have)):
                rows.append({
                    'uuid': str(uuid.uuid4()), 'created_at': now,
                    'updated_at': None, 'project_id': NOAUTH_PROJECT,
                    'state': 'BindStarted', 'device_profile_id': dp_id,
                    'device_profile_group_id': 0,
                    'hostname': 'compute-%d' % (len(instances) % 500),
                    'device_rp_uuid': str(uuid.uuid5(
                        uuid.NAMESPACE_DNS,
                        'rp-%d' % (len(instances) % 2000))),
                    'instance_uuid': instance,
                    'attach_handle_id': None, 'deployable_id': None})
                have += 1
            if len(rows) >= batch:
                conn.execute(arq.insert(), _known(arq, rows))
                rows = []
        if rows:
            conn.execute(arq.insert(), _known(arq, rows))
    with engine.begin() as conn:
        # Fresh statistics, as autovacuum/auto-analyze would give them.
        if engine.dialect.name == 'postgresql':
            conn.execute(sa.text('ANALYZE extended_accelerator_requests'))
        elif engine.dialect.name == 'mysql':
            conn.execute(
                sa.text('ANALYZE TABLE extended_accelerator_requests'))
    return time.perf_counter() - started


# --------------------------------------------------------------------------
# Server


def write_config(path, db_url, pool_size):
    with open(path, 'w') as f:
        f.write('[DEFAULT]\n'
                'debug = False\n'
                'use_stderr = True\n'
                '\n[api]\n'
                'auth_strategy = noauth\n'
                'noauth_project_id = %s\n'
                '\n[database]\n'
                'connection = %s\n'
                'max_pool_size = %d\n'
                % (NOAUTH_PROJECT, db_url, pool_size))


class Server(processes.Process):
    """gunicorn serving cyborg.wsgi.api:application in a subprocess
    (`app` instead; `python`: another virtualenv's interpreter, with its
    own gunicorn).
    """

    def __init__(self, config, workdir, workers, threads, worker_class,
                 timeout=60.0, app='cyborg.wsgi.api:application',
                 ready_path='/v2/device_profiles', python=sys.executable):
        self.port = net.free_port()
        self.ready_path = ready_path
        cmd = [python, '-m', 'gunicorn',
               '--bind', '%s:%d' % (HOST, self.port),
               '--workers', str(workers),
               '--worker-class', worker_class,
               '--threads', str(threads),
               '--keep-alive', '30',
               '--timeout', '120',
               '--log-level', 'warning',
               '--error-logfile', '-',
               '--no-control-socket',
               app]
        super().__init__('gunicorn', cmd, workdir, cwd=workdir,
                         env={'CYBORG_CONFIG_FILE': config})
        try:
            self.wait_for(self._answers, 'an answer', timeout)
        except BaseException:
            self.stop()
            raise

    def _answers(self):
        client = Client(self.port, 2)
        try:
            return client.request('GET', self.ready_path)[0] == 200
        except OSError:
            return False
        finally:
            client.close()

    def cpu_seconds(self):
        """User+system CPU seconds used so far by gunicorn's master and
        workers. Unlike wall time this hardly moves when other jobs share
        the CPUs.
        """
        return cpu.group_seconds(self.pid)

    def log_offset(self):
        return len(self.logs())

    def log_problems(self, offset=0):
        """Lines of the server log (from `offset`) that point at trouble."""
        keys = ('Traceback', 'ERROR', 'CRITICAL', 'WORKER TIMEOUT',
                'Worker exited', 'was sent SIG', 'Error', 'locked')
        return [line.rstrip() for line in self.logs()[offset:].splitlines()
                if any(k in line for k in keys)]


# --------------------------------------------------------------------------
# Load generator


def Client(port, timeout):
    """A keep-alive connection to the API (JSON bodies)."""
    return http.local(port, timeout=timeout)


def run_phase(port, name, make_request, expect, count, concurrency,
              time_limit, rows=None, warmup=0, request_timeout=30.0,
              cpu_probe=None):
    """Send `count` requests from `concurrency` threads, at most
    `time_limit` seconds. make_request(i) -> (method, path, body).
    """
    lock = threading.Lock()
    state = {'next': 0}
    latencies = []
    statuses = {}
    samples = []

    if warmup:
        # Same shape as the measured run, so every worker is warm; its
        # requests use negative indexes (distinct names, other lookups).
        run_phase(port, None, lambda i: make_request(-1 - i), expect,
                  warmup, concurrency, time_limit, rows,
                  request_timeout=request_timeout)

    deadline = time.monotonic() + time_limit

    def worker():
        client = Client(port, request_timeout)
        mine = []
        try:
            while True:
                with lock:
                    i = state['next']
                    if i >= count or time.monotonic() >= deadline:
                        break
                    state['next'] = i + 1
                method, path, body = make_request(i)
                t0 = time.perf_counter()
                try:
                    status, payload = client.request(method, path, body)
                except Exception as e:  # noqa: BLE001 - counted as error
                    status, payload = 'exc:%s' % type(e).__name__, repr(e)
                    client.close()
                mine.append(time.perf_counter() - t0)
                with lock:
                    statuses[status] = statuses.get(status, 0) + 1
                    if status != expect and len(samples) < 5:
                        samples.append('%s %s -> %s %s' % (
                            method, path, status, payload[:300]))
        finally:
            client.close()
            with lock:
                latencies.extend(mine)

    cpu_before = cpu_probe() if cpu_probe else None
    started = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True)
               for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(time_limit + request_timeout + 5)
    elapsed = time.perf_counter() - started
    cpu_after = cpu_probe() if cpu_probe else None

    latencies.sort()
    done = len(latencies)
    errors = done - statuses.get(expect, 0)
    result = {
        'name': name, 'rows': rows, 'requests': done, 'planned': count,
        'concurrency': concurrency, 'seconds': round(elapsed, 3),
        'req_per_s': round(done / elapsed, 1) if elapsed else 0.0,
        'server_cpu_ms_per_req': (
            round((cpu_after - cpu_before) / done * 1000, 2)
            if done and cpu_before is not None and cpu_after is not None
            else None),
        'errors': errors,
        'statuses': {str(k): statuses[k]
                     for k in sorted(statuses, key=str)},
        'error_samples': samples,
        'truncated_by_time_limit': done < count,
    }
    result.update(stats.summarize(latencies))
    if name is None:
        return result
    log('%-45s rows=%-7s n=%-5d %7.1f req/s  p50 %s ms  p99 %s ms  '
        'server CPU %s ms/req  errors %d'
        % (name, rows if rows is not None else '-', done,
           result['req_per_s'], result.get('p50_ms'), result.get('p99_ms'),
           result['server_cpu_ms_per_req'], errors))
    return result


# --------------------------------------------------------------------------
# Scenarios


class TimeBudgetSpent(Exception):
    pass


def run_benchmark(args, profile, engine, server, deadline):
    results = []
    try:
        _scenarios(args, profile, engine, server, deadline, results)
    except TimeBudgetSpent:
        log('WARNING: --max-seconds spent; later scenarios skipped')
    return results


def _scenarios(args, profile, engine, server, deadline, results):
    """Run every scenario in order, appending to `results`."""
    run_id = uuid.uuid4().hex[:6]
    dp_table, arq_table = _tables()

    warmup = max(profile['warmup'], 3 * args.concurrency)

    def phase(*a, **kw):
        left = deadline - time.monotonic()
        if left < 2:
            raise TimeBudgetSpent()
        kw.setdefault('concurrency', args.concurrency)
        kw.setdefault('time_limit', min(profile['phase_seconds'], left))
        kw.setdefault('warmup', warmup)
        kw.setdefault('cpu_probe', server.cpu_seconds)
        results.append(run_phase(server.port, *a, **kw))
        return results[-1]

    # POST /v2/device_profiles: every request creates a uniquely named one.
    def dp_create(i):
        return ('POST', '/v2/device_profiles',
                [{'name': 'bench-%s-%d' % (run_id, i), 'groups': DP_GROUPS,
                  'description': 'benchmark profile %d' % i}])

    phase('POST /v2/device_profiles', dp_create, 201, profile['dp_create'],
          rows=None)
    results[-1]['rows'] = '0→%d' % count_rows(engine, dp_table)

    # Exactly DP_LIST_ROWS profiles for the list scenario.
    have = count_rows(engine, dp_table)
    client = Client(server.port, 30)
    for i in range(have, DP_LIST_ROWS):
        status, body = client.request(*dp_create(100000 + i))
        if status != 201:
            raise RuntimeError('seeding profiles: %s %s' % (status, body))
    client.close()
    trim_device_profiles(engine, DP_LIST_ROWS)
    assert count_rows(engine, dp_table) == DP_LIST_ROWS
    with engine.connect() as conn:
        bench_dp = conn.execute(
            sa.select(dp_table.c.id, dp_table.c.name)
            .order_by(dp_table.c.id).limit(1)).one()

    phase('GET /v2/device_profiles', lambda i: (
        'GET', '/v2/device_profiles', None), 200, profile['dp_list'],
        rows=DP_LIST_ROWS)

    # POST /v2/accelerator_requests: one group, one unit -> one ARQ each.
    phase('POST /v2/accelerator_requests', lambda i: (
        'POST', '/v2/accelerator_requests',
        {'device_profile_name': bench_dp.name}), 201, profile['arq_create'],
        rows=None)
    results[-1]['rows'] = '0→%d' % count_rows(engine, arq_table)
    delete_all_arqs(engine)

    # GET /v2/accelerator_requests?instance=<uuid> as the table grows.
    instances = []
    rng = random.Random(42)
    for size in profile['sizes']:
        secs = bulk_load_arqs(engine, bench_dp.id, size, instances)
        log('ARQ table now %d rows (loaded in %.1fs)'
            % (count_rows(engine, arq_table), secs))
        verify_lookup(server.port, instances[-1])
        picks = [rng.choice(instances) for _ in range(profile['lookup']
                                                      + warmup)]

        def lookup(i, picks=picks):
            return ('GET', '/v2/accelerator_requests?instance=%s' % picks[i],
                    None)

        r = phase('GET /v2/accelerator_requests?instance=', lookup, 200,
                  profile['lookup'], rows=size)
        r['bulk_load_seconds'] = round(secs, 2)
        r['plan'] = explain_lookup(engine, instances[-1])
    return results


def explain_lookup(engine, instance):
    """The database's plan for the ARQ-by-instance query the API runs
    (rebuilt from cyborg.db.arqs; None if its internals moved).
    """
    try:
        from cyborg.db import arqs
        query = (arqs._SELECT.where(arqs.ARQ.c.instance_uuid == instance)
                 .order_by(arqs.ARQ.c.id).limit(1000))
        sql = str(query.compile(dialect=engine.dialect,
                                compile_kwargs={'literal_binds': True}))
    except Exception as e:  # noqa: BLE001 - informational only
        return ['(no plan: %s)' % e]
    kind = engine.dialect.name
    prefix = 'EXPLAIN QUERY PLAN ' if kind == 'sqlite' else 'EXPLAIN '
    with engine.connect() as conn:
        result = conn.execute(sa.text(prefix + sql))
        cols = list(result.keys())
        plan = []
        for row in result:
            if kind == 'postgresql':
                plan.append(row[0])
            elif kind == 'sqlite':
                plan.append(row[-1])
            else:
                d = dict(zip(cols, row))
                plan.append('table=%s type=%s key=%s rows=%s extra=%s' % (
                    d.get('table'), d.get('type'), d.get('key'),
                    d.get('rows'), d.get('Extra')))
    return plan


def verify_lookup(port, instance):
    """Sanity check: a lookup returns that instance's 1-2 ARQs, no others."""
    client = Client(port, 30)
    status, body = client.request(
        'GET', '/v2/accelerator_requests?instance=%s' % instance)
    client.close()
    arqs = json.loads(body)['arqs'] if status == 200 else None
    if (not arqs or len(arqs) > 2
            or any(a['instance_uuid'] != instance for a in arqs)):
        raise RuntimeError('lookup of %s answered %s %s'
                           % (instance, status, body[:500]))


def markdown(meta, results):
    lines = [
        '**%s** — %s; gunicorn %s worker(s) × %s thread(s) (%s); '
        'client concurrency %s; %s CPU(s); Python %s; load average %s → %s'
        % (meta['db'], meta['db_version'], meta['workers'], meta['threads'],
           meta['worker_class'], meta['concurrency'], meta['cpus'],
           meta['python'], meta['loadavg_start'][0],
           meta.get('loadavg_end', ['?'])[0]),
        '',
        '| Operation | Rows in table | Requests | Errors | req/s '
        '| p50 ms | p99 ms | max ms | server CPU ms/req |',
        '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
    ]
    for r in results:
        rows = r['rows']
        if isinstance(rows, int):
            rows = '{:,}'.format(rows)
        name = r['name'] + ('<uuid>' if r['name'].endswith('=') else '')
        done = str(r['requests'])
        if r['requests'] != r['planned']:
            done += ' (of %d)' % r['planned']
        cpu = r['server_cpu_ms_per_req']
        lines.append(
            '| `%s` | %s | %s | %d | %.1f | %s | %s | %s | %s |'
            % (name, rows, done, r['errors'], r['req_per_s'],
               stats.fmt(r, 'p50_ms', 2), stats.fmt(r, 'p99_ms', 2),
               stats.fmt(r, 'max_ms', 2),
               '–' if cpu is None else '%.2f' % cpu))
    return '\n'.join(lines)


def add_arguments(parser):
    parser.add_argument('--db', choices=('sqlite', 'mysql', 'postgresql'),
                        default='sqlite')
    parser.add_argument('--server-url',
                        help='SQLAlchemy URL of the database server for '
                             'mysql/postgresql (a throw-away database is '
                             'created on it); default %s'
                             % databases.SERVER_URLS)
    parser.add_argument('--workers', type=int, default=2,
                        help='gunicorn worker processes (default 2)')
    parser.add_argument('--threads', type=int, default=1,
                        help='threads per worker (default 1; >1 means the '
                             'gthread worker)')
    parser.add_argument('--worker-class',
                        help='gunicorn worker class (default: sync with '
                             '--threads 1, which closes the connection '
                             'after each response so the kernel spreads '
                             'requests over idle workers; gthread with more '
                             'threads, which keeps connections alive)')
    parser.add_argument('--concurrency', type=int, default=4,
                        help='client threads, one connection each '
                             '(default 4)')
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: small counts, 1k and 10k ARQs only')
    parser.add_argument('--requests', type=int,
                        help='override the request count of every scenario')
    parser.add_argument('--sizes',
                        help='comma-separated ARQ table sizes for the '
                             'lookup scenario (e.g. 500,1000,10000,100000)')
    parser.add_argument('--phase-seconds', type=float,
                        help='hard time bound per scenario')
    parser.add_argument('--max-seconds', type=float, default=600,
                        help='hard bound on the whole run; scenarios that '
                             'would start later are skipped (default 600)')
    parser.add_argument('--json', metavar='FILE',
                        help='also write the results as JSON')
    parser.add_argument('--keep', action='store_true',
                        help='keep the temp dir and database (debugging)')


def run(args):
    if args.worker_class is None:
        args.worker_class = 'sync' if args.threads == 1 else 'gthread'

    profile = dict(PROFILES['quick' if args.quick else 'full'])
    if args.requests:
        for key in ('dp_create', 'dp_list', 'arq_create', 'lookup'):
            profile[key] = args.requests
    if args.sizes:
        profile['sizes'] = tuple(int(s) for s in args.sizes.split(','))
    if args.phase_seconds:
        profile['phase_seconds'] = args.phase_seconds

    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix='cyborg-bench-')
    db = server = engine = None
    meta = {}
    try:
        db = databases.Database(args.db, workdir, args.server_url,
                                prefix='cyborg_bench')
        db.migrate()
        engine = db.engine()
        log('database %s migrated (%s)' % (db.backend, db.server_version()))
        config = os.path.join(workdir, 'cyborg.conf')
        write_config(config, db.url, pool_size=max(5, args.threads))
        server = Server(config, workdir, args.workers, args.threads,
                        args.worker_class)
        log('gunicorn up on %s:%d' % (HOST, server.port))
        meta = dict(machine.describe())
        meta.update({
            'db': args.db, 'db_version': db.server_version(),
            'workers': args.workers, 'threads': args.threads,
            'worker_class': args.worker_class,
            'concurrency': args.concurrency,
            'sqlalchemy': sa.__version__,
            'mode': 'quick' if args.quick else 'full',
            'profile': {k: list(v) if isinstance(v, tuple) else v
                        for k, v in profile.items()},
        })
        offset = server.log_offset()
        results = run_benchmark(args, profile, engine, server,
                                deadline=time.monotonic() + args.max_seconds
                                - (time.perf_counter() - started))
        problems = server.log_problems(offset)
        meta['total_seconds'] = round(time.perf_counter() - started, 1)
        meta['loadavg_end'] = machine.loadavg()
        meta['server_log_problems'] = problems[:50]
        print(markdown(meta, results))
        for r in results:
            if r.get('plan'):
                print('\nPlan of the lookup query at %s rows:' % r['rows'])
                for line in r['plan']:
                    print('    ' + line)
        print('\nTotal run time %.1fs. Server log problem lines during the '
              'scenarios: %d' % (meta['total_seconds'], len(problems)))
        for line in problems[:20]:
            print('    ' + line)
        if args.json:
            with open(args.json, 'w') as f:
                json.dump({'meta': meta, 'results': results}, f, indent=2)
        failed = sum(r['errors'] for r in results)
        if failed:
            print('\n%d request(s) did not get the expected status:' % failed)
            for r in results:
                for s in r['error_samples']:
                    print('    ' + s)
        return 1 if failed else 0
    finally:
        if server is not None:
            server.stop()
        if engine is not None:
            engine.dispose()
        if db is not None and not args.keep:
            db.drop()
        if args.keep:
            log('kept %s (database %s)' % (workdir, db and db.url))
        else:
            shutil.rmtree(workdir, ignore_errors=True)
