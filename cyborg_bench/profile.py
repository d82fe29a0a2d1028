# SPDX-License-Identifier: Apache-2.0
"""Server time per request, in process: the API's WSGI application called
directly (no HTTP server, no client), on a SQLite file, MariaDB or
PostgreSQL, one workload at a time.

    cyborg-bench profile [--db sqlite|mysql|postgresql] [--requests N]
                         [--workloads noop,dp-create,...] [--cprofile]

For every workload it reports the CPU time and the wall time per request
(``time.process_time`` / ``time.perf_counter`` around N calls, after a
warm-up), the Python function calls per request, and beside them the
limit: the no-op app (``cyborg.wsgi.floor``) called the same way, plus one
durable commit (an INSERT committed on the same database with the
service's settings, i.e. SQLite WAL with synchronous=FULL) for writes, or
plus one indexed read (a SELECT by uuid) for reads, or, for the list,
one indexed read of as many rows as it lists (200 rows of a profile's
width, in id order). ``--cprofile`` prints
the functions with the most own time per workload, and the share per
package. The figures are the server's own work only: what an HTTP server
adds is measured by ``cyborg-bench side-by-side`` (the floor app under
uWSGI).

The requests are those of ``cyborg-bench load`` (the same bodies and
paths, no identity headers, ``[api] auth_strategy = noauth``). Every
answer's status is checked. See docs/performance-profiles.md.
"""

import collections
import cProfile
import io
import itertools
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
import uuid
import warnings

from cyborg_harness import databases

from cyborg_bench import machine
from cyborg_bench import workloads

warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')

GROUPS = [{'resources:CUSTOM_ACCELERATOR_GPU': '1',
           'trait:CUSTOM_GPU_NVIDIA': 'required'}]
WORKLOADS = ('noop', 'dp-create', 'dp-get', 'dp-delete', 'dp-list',
             'arq-create', 'boot')
# The limit each workload is measured against: the floor plus this.
LIMIT = {'noop': (), 'dp-create': ('commit',), 'dp-get': ('read',),
         'dp-delete': ('commit',), 'dp-list': ('list_read',),
         'arq-create': ('commit',),
         # create (commit), GET (read), DELETE (commit)
         'boot': ('commit', 'read', 'commit')}
REQUESTS_PER_OP = {'boot': 3}
LIST_ROWS = 200


def list_rows(count=LIST_ROWS):
    """`count` rows as wide as the device profiles dp-list reads (id,
    uuid, created_at, updated_at, name, profile_json, description), for
    the list's limit: the read of them all is "one indexed read" of a
    list.
    """
    groups = json.dumps({'groups': GROUPS})
    return [(i + 1, str(uuid.UUID(int=i)), '2026-12-03 07:35:22.816743',
             None, 'bench-list-%04d' % i, groups, 'cyborg-bench profile')
            for i in range(count)]


LIST_TABLE = ('CREATE TABLE IF NOT EXISTS bench_limit_list (id INTEGER '
              'PRIMARY KEY, uuid VARCHAR(36), created_at VARCHAR(26), '
              'updated_at VARCHAR(26), name VARCHAR(255), profile_json TEXT, '
              'description TEXT)')
LIST_INSERT = 'INSERT INTO bench_limit_list VALUES (%s)' % ', '.join(
    ['%s'] * 7)
LIST_SELECT = ('SELECT id, uuid, created_at, updated_at, name, profile_json, '
               'description FROM bench_limit_list ORDER BY id LIMIT %d'
               % LIST_ROWS)


def environ(method, path, body=None):
    """A WSGI environ as uWSGI or gunicorn would hand it over."""
    path, _, qs = path.partition('?')
    data = b'' if body is None else json.dumps(body).encode()
    env = {'REQUEST_METHOD': method, 'PATH_INFO': path, 'QUERY_STRING': qs,
           'SCRIPT_NAME': '', 'SERVER_NAME': '127.0.0.1',
           'SERVER_PORT': '6666', 'SERVER_PROTOCOL': 'HTTP/1.1',
           'REMOTE_ADDR': '127.0.0.1', 'HTTP_HOST': '127.0.0.1:6666',
           'wsgi.url_scheme': 'http', 'wsgi.version': (1, 0),
           'wsgi.multithread': False, 'wsgi.multiprocess': True,
           'wsgi.run_once': False, 'wsgi.errors': sys.stderr,
           'wsgi.input': io.BytesIO(data)}
    if body is not None:
        env['CONTENT_TYPE'] = 'application/json'
        env['CONTENT_LENGTH'] = str(len(data))
    return env


