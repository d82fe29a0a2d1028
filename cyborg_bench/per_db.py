# SPDX-License-Identifier: Apache-2.0
"""The side-by-side workloads against our API under gunicorn on SQLite,
MariaDB and PostgreSQL, each beside its limit.

    cyborg-bench per-db [--db sqlite,mysql,postgresql] [--rounds N]
                        [--requests N] [--no-reference]

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
(``cyborg-bench profile``'s Limits).

The reference (``openstack-cyborg`` of side-by-side, in its virtualenv
with the same gunicorn and database drivers as ours) runs the same
workloads on a database of its own on the same server, migrated by its
``cyborg-dbsync upgrade`` (on PostgreSQL, where that fails, by its
models' create_schema with its one unnamed Enum type named:
side_by_side.NAMED_ENUM_SCHEMA), under the same gunicorn, with its
conductor on the local RabbitMQ (a profile's create is a call to it);
``--no-reference`` leaves it out.

The floor app, ours and the reference are all up at once; ``--rounds N``
measures them N times with --requests/N operations per workload, the
floor and the storage costs just before each round, ours and the
reference alternating which goes first, and reports the medians with
each round's ratios beside them (cyborg_bench.rounds), as side-by-side
--rounds does: the reference's own figures on MariaDB moved by 2× between
two runs minutes apart.
"""

import contextlib
import json
import os
import shutil
import tempfile

from cyborg_harness import databases

from cyborg_bench import api
from cyborg_bench import machine
from cyborg_bench import profile
from cyborg_bench import rounds
from cyborg_bench import side_by_side

# The reference's WSGI entry point reads its options from sys.argv, which
# under gunicorn are gunicorn's: this module, written beside its
# configuration, gives it its own first.
REF_APP = '''"""The reference's app for gunicorn (cyborg-bench per-db only)."""
import sys

sys.argv = ['cyborg-api', '--config-file', %r]

from cyborg.wsgi.api import application  # noqa: E402,F401
'''

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


