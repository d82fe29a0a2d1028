# SPDX-License-Identifier: Apache-2.0
"""Load generator: the workloads against any Cyborg v2 endpoint.

It drives the same workloads against our API, the reference Cyborg or
anything else that speaks the v2 API, prints a table and optionally
writes JSON, so figures can be compared side by side
(``cyborg-bench side-by-side``).

    cyborg-bench load --url http://127.0.0.1:6666 --json out.json
    cyborg-bench load --url http://ref:6666 --workloads lookup \
        --seed-db sqlite:////tmp/ref.sqlite --sizes 1000,10000
    cyborg-bench load --url http://127.0.0.1:6666 --workloads boot,bind \
        --receiver-port 8774 --concurrency 1,4,16,64

Workloads run in the order given. ``lookup`` and ``arq-list`` need
``--seed-db`` (the service's own database URL: rows are cloned straight
into it). ``bind``, and binding in ``boot``, need ``--receiver-port``: the
bench then hosts Nova's events API there, and the service's [nova] must
point at it. A workload that cannot run is reported as not run, with why.
The exit status is 1 when any request got a wrong answer.
"""

import json
import sys
import time

from cyborg_harness import nova

from cyborg_bench import client
from cyborg_bench import machine
from cyborg_bench import workloads

ALL = ('noop', 'dp-create', 'dp-get', 'dp-delete', 'dp-list', 'arq-create',
       'lookup', 'arq-list', 'boot', 'bind')


def _ints(text):
    return [int(x) for x in text.split(',') if x]


def add_arguments(p):
    p.epilog = 'Workloads: %s.' % ', '.join(ALL)
    p.add_argument('--url', required=True,
                   help='API root, e.g. http://127.0.0.1:6666 or '
                        'http://host/accelerator (a trailing /v2 is fine)')
    p.add_argument('--auth', choices=('none', 'token'), default='none',
                   help='none: no identity headers (a noauth service); '
                        'token: send X-Auth-Token (--token)')
    p.add_argument('--token', help='the X-Auth-Token value for --auth token')
    p.add_argument('--header', action='append', default=[],
                   metavar='NAME:VALUE', help='extra header on every request')
    p.add_argument('--workloads', default=','.join(ALL[1:-1]),
                   help='comma-separated, run in this order (default: '
                        '%(default)s)')
    p.add_argument('--concurrency', type=_ints, default=[1],
                   help='client threads, comma-separated levels '
                        '(default 1)')
    p.add_argument('--requests', type=int, default=200,
                   help='operations per measurement (default %(default)s)')
    p.add_argument('--warmup', type=int, default=10,
                   help='unmeasured operations first (default %(default)s)')
    p.add_argument('--time-limit', type=float, default=30.0,
                   help='seconds after which a measurement starts no more '
                        'operations (default %(default)s)')
    p.add_argument('--request-timeout', type=float, default=120.0,
                   help='socket timeout per request (default %(default)s)')
    p.add_argument('--sizes', type=_ints, default=[1000, 10000, 100000],
                   help='ARQ table sizes for lookup/arq-list '
                        '(default 1000,10000,100000)')
    p.add_argument('--dp-list-rows', type=int, default=200,
                   help='profiles in the table for dp-list (default 200)')
    p.add_argument('--groups', type=json.loads,
                   default=workloads.GPU_GROUPS,
                   help='device profile groups as JSON (default: one GPU)')
    p.add_argument('--seed-db', metavar='SQLALCHEMY_URL',
                   help="the service's database, for lookup/arq-list")
    p.add_argument('--receiver-port', type=int,
                   help='host the Nova events receiver on this port and '
                        'bind ARQs in boot/bind')
    p.add_argument('--event-timeout', type=float, default=30.0)
    p.add_argument('--no-bind-reason',
                   help='why bind cannot run here (reported as not run)')
    p.add_argument('--label', help='a name for this endpoint in the output')
    p.add_argument('--json', metavar='FILE', help='write the results here')
    p.add_argument('--quiet', action='store_true')