class App:
    """Calls a WSGI app; returns (status code, body bytes)."""

    def __init__(self, app):
        self.app = app

    def __call__(self, method, path, body=None, expect=200):
        got = []

        def start_response(status, headers, exc_info=None):
            got.append(status)
        out = self.app(environ(method, path, body), start_response)
        data = b''.join(out)
        if hasattr(out, 'close'):
            out.close()
        code = int(got[0][:3])
        if code != expect:
            raise RuntimeError('%s %s -> %s %s' % (method, path, got[0],
                                                   data[:300]))
        return data


class Workloads:
    """Each workload: (prepare(n) -> state, op(state, i))."""

    def __init__(self, call):
        self.call = call
        self.serial = itertools.count()
        self.created = []
        self.run = uuid.uuid4().hex[:8]

    def _dp(self):
        return [{'name': 'prof-%s-%d' % (self.run, next(self.serial)),
                 'groups': GROUPS}]

    def noop(self, n):
        return lambda i: self.call('GET', '/')

    def dp_create(self, n):
        def op(i):
            body = json.loads(self.call('POST', '/v2/device_profiles',
                                        self._dp(), expect=201))
            self.created.append(body['uuid'])
        return op

    def dp_get(self, n):
        have = list(self.created)
        return lambda i: self.call(
            'GET', '/v2/device_profiles/%s' % have[i % len(have)])

    def dp_delete(self, n):
        todo = []
        while len(todo) < n:
            body = json.loads(self.call('POST', '/v2/device_profiles',
                                        self._dp(), expect=201))
            todo.append(body['uuid'])
        return lambda i: self.call(
            'DELETE', '/v2/device_profiles/%s' % todo[i], expect=204)

    def dp_list(self, n):
        while True:
            # A page holds up to [api] max_limit: trim until 200 are left.
            have = json.loads(self.call('GET', '/v2/device_profiles'))[
                'device_profiles']
            if len(have) <= 200:
                break
            for p in have[200:]:
                self.call('DELETE', '/v2/device_profiles/%s' % p['uuid'],
                          expect=204)
        for _ in range(200 - len(have)):
            self.call('POST', '/v2/device_profiles', self._dp(), expect=201)

        got = json.loads(self.call('GET', '/v2/device_profiles'))
        assert len(got['device_profiles']) == 200
        # The answer is checked once, here: decoding 200 profiles in the
        # client would count as the server's time.
        return lambda i: self.call('GET', '/v2/device_profiles')

    def _arq_profile(self):
        name = 'prof-arq-%s-%d' % (self.run, next(self.serial))
        self.call('POST', '/v2/device_profiles',
                  [{'name': name, 'groups': GROUPS}], expect=201)
        return name

    def arq_create(self, n):
        body = {'device_profile_name': self._arq_profile()}
        return lambda i: self.call('POST', '/v2/accelerator_requests', body,
                                   expect=201)

    def boot(self, n):
        body = {'device_profile_name': self._arq_profile()}

        def op(i):
            arqs = json.loads(self.call('POST', '/v2/accelerator_requests',
                                        body, expect=201))['arqs']
            for a in arqs:
                self.call('GET', '/v2/accelerator_requests/%s' % a['uuid'])
            self.call('DELETE', '/v2/accelerator_requests?arqs=%s'
                      % ','.join(a['uuid'] for a in arqs), expect=204)
        return op


def _calls(stats):
    return sum(s[1] for s in stats.stats.values())


class Evictor:
    """Touches one byte per 64-byte cache line of `mib` MiB: what runs
    between two requests on a real server (the client, the kernel's
    network path, the other workers) leaves the CPU caches cold for the
    next one; a loop calling the app back to back does not.
    """

    def __init__(self, mib):
        self.buf = bytearray(mib << 20)
        self.fill = b'\x01' * len(self.buf[::64])

    def __call__(self):
        self.buf[::64] = self.fill


def measure(op, n, warmup, profile=False, evict=None):
    """(cpu s, wall s, pstats or None) for n calls; with `evict`, only
    the calls are timed, each after evict() ran.
    """
    for i in range(warmup):
        op(i)
    prof = None
    if profile:
        prof = cProfile.Profile(time.process_time)
        prof.enable()
    if evict is not None:
        cpu = wall = 0.0
        for i in range(n):
            evict()
            c, w = time.process_time(), time.perf_counter()
            op(warmup + i)
            cpu += time.process_time() - c
            wall += time.perf_counter() - w
    else:
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(n):
            op(warmup + i)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    st = None
    if prof is not None:
        prof.disable()
        st = pstats.Stats(prof)
    return cpu, wall, st


