# SPDX-License-Identifier: Apache-2.0
"""Where a request's time goes inside a uWSGI worker, layer by layer.

    cyborg-bench layers [--workloads dp-get,dp-create,arq-create]
                        [--requests N] [--workers 2] [--outside N]
                        [--floor-spin US,...] [--replay N]

In process (``cyborg-bench profile``) a request runs with warm CPU caches;
in a server's worker it does not, and takes two to three times as long.
This serves our API on a SQLite file under the side-by-side's uWSGI (the
same options and workers; uwsgi comes from the reference's virtualenv,
.bench/ref-venv, built by the first side-by-side run) through this
module's WSGI application, which marks the boundaries of the API's layers
with time.perf_counter_ns() in the worker: the entry to and the return
from each function of MARKS. cyborg-bench load's workloads then run
against it at one client, and for each request kind this prints the
median of every segment between two consecutive marks, in the order a
request passes them, and of the whole WSGI call (TOTAL). A mark costs
about a microsecond; medians of segments do not add up to TOTAL exactly.
Each worker answers GET DUMP_PATH (untimed) with what it kept, and the
runner asks until every worker has answered. See docs/performance.md
("Where a request's time goes under uWSGI"). --workloads '' runs none.

--outside N: first, against the floor app under the same uWSGI (once
per --floor-spin value: busy that many µs per request before it
answers, as long as one of ours but without our code) and then against
the API without the marks (as it is served), a client of its own sends
N requests of each kind one after the other (GET /; POST, then GET, of
N profiles) and notes when each left it and when its answer was read
(time.perf_counter_ns, the monotonic clock every process shares); the
worker notes when it called the application and when that returned.
Matched request by request, that is where the time the client sees
goes: before the application is called (the client's encoding and
send, its connect, the kernel, uWSGI's accept and parsing), in it, and
after it (uWSGI's write, the client's read and decoding).

--replay N: every Nth GET each worker serves (while the workloads run) is
called again REPLAYS times in the worker right after it, on a copy of
the environ it came with, and the last of those calls are kept as the
kind "GET (again, warm) ...": the same request with the caches it left,
beside the same request as served.
"""

import bisect
import collections
import importlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from cyborg_bench import client as bench_client
from cyborg_bench import side_by_side
from cyborg_bench import workloads

# (module, attribute path, label): the functions whose entry and return
# are marked.
MARKS = (
    ('cyborg.api.middleware', 'generate_request_id', 'request id'),
    ('cyborg.api.middleware', 'NoAuth.__call__', 'auth'),
    ('cyborg.api.app', '_Pecan.__call__', 'pecan'),
    ('cyborg.api.app', '_Pecan.find_controller', 'find_controller'),
    ('pecan.core', 'PecanBase.invoke_controller', 'invoke_controller'),
    ('cyborg.api.controllers.base', 'authorize', 'policy'),
    ('cyborg.api.controllers.base', 'body', 'request body'),
    ('cyborg.db.api', 'Session.__init__', 'transaction begin'),
    ('cyborg.db.api', '_take', 'pool checkout'),
    ('cyborg.db.api', '_query', 'statement'),
    ('cyborg.db.pooling', 'give_back', 'pool checkin'),
    ('cyborg.db.api', 'Session._end', 'commit'),
    ('cyborg.api.controllers.base', 'Response.answer', 'answer'),
    ('cyborg.api.controllers.base', 'Response.__call__', 'respond'),
    ('cyborg.api.stack', 'Stack._count', 'metrics'),
)
# A worker answers GET of this path (untimed) with what it has kept.
DUMP_PATH = '/cyborg-bench-layers'
DEFAULT_WORKLOADS = 'dp-create,dp-get,arq-create'
# The request kinds of --outside, as Timed names them.
NOOP, CREATE, SHOW = ('GET /', 'POST /v2/device_profiles',
                      'GET /v2/device_profiles/{name_or_uuid}')

_marks = []
_now = time.perf_counter_ns
# --replay: the environ variable that carries N to the workers, how many
# times a GET is called again, and how many of those calls are not kept.
ENV_REPLAY = 'CYBORG_BENCH_REPLAY'
REPLAYS = 20
REPLAYS_WARMING = 5
AGAIN = 'GET (again, warm)'


