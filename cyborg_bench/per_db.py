# SPDX-License-Identifier: Apache-2.0
"""The side-by-side workloads against our API under gunicorn on SQLite,
MariaDB and PostgreSQL, each beside its limit.

    cyborg-bench per-db [--db sqlite,mysql,postgresql] [--quick]

For each database: a throw-away database (cyborg_harness.databases),
migrated; gunicorn (2 sync workers, as ``cyborg-bench api``) serving
``cyborg.wsgi.api``, and ``cyborg.wsgi.floor`` (the no-op app) under the
same gunicorn; ``cyborg-bench load`` runs the one-client workloads of
side-by-side (noop, dp-create, dp-get, dp-delete, dp-list, arq-create,
the unbound boot flow) against both. The limit of a workload is the
floor's p50 per request (for the list, the floor's answer of the list's
size: side_by_side.LIST_FLOOR) plus, measured on the same database with the
driver alone, one durable commit per write, one read by primary key
per read and one read of the listed rows for the list
(``cyborg-bench profile``'s Limits). The reference Cyborg is not
run here (``cyborg-bench side-by-side`` compares with it on SQLite).
"""

import json
import os
import shutil
import tempfile

from cyborg_harness import databases

from cyborg_bench import api
from cyborg_bench import machine
from cyborg_bench import profile
from cyborg_bench import side_by_side

WORKLOADS = ['noop', 'dp-create', 'dp-get', 'dp-delete', 'dp-list',
             'arq-create', 'boot']


# Operations timed per limit.
STORAGE_OPS = {'commit': 300, 'read': 2000, 'list_read': 300}


def _storage(url):
    """p50 ms of one durable commit, one indexed read and one read of
    the rows dp-list lists, as side_by_side.storage_costs() gives them
    on its SQLite file: a few slow operations (a checkpoint, a flush of
    the server's log) moved a mean by as much as the read itself.
    """
    import sqlalchemy as sa
    engine = sa.create_engine(url)
    try:
        limits = profile.Limits(engine, measure=side_by_side.p50_ms)
        return {what + '_ms': getattr(limits, what)(n)
                for what, n in STORAGE_OPS.items()}
    finally:
        engine.dispose()


def one(args, backend, workdir):
    d = os.path.join(workdir, backend)
    os.makedirs(d)
    db = databases.Database(backend, d, prefix='cyborg_perdb')
    servers = []
    try:
        db.migrate()
        config = os.path.join(d, 'cyborg.conf')
        api.write_config(config, db.url, pool_size=5)
        storage = _storage(db.url)
        floor = api.Server(config, d, args.workers, 1, 'sync',
                           app='cyborg.wsgi.floor:application',
                           ready_path='/')
        servers.append(floor)
        extra = ['--requests', str(args.requests), '--time-limit', '30']
        floor_doc = side_by_side.bench(
            'floor-' + backend, 'http://127.0.0.1:%d' % floor.port, d,
            ['noop', side_by_side.LIST_FLOOR], args, extra)
        floor.stop()
        ours = api.Server(config, d, args.workers, 1, 'sync')
        servers.append(ours)
        doc = side_by_side.bench('ours-' + backend,
                                 'http://127.0.0.1:%d' % ours.port, d,
                                 WORKLOADS, args, extra)
        ours.stop()
    finally:
        for server in servers:
            server.stop()
        db.drop()
    floor = side_by_side.floor_figures(floor_doc)
    rows = []
    for r in doc['results']:
        if r.get('concurrency') != 1 or 'not_run' in r:
            continue
        limit = side_by_side.limit_ms(r['workload'], floor, storage)
        rows.append({'db': backend, 'workload': r['workload'],
                     'ops_per_s': r['ops_per_s'], 'p50_ms': r['p50_ms'],
                     'p99_ms': r['p99_ms'], 'errors': r['errors'],
                     'limit_ms': round(limit, 3),
                     'p50_over_limit': round(r['p50_ms'] / limit, 2)})
    return {'floor_p50_ms': floor['p50_ms'],
            'floor_list_p50_ms': floor.get('list_p50_ms'),
            'storage': storage, 'rows': rows}


def run(args):
    workdir = tempfile.mkdtemp(prefix='cyborg-per-db-')
    meta = machine.describe()
    out = {}
    try:
        for backend in args.db.split(','):
            out[backend] = one(args, backend, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    meta['loadavg_end'] = machine.loadavg()
    print('\n| database | workload | op/s | p50 ms | p99 ms | limit p50 ms | '
          'p50 / limit | errors |')
    print('|---|---|---:|---:|---:|---:|---:|---:|')
    for backend, res in out.items():
        for r in res['rows']:
            print('| %s | %s | %s | %s | %s | %s | %.2f× | %d |' % (
                backend, r['workload'], r['ops_per_s'], r['p50_ms'],
                r['p99_ms'], r['limit_ms'], r['p50_over_limit'],
                r['errors']))
    for backend, res in out.items():
        print('\n%s: floor (no-op app, same gunicorn) p50 %s ms, its answer '
              'of the list\'s size %s ms; one durable '
              'commit %s ms, one indexed read %s ms, one read of the %d '
              'rows dp-list lists %s ms (driver alone, p50)'
              % (backend, res['floor_p50_ms'], res['floor_list_p50_ms'],
                 res['storage']['commit_ms'],
                 res['storage']['read_ms'], profile.LIST_ROWS,
                 res['storage']['list_read_ms']))
    print('\nload average %s → %s' % (meta['loadavg_start'][0],
                                      meta['loadavg_end'][0]))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'meta': meta, 'results': out}, f, indent=2)
    return 1 if any(r['errors'] for res in out.values()
                    for r in res['rows']) else 0


def add_arguments(parser):
    parser.add_argument('--db', default='sqlite,mysql,postgresql')
    parser.add_argument('--workers', type=int, default=2,
                        help='gunicorn sync workers (default 2)')
    parser.add_argument('--requests', type=int, default=300)
    parser.add_argument('--bench-timeout', type=float, default=900)
    parser.add_argument('--json', metavar='FILE')