class Limits:
    """The floor app called the same way, and a durable commit and an
    indexed read on the service's database.
    """

    def __init__(self, engine, measure=measure):
        """`measure(op, n, warmup)` times each limit's n operations
        (profile's measure() by default).
        """
        self.engine = engine
        self.measure = measure

    def floor(self, n):
        from cyborg.wsgi import floor
        call = App(floor.application)
        return self.measure(lambda i: call('GET', '/'), n, 50)

    def commit(self, n):
        """INSERT + COMMIT on the driver's connection (SQLite: BEGIN
        IMMEDIATE first, as our writers do), nothing of SQLAlchemy.
        """
        with self.engine.begin() as conn:
            conn.exec_driver_sql('CREATE TABLE IF NOT EXISTS bench_limit '
                                 '(k VARCHAR(36) PRIMARY KEY, v TEXT)')
        raw = self.engine.raw_connection()
        sqlite = self.engine.dialect.name == 'sqlite'
        sql = 'INSERT INTO bench_limit (k, v) VALUES (%s, %s)'
        if sqlite:
            sql = sql.replace('%s', '?')
        self.keys = []

        def op(i):
            key = uuid.uuid4().hex
            self.keys.append(key)
            cursor = raw.driver_connection.cursor()
            if sqlite:
                cursor.execute('BEGIN IMMEDIATE')
            cursor.execute(sql, (key, 'x' * 200))
            raw.driver_connection.commit()
            cursor.close()
        try:
            return self.measure(op, n, 20)
        finally:
            raw.close()

    def read(self, n):
        """SELECT by primary key on the driver's connection, in a
        transaction of its own.
        """
        raw = self.engine.raw_connection()
        sqlite = self.engine.dialect.name == 'sqlite'
        sql = 'SELECT v FROM bench_limit WHERE k = %s'
        if sqlite:
            sql = sql.replace('%s', '?')
        keys = self.keys

        def op(i):
            cursor = raw.driver_connection.cursor()
            if sqlite:
                cursor.execute('BEGIN')
            cursor.execute(sql, (keys[i % len(keys)],))
            cursor.fetchall()
            raw.driver_connection.commit()
            cursor.close()
        try:
            return self.measure(op, n, 20)
        finally:
            raw.close()

    def list_read(self, n):
        """The SELECT of LIST_ROWS rows in id order (the primary key), on
        the driver's connection, in a transaction of its own.
        """
        sqlite = self.engine.dialect.name == 'sqlite'
        insert = LIST_INSERT.replace('%s', '?') if sqlite else LIST_INSERT
        raw = self.engine.raw_connection()
        try:
            cursor = raw.driver_connection.cursor()
            cursor.execute(LIST_TABLE)
            cursor.execute('DELETE FROM bench_limit_list')
            cursor.executemany(insert, list_rows())
            raw.driver_connection.commit()
            cursor.close()

            def op(i):
                cursor = raw.driver_connection.cursor()
                if sqlite:
                    cursor.execute('BEGIN')
                cursor.execute(LIST_SELECT)
                cursor.fetchall()
                raw.driver_connection.commit()
                cursor.close()
            return self.measure(op, n, 20)
        finally:
            raw.close()


def _by_package(st, top):
    groups = collections.Counter()
    total = 0.0
    for (path, _line, func), (_cc, _nc, tt, _ct, _callers) in \
            st.stats.items():
        total += tt
        if path == '~':
            groups['C (builtins, sqlite3, json)'] += tt
            continue
        if '/cyborg/' in path and 'site-packages' not in path:
            groups['cyborg'] += tt
            continue
        parts = path.split('site-packages/')
        if len(parts) > 1:
            groups[parts[1].split('/')[0].replace('.py', '')] += tt
        else:
            groups['stdlib ' + os.path.basename(path).replace('.py', '')] \
                += tt
    lines = ['| package | own CPU share |', '|---|---:|']
    for name, tt in groups.most_common(top):
        lines.append('| %s | %.0f%% |' % (name, 100 * tt / total))
    return '\n'.join(lines)


def _top(st, n, top):
    out = io.StringIO()
    st.stream = out
    st.sort_stats('tottime').print_stats(top)
    text = out.getvalue()
    return text[text.find('   ncalls'):].rstrip()


def _setup(args, workdir):
    from cyborg.api import pipeline
    from cyborg.db import migration
    db = databases.Database(args.db, workdir=workdir, prefix='cyborg_prof')
    url = db.url
    conf = os.path.join(workdir, 'cyborg.conf')
    with open(conf, 'w') as f:
        f.write('[api]\nauth_strategy = noauth\n'
                '[database]\nconnection = %s\n' % url)
    app = pipeline.build_api([conf])
    from cyborg.db import api
    migration.upgrade()
    return App(app), api.get_engine(), db