def _owner(module, path):
    owner = importlib.import_module(module)
    *parents, name = path.split('.')
    for parent in parents:
        owner = getattr(owner, parent)
    return owner, name


def _attribute(owner, name):
    """`owner`'s own attribute `name`, as set (a class's staticmethod or
    classmethod object itself, not what reading it through the class
    gives).
    """
    return owner.__dict__[name] if isinstance(owner, type) else \
        getattr(owner, name)


def install():
    """Wrap the functions of MARKS; returns a function undoing it."""
    undo = []
    for module, path, label in MARKS:
        owner, name = _owner(module, path)
        original = _attribute(owner, name)
        kind = type(original) if isinstance(
            original, (staticmethod, classmethod)) else None
        func = original.__func__ if kind else original

        def marked(*args, _func=func, _label=label, **kwargs):
            _marks.append((_label + '>', _now()))
            try:
                return _func(*args, **kwargs)
            finally:
                _marks.append(('<' + _label, _now()))
        setattr(owner, name, kind(marked) if kind else marked)
        undo.append((owner, name, original))

    def uninstall():
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)
    return uninstall


class Timed:
    """A WSGI app around `app` that keeps, per request kind (method and
    route template), every segment's durations in ns.

    A call only notes its clock readings and marks; they are made into
    segments when asked for (kept()): what runs between the application's
    return and uWSGI's write of the answer is what an unmarked app runs
    there, not this bookkeeping (counted as "after it" by --outside).
    """

    def __init__(self, app):
        self.app = app
        self.segments = collections.defaultdict(
            lambda: collections.defaultdict(list))
        self.orders = {}
        # Per request kind, [called, returned] of every call.
        self.spans = collections.defaultdict(list)
        # (method, path, called, returned, marks) of calls not yet made
        # into segments.
        self._calls = []
        # --replay: every how many GETs one is called again (0: none).
        self.replay = int(os.environ.get(ENV_REPLAY) or 0)
        self._gets = 0

    def __call__(self, environ, start_response):
        again = None
        if self.replay and environ.get('REQUEST_METHOD') == 'GET':
            self._gets += 1
            if self._gets % self.replay == 0:
                # As it came: the app adds to the environ it is given.
                again = dict(environ)
        del _marks[:]
        started = _now()
        body = self.app(environ, start_response)
        ended = _now()
        self._calls.append((environ.get('REQUEST_METHOD'),
                            environ.get('PATH_INFO'), started, ended,
                            _marks[:]))
        if again is not None:
            self._again(again)
        return body

    def _again(self, environ):
        """The GET of `environ` called REPLAYS times more, one after the
        other; the calls after the first REPLAYS_WARMING kept as AGAIN.
        """
        for i in range(REPLAYS):
            del _marks[:]
            started = _now()
            body = self.app(dict(environ), _ignored)
            ended = _now()
            if hasattr(body, 'close'):
                body.close()
            if i >= REPLAYS_WARMING:
                self._calls.append((AGAIN, environ.get('PATH_INFO'),
                                    started, ended, _marks[:]))

    def _digest(self):
        """The calls noted so far, made into segments and spans."""
        from cyborg.api import metrics
        calls, self._calls = self._calls, []
        for method, path, started, ended, marks in calls:
            kind = '%s %s' % (method, metrics.route(path or '/'))
            self.spans[kind].append([started, ended])
            segments = self.segments[kind]
            order = []
            previous = ('start', started)
            for name, at in marks + [('end', ended)]:
                segment = '%s .. %s' % (previous[0], name)
                segments[segment].append(at - previous[1])
                order.append(segment)
                previous = (name, at)
            segments['TOTAL'].append(ended - started)
            self.orders.setdefault(kind, order)

    def kept(self):
        """What the worker answers at DUMP_PATH."""
        self._digest()
        return {'pid': os.getpid(), 'segments': self.segments,
                'orders': self.orders, 'spans': self.spans}

    def merge(self, kept):
        """Add another worker's kept() to this one's."""
        for kind, segments in kept['segments'].items():
            for segment, values in segments.items():
                self.segments[kind][segment].extend(values)
            self.orders.setdefault(kind, kept['orders'][kind])
        for kind, spans in kept['spans'].items():
            self.spans[kind].extend(spans)

    def medians(self):
        """{kind: [(segment, median µs, count)]}, in a request's order."""
        self._digest()
        out = {}
        for kind, segments in self.segments.items():
            names = list(dict.fromkeys(
                s for s in self.orders[kind] if s in segments))
            names += sorted(set(segments) - set(names) - {'TOTAL'})
            out[kind] = [(s, statistics.median(segments[s]) / 1000.0,
                          len(segments[s])) for s in names + ['TOTAL']]
        return out