def _headers(args):
    headers = {}
    if args.auth == 'token':
        if not args.token:
            raise SystemExit('--auth token needs --token')
        headers['X-Auth-Token'] = args.token
    for item in args.header:
        name, sep, value = item.partition(':')
        if not sep:
            raise SystemExit('--header wants NAME:VALUE, got %r' % item)
        headers[name.strip()] = value.strip()
    return headers


def measure(args, log):
    """(meta, results) of every selected workload."""
    names = [n for n in args.workloads.split(',') if n]
    unknown = set(names) - set(ALL)
    if unknown:
        raise SystemExit('unknown workload(s): %s' % ', '.join(unknown))
    endpoint = client.Endpoint(args.url, _headers(args),
                               args.request_timeout)
    seeder = receiver = None
    if args.seed_db:
        from cyborg_bench import seed  # SQLAlchemy only when seeding
        seeder = seed.Seeder(args.seed_db)
    if args.receiver_port is not None:
        receiver = nova.NovaEvents(port=args.receiver_port)
    ctx = workloads.Context(endpoint, args, seeder, receiver, log)
    meta = dict(
        machine.describe(), label=args.label, url=args.url)
    meta.update({
        'concurrency': args.concurrency, 'requests': args.requests,
        'time_limit_s': args.time_limit, 'sizes': args.sizes,
    })
    results = []
    started = time.perf_counter()
    try:
        done_tables = False
        for name in names:
            try:
                if name in ('lookup', 'arq-list'):
                    if done_tables:
                        continue
                    done_tables = True
                    results += workloads.lookup_and_list(ctx, names)
                elif name in ('boot', 'bind'):
                    results += workloads.boot(ctx, bind_only=name == 'bind')
                else:
                    results += getattr(workloads, name.replace('-', '_'))(
                        ctx)
            except workloads.NotRun as e:
                log('%s: not run (%s)' % (name, e))
                results.append({'workload': name, 'not_run': str(e)})
    finally:
        if ctx._admin is not None:
            ctx._admin.close()
        if receiver is not None:
            receiver.stop()
        if seeder is not None:
            seeder.close()
    meta['seconds'] = round(time.perf_counter() - started, 1)
    meta['loadavg_end'] = machine.loadavg()
    return meta, results


def table(results):
    lines = ['| workload | rows | c | ok | errors | op/s | p50 ms | p90 ms '
             '| p99 ms | note |', '|---|---:|---:|---:|---:|---:|---:|---:'
             '|---:|---|']
    for r in results:
        if 'not_run' in r:
            lines.append('| %s | | | | | | | | | not run: %s |'
                         % (r['workload'], r['not_run']))
            continue
        note = []
        for part in ('patch', 'event'):
            if part in r:
                note.append('%s p50 %s p99 %s' % (
                    part, r[part].get('p50_ms'), r[part].get('p99_ms')))
        if r['time_capped']:
            note.append('time-capped at %d of %d' % (r['ok'] + r['errors'],
                                                     r['planned']))
        lines.append('| %s | %s | %d | %d | %d | %.1f | %s | %s | %s | %s |'
                     % (r['workload'], r.get('rows', ''), r['concurrency'],
                        r['ok'], r['errors'], r['ops_per_s'],
                        r.get('p50_ms', '-'), r.get('p90_ms', '-'),
                        r.get('p99_ms', '-'), '; '.join(note)))
    return '\n'.join(lines)


def run(args):
    def log(msg):
        if not args.quiet:
            print('[cyborg-bench %s] %s' % (time.strftime('%H:%M:%S'), msg),
                  file=sys.stderr, flush=True)

    meta, results = measure(args, log)
    print(table(results))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'meta': meta, 'results': results}, f, indent=2)
    return 1 if any(r.get('errors') for r in results) else 0