def run(args):
    names = workloads.chosen(args.workloads, WORKLOADS)
    workdir = tempfile.mkdtemp(prefix='cyborg-profile-')
    db = None
    try:
        call, engine, db = _setup(args, workdir)
        limits = Limits(engine)
        n = args.requests
        base = {}
        for what in ('floor', 'commit', 'read', 'list_read'):
            cpu, wall, _ = getattr(limits, what)(n)
            base[what] = (cpu / n, wall / n)
        work = Workloads(call)
        evict = Evictor(args.evict_mib) if args.evict_mib else None
        rows = []
        profiles = {}
        if 'dp-get' in names and 'dp-create' not in names[
                :names.index('dp-get')]:
            # dp-get reads the profiles dp-create made.
            if 'dp-create' in names:
                names.remove('dp-create')
            names.insert(names.index('dp-get'), 'dp-create')
        for name in names:
            op = getattr(work, name.replace('-', '_'))(n + args.warmup)
            cpu, wall, _ = measure(op, n, args.warmup, evict=evict)
            per = REQUESTS_PER_OP.get(name, 1)
            limit_cpu = per * base['floor'][0] + sum(
                base[k][0] for k in LIMIT[name])
            limit_wall = per * base['floor'][1] + sum(
                base[k][1] for k in LIMIT[name])
            row = {'workload': name, 'requests_per_op': per,
                   'cpu_ms': 1000 * cpu / n, 'wall_ms': 1000 * wall / n,
                   'limit_cpu_ms': 1000 * limit_cpu,
                   'limit_wall_ms': 1000 * limit_wall}
            if args.calls or args.cprofile:
                # A second, profiled pass (cProfile slows every call).
                op = getattr(work, name.replace('-', '_'))(n + 5)
                _c, _w, st = measure(op, n, 5, profile=True)
                row['calls_per_op'] = round(_calls(st) / n)
                profiles[name] = st
            rows.append(row)
        print('\n## Server time per operation, in process (%s, %d ops%s)\n'
              % (args.db, n, ', caches cold: %d MiB touched before each'
                 % args.evict_mib if evict else ''))
        ms = {k: tuple(1000 * x for x in v) for k, v in base.items()}
        print('floor (no-op app) %.3f ms CPU, %.3f ms wall; one durable '
              'commit %.3f / %.3f ms; one indexed read %.3f / %.3f ms; '
              'one read of %d rows %.3f / %.3f ms\n'
              % (ms['floor'] + ms['commit'] + ms['read'] + (LIST_ROWS,)
                 + ms['list_read']))
        print('| workload | CPU ms/op | wall ms/op | limit CPU ms | '
              'limit wall ms | wall / limit | Python calls/op |')
        print('|---|---:|---:|---:|---:|---:|---:|')
        for r in rows:
            print('| %s | %.3f | %.3f | %.3f | %.3f | %.2f | %s |' % (
                r['workload'], r['cpu_ms'], r['wall_ms'], r['limit_cpu_ms'],
                r['limit_wall_ms'], r['wall_ms'] / r['limit_wall_ms'],
                r.get('calls_per_op', '')))
        if args.cprofile:
            for name, st in profiles.items():
                print('\n### %s\n\n%s\n\n```\n%s\n```'
                      % (name, _by_package(st, 8), _top(st, n, args.top)))
        if args.json:
            meta = machine.describe()
            meta.update(db=args.db, requests=n, evict_mib=args.evict_mib)
            with open(args.json, 'w') as f:
                json.dump({'meta': meta, 'limits_ms': {
                    k: [1000 * x for x in v] for k, v in base.items()},
                    'results': rows}, f, indent=2)
    finally:
        from cyborg.db import api
        api.dispose()
        if db is not None:
            db.drop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def add_arguments(parser):
    parser.add_argument('--db', default='sqlite',
                        choices=('sqlite', 'mysql', 'postgresql'))
    parser.add_argument('--requests', type=int, default=500,
                        help='measured operations per workload (500)')
    parser.add_argument('--warmup', type=int, default=50)
    parser.add_argument('--workloads', default=','.join(WORKLOADS))
    parser.add_argument('--calls', action='store_true',
                        help='count Python calls per operation (a second, '
                             'profiled pass)')
    parser.add_argument('--cprofile', action='store_true',
                        help='print the top functions per workload')
    parser.add_argument('--top', type=int, default=25)
    parser.add_argument('--evict-mib', type=int, default=0, metavar='MIB',
                        help='touch this much memory before each measured '
                             'operation (not timed), so that it starts '
                             'with cold CPU caches as a request on a real '
                             'server does (the limits stay warm)')
    parser.add_argument('--json', metavar='FILE')