def one(args, backend, workdir, started):
    """The results on `backend`: the floor app, ours and (unless
    --no-reference, or it cannot run there) the reference all up at once
    under the same gunicorn, then --rounds rounds of --requests/rounds
    operations per workload, each with the floor and the storage costs
    measured just before it and ours and the reference alternating which
    goes first; the rows are the rounds' medians (each round's figures
    kept in the row's 'rounds').
    """
    d = os.path.join(workdir, backend)
    os.makedirs(d)
    n = args.rounds
    extra = ['--requests', str(max(1, args.requests // n)),
             '--time-limit', '30']
    ref_not_run, ref_schema = None, None
    with contextlib.ExitStack() as stack:
        db = databases.Database(backend, d, prefix='cyborg_perdb')
        stack.callback(db.drop)
        db.migrate()
        config = os.path.join(d, 'cyborg.conf')
        api.write_config(config, db.url, pool_size=5)
        floor = api.Server(config, d, args.workers, 1, 'sync',
                           app='cyborg.wsgi.floor:application',
                           ready_path='/')
        stack.callback(floor.stop)
        ours = api.Server(config, d, args.workers, 1, 'sync')
        stack.callback(ours.stop)
        sides = {'ours': 'http://127.0.0.1:%d' % ours.port}
        if args.reference:
            try:
                ref_schema, sides['reference'] = _reference(
                    stack, args, backend, d, started)
            except side_by_side.ReferenceUnavailable as e:
                ref_not_run = str(e)
                side_by_side.log('the reference on %s: not run (%s)'
                                 % (backend, e))
        each = []
        for i in range(1, n + 1):
            # Odd rounds ours first, even ones the reference, as
            # side-by-side --rounds alternates.
            order = sorted(sides, reverse=not i % 2)
            side_by_side.log('%s: round %d of %d: %s' % (
                backend, i, n, ' then '.join(order)))
            storage = _storage(db.url)
            floor_doc = side_by_side.bench(
                'floor-%s-r%d' % (backend, i),
                'http://127.0.0.1:%d' % floor.port, d,
                ['noop', side_by_side.LIST_FLOOR], args, extra)
            docs = {side: side_by_side.bench(
                '%s-%s-r%d' % (side, backend, i), sides[side], d,
                WORKLOADS, args, extra) for side in order}
            figures = side_by_side.floor_figures(floor_doc)
            ref = docs.get('reference')
            each.append({
                'first': order[0], 'floor_p50_ms': figures['p50_ms'],
                'floor_list_p50_ms': figures.get('list_p50_ms'),
                'storage': storage,
                'rows': rows_of(backend, docs['ours'], figures, storage,
                                ref and _one_client(ref))})
    return dict(summary(each), reference_not_run=ref_not_run,
                reference_schema=ref_schema)


def summary(each):
    """One database's results from its rounds (`each`: per round, which
    side went first, the floor's p50s, the storage costs and the rows):
    the rows' medians (with each round's figures in 'rounds' when there
    was more than one), the floor's and storage costs' medians, and each
    round without its rows.
    """
    rows = rounds.merge([rnd['rows'] for rnd in each],
                        [[rnd['first']] for rnd in each],
                        median=MEDIAN, summed=SUMMED, kept=PER_ROUND)
    if len(each) == 1:
        for row in rows:
            del row['rounds']
    middle = _rounded(rounds.median_of(
        each, ('floor_p50_ms', 'floor_list_p50_ms')))
    return {'floor_p50_ms': middle.get('floor_p50_ms'),
            'floor_list_p50_ms': middle.get('floor_list_p50_ms'),
            'storage': _rounded(rounds.median_of(
                [rnd['storage'] for rnd in each], tuple(each[0]['storage']))),
            'rows': rows,
            'rounds': [{k: v for k, v in rnd.items() if k != 'rows'}
                       for rnd in each]}


def _rounded(figures):
    """ms figures as printed: to 0.1 µs."""
    return {k: round(v, 4) for k, v in figures.items()}


# The figures of a row that are medians over the rounds, and how each is
# rounded; those summed; those each round keeps.
MEDIAN = {
    'ops_per_s': rounds.significant(5), 'p50_ms': rounds.places(3),
    'p99_ms': rounds.places(3), 'limit_ms': rounds.places(3),
    'p50_over_limit': rounds.places(2),
    'ref_ops_per_s': rounds.significant(5), 'ref_p50_ms': rounds.places(3),
    'ratio': rounds.places(2), 'ratio_p50': rounds.places(2),
    'ratio_p50_at_limit': rounds.places(2),
}
SUMMED = ('errors', 'ref_errors')
PER_ROUND = ('ratio', 'ratio_p50', 'ratio_p50_at_limit', 'p50_over_limit',
             'ops_per_s', 'p50_ms', 'ref_ops_per_s', 'ref_p50_ms')


def _one_client(doc):
    """A cyborg-bench load document's one-client results by workload."""
    return {r['workload']: r for r in doc['results']
            if r.get('concurrency') == 1 and 'not_run' not in r}


def rows_of(backend, doc, floor, storage, ref=None):
    """The table's rows of our one-client results in `doc`, each with its
    limit (from the floor's figures and the storage costs) and, where
    `ref` (the reference's results by workload) has the workload, the
    ratios: by op/s, by p50, and by p50 for a server at the limit.
    """
    rows = []
    for r in doc['results']:
        if r.get('concurrency') != 1 or 'not_run' in r:
            continue
        limit = side_by_side.limit_ms(r['workload'], floor, storage)
        row = {'db': backend, 'workload': r['workload'],
               'ops_per_s': r['ops_per_s'], 'p50_ms': r['p50_ms'],
               'p99_ms': r['p99_ms'], 'errors': r['errors'],
               'limit_ms': round(limit, 3),
               'p50_over_limit': round(r['p50_ms'] / limit, 2)}
        theirs = ref and ref.get(r['workload'])
        if theirs:
            row.update(
                ref_ops_per_s=theirs['ops_per_s'],
                ref_p50_ms=theirs['p50_ms'], ref_errors=theirs['errors'],
                ratio=round(r['ops_per_s'] / theirs['ops_per_s'], 2),
                ratio_p50=round(theirs['p50_ms'] / r['p50_ms'], 2),
                ratio_p50_at_limit=round(theirs['p50_ms'] / limit, 2))
        rows.append(row)
    return rows


def _reference(stack, args, backend, workdir, started):
    """The reference serving on `backend` (a database of its own, its
    conductor beside it), stopped and dropped when `stack` closes: (how
    its schema was made, its URL). ReferenceUnavailable when it cannot
    run there.
    """
    d = os.path.join(workdir, 'ref')
    os.makedirs(d)
    db = databases.Database(backend, d, prefix='cyborg_perdb_ref')
    stack.callback(db.drop)
    conf, schema = side_by_side.configure_reference(
        d, db.url, started.stub, started.rabbit_url())
    with open(os.path.join(d, 'bench_reference_app.py'), 'w') as f:
        f.write(REF_APP % conf)
    conductor = side_by_side.reference_conductor(d, conf)
    stack.callback(conductor.stop)
    server = api.Server(
        conf, d, args.workers, 1, 'sync',
        app='bench_reference_app:application', ready_path='/',
        python=os.path.join(side_by_side.REF_VENV, 'bin', 'python'),
        timeout=120.0)
    stack.callback(server.stop)
    url = 'http://127.0.0.1:%d' % server.port
    side_by_side.wait_conductor(url, conductor)
    return schema, url


def run(args):
    workdir = tempfile.mkdtemp(prefix='cyborg-per-db-')
    meta = machine.describe()
    if args.reference:
        meta['reference'] = side_by_side.REF_PACKAGE
        side_by_side.ensure_ref_venv()
    out = {}
    try:
        with side_by_side.Started() as started:
            for backend in args.db.split(','):
                out[backend] = one(args, backend, workdir, started)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    meta['loadavg_end'] = machine.loadavg()
    print('\n| database | workload | op/s | p50 ms | p99 ms | limit p50 ms | '
          'p50 / limit | errors | reference op/s | reference p50 ms | '
          'ratio (op/s) | ratio (p50) | ratio (p50) at the limit |')
    print('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for backend, res in out.items():
        for r in res['rows']:
            print('| %s | %s | %s | %s | %s | %s | %.2f× | %d | %s |' % (
                backend, r['workload'], r['ops_per_s'], r['p50_ms'],
                r['p99_ms'], r['limit_ms'], r['p50_over_limit'],
                r['errors'], ' | '.join(_reference_cells(r, res))))
    if args.rounds > 1:
        print('\nEach round (ratio by op/s; ours p50 / limit):\n')
        print(round_table(out))
    for backend, res in out.items():
        print('\n%s: floor (no-op app, same gunicorn) p50 %s ms, its answer '
              'of the list\'s size %s ms; one durable '
              'commit %s ms, one indexed read %s ms, one read of the %d '
              'rows dp-list lists %s ms (driver alone, p50%s)'
              % (backend, res['floor_p50_ms'], res['floor_list_p50_ms'],
                 res['storage']['commit_ms'], res['storage']['read_ms'],
                 profile.LIST_ROWS, res['storage']['list_read_ms'],
                 '; medians of %d rounds' % args.rounds
                 if args.rounds > 1 else ''))
        if res.get('reference_schema'):
            print('%s: the reference\'s schema: %s'
                  % (backend, res['reference_schema']))
        if res.get('reference_not_run'):
            print('%s: the reference not run: %s'
                  % (backend, res['reference_not_run']))
    print('\nload average %s → %s' % (meta['loadavg_start'][0],
                                      meta['loadavg_end'][0]))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'meta': meta, 'results': out}, f, indent=2)
    return 1 if any(r['errors'] or r.get('ref_errors')
                    for res in out.values() for r in res['rows']) else 0


def round_table(out):
    """Each round's ratio (op/s) and ours p50 / limit per database and
    workload, in Markdown ('–' where the reference did not run).
    """
    n = max(len(res['rounds']) for res in out.values())
    lines = ['| database | workload | ratio (op/s), round 1…%d | '
             'ours p50 / limit |' % n, '|---|---|---|---|']
    for backend, res in out.items():
        for r in res['rows']:
            per = r.get('rounds', [])
            ratio = ', '.join('%s×' % one['ratio'] for one in per
                              if 'ratio' in one)
            limit = ', '.join('%.2f×' % one['p50_over_limit'] for one in per)
            lines.append('| %s | %s | %s | %s |' % (
                backend, r['workload'], ratio or '–', limit))
    return '\n'.join(lines)


def _reference_cells(row, res):
    """The reference's cells of a row: its op/s and p50, the ratios."""
    if 'ratio' not in row:
        why = res.get('reference_not_run')
        return ['not run' if why else '', '', '', '', '']
    return [str(row['ref_ops_per_s']), str(row['ref_p50_ms']),
            '%s×' % row['ratio'], '%s×' % row['ratio_p50'],
            '%s×' % row['ratio_p50_at_limit']]


def add_arguments(parser):
    parser.add_argument('--db', default='sqlite,mysql,postgresql')
    parser.add_argument('--workers', type=int, default=2,
                        help='gunicorn sync workers (default 2)')
    parser.add_argument('--requests', type=int, default=300,
                        help='operations per workload and side, over all '
                             'rounds (default 300)')
    parser.add_argument('--rounds', type=side_by_side.positive, default=1,
                        help='rounds per database, all servers up at '
                             'once, ours and the reference alternating '
                             'which goes first; the table gives the '
                             'medians (default 1)')
    parser.add_argument('--bench-timeout', type=float, default=900)
    parser.add_argument('--json', metavar='FILE')
    parser.add_argument('--no-reference', dest='reference',
                        action='store_false',
                        help='leave the reference out (ours and the limits '
                             'only)')