def _ignored(status, headers, exc_info=None):
    return lambda data: None


def _timed(app):
    """A WSGI application around Timed(app()) (made at the first request,
    in the worker) that answers GET DUMP_PATH, untimed, with its kept().
    """
    timed = []

    def application(environ, start_response):
        if not timed:
            timed.append(Timed(app()))
        if environ.get('PATH_INFO') == DUMP_PATH:
            body = json.dumps(timed[0].kept()).encode()
            start_response('200 OK', [
                ('Content-Type', 'application/json'),
                ('Content-Length', str(len(body)))])
            return [body]
        return timed[0](environ, start_response)
    return application


def _api():
    from cyborg.wsgi import api
    return api.application


def _marked_api():
    install()
    return _api()


# The floor app's busy time per request, in µs (--floor-spin).
ENV_SPIN = 'CYBORG_BENCH_FLOOR_SPIN_US'


def _floor():
    """The floor app; with $CYBORG_BENCH_FLOOR_SPIN_US set, it first keeps
    the CPU busy that long (touching nothing): a request as long as one
    of ours, without our code.
    """
    from cyborg.wsgi import floor
    spin = int(os.environ.get(ENV_SPIN) or 0) * 1000
    if not spin:
        return floor.application

    def spinning(environ, start_response):
        until = _now() + spin
        while _now() < until:
            pass
        return floor.application(environ, start_response)
    return spinning


# What uWSGI serves: the API (cyborg.wsgi.api) with its layers marked,
# for the segments; the API unmarked, for --outside (a mark costs about
# a microsecond, some 30 a request); the floor app (cyborg.wsgi.floor).
application = _timed(_marked_api)
plain_application = _timed(_api)
floor_application = _timed(_floor)


def collect(url, workers, tries=100):
    """Every worker's kept(), merged: DUMP_PATH asked until `workers`
    different processes answered (uWSGI hands requests to its workers in
    turn).
    """
    merged = Timed(None)
    cl = bench_client.Endpoint(url).client()
    seen = set()
    try:
        for _ in range(tries):
            kept = cl.call('GET', DUMP_PATH)
            if kept['pid'] not in seen:
                seen.add(kept['pid'])
                merged.merge(kept)
            if len(seen) >= workers:
                return merged
    finally:
        cl.close()
    raise RuntimeError('only %d of %d workers answered %s'
                       % (len(seen), workers, DUMP_PATH))


def table(medians):
    lines = []
    for kind, rows in sorted(medians.items()):
        lines += ['', '### %s' % kind, '',
                  '| segment | median µs | requests |', '|---|---:|---:|']
        lines += ['| %s | %.1f | %d |' % row for row in rows]
    return '\n'.join(lines)


def outside(url, count, api=True):
    """{request kind: [(sent, read)]}: `count` requests of each --outside
    kind (only GET / where not `api`: the floor app), one after the
    other, each from just before it is sent to just after its answer is
    read.
    """
    cl = bench_client.Endpoint(url).client()
    noted = collections.defaultdict(list)

    def note(kind, *request, **expect):
        sent = _now()
        answer = cl.call(*request, **expect)
        noted[kind].append((sent, _now()))
        return answer
    try:
        for _ in range(count):
            note(NOOP, 'GET', '/')
        if not api:
            return noted
        made = [note(CREATE, 'POST', '/v2/device_profiles', [{
            'name': 'outside-%d-%d' % (os.getpid(), i),
            'groups': workloads.GPU_GROUPS}], expect=201)['uuid']
            for i in range(count)]
        for uuid in made:
            note(SHOW, 'GET', '/v2/device_profiles/%s' % uuid)
    finally:
        cl.close()
    return noted


def matched(noted, spans):
    """Per request kind, the medians in µs of (before the application
    was called, in it, after it returned, the whole) over the requests
    of `noted` whose span the workers kept (each client request holds
    the one worker call that answered it).
    """
    out = {}
    for kind, requests in noted.items():
        calls = sorted(spans.get(kind, ()))
        starts = [c[0] for c in calls]
        parts = []
        for sent, read in requests:
            i = bisect.bisect_left(starts, sent)
            if i < len(calls) and calls[i][1] <= read:
                called, returned = calls[i]
                parts.append((called - sent, returned - called,
                              read - returned, read - sent))
        if parts:
            out[kind] = tuple(statistics.median(p) / 1000.0
                              for p in zip(*parts)) + (len(parts),)
    return out


def outside_table(rows):
    lines = ['| app | request | before the app µs | in the app µs | '
             'after it µs | client sees µs | requests |',
             '|---|---|---:|---:|---:|---:|---:|']
    for app, figures in rows:
        for kind, (before, inside, after, whole, n) in figures.items():
            lines.append('| %s | %s | %.1f | %.1f | %.1f | %.1f | %d |'
                         % (app, kind, before, inside, after, whole, n))
    return '\n'.join(lines)


def _outside_figures(url, args, api=True):
    """--outside against the server at `url`: its requests sent, matched
    with the spans its workers noted.
    """
    noted = outside(url, args.outside, api=api)
    return matched(noted, collect(url, args.workers).spans)


def run(args):
    side_by_side.ensure_ref_venv()
    workdir = tempfile.mkdtemp(prefix='cyborg-layers-')
    procs = []
    rows = []
    try:
        for spin in (args.floor_spin if args.outside else ()):
            floor, url = side_by_side.uwsgi(
                'floor-uwsgi', workdir, side_by_side.OUR_VENV,
                'cyborg_bench.layers:floor_application', args.workers,
                env={ENV_SPIN: str(spin)})
            procs.append(floor)
            rows.append(('floor' + (' spinning %d µs' % spin if spin else ''),
                         _outside_figures(url, args, api=False)))
            floor.stop()
        if args.outside:
            served = os.path.join(workdir, 'unmarked')
            os.makedirs(served)
            api, url, _ = side_by_side.start_ours(
                served, args.workers,
                module='cyborg_bench.layers:plain_application')
            procs.append(api)
            rows.append(('ours', _outside_figures(url, args)))
            api.stop()
        api, url, db_url = side_by_side.start_ours(
            workdir, args.workers, module='cyborg_bench.layers:application',
            env={ENV_REPLAY: str(args.replay)} if args.replay else None)
        procs.append(api)
        if args.workloads:
            subprocess.run(side_by_side.BENCH + [
                '--url', url, '--workloads', args.workloads, '--requests',
                str(args.requests), '--seed-db', db_url], check=True)
        kept = collect(url, args.workers)
    finally:
        for proc in procs:
            proc.stop()
    print('\n## Inside the worker (uWSGI, %d workers), median per segment'
          % args.workers)
    print(table(kept.medians()))
    if rows:
        print('\n## Before, in and after the application (one client, '
              'uWSGI, %d workers), medians' % args.workers)
        print(outside_table(rows))
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _spins(text):
    return [int(v) for v in text.split(',')]


def add_arguments(parser):
    parser.add_argument('--workloads', default=DEFAULT_WORKLOADS,
                        help='cyborg-bench load workloads (default %s)'
                        % DEFAULT_WORKLOADS)
    parser.add_argument('--requests', type=int, default=3000,
                        help='operations per workload (default 3000)')
    parser.add_argument('--workers', type=int, default=2,
                        help='uWSGI processes (default 2, as side-by-side)')
    parser.add_argument('--outside', type=int, default=0, metavar='N',
                        help='then N requests of each kind from a client '
                        'of its own, timed before, in and after the '
                        'application, and the same of GET / on the floor '
                        'app first (default 0: not)')
    parser.add_argument('--replay', type=int, default=0, metavar='N',
                        help='every Nth GET a worker serves is called again '
                        '%d times right after it, in the worker, and the '
                        'last %d are shown as "%s" (default 0: none)'
                        % (REPLAYS, REPLAYS - REPLAYS_WARMING, AGAIN))
    parser.add_argument('--floor-spin', type=_spins, default=[0],
                        metavar='US,...',
                        help='with --outside: the floor app once per value, '
                        'busy that many µs per request first (default 0)')
