# SPDX-License-Identifier: Apache-2.0
"""Where a request's time goes inside a uWSGI worker, layer by layer.

    cyborg-bench layers [--workloads dp-get,dp-create,arq-create]
                        [--requests N] [--workers 2]

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
See docs/performance.md ("Where a request's time goes under uWSGI").
"""

import collections
import importlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from cyborg_bench import side_by_side

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
ENV_DIR = 'CYBORG_BENCH_LAYERS_DIR'
# Each worker writes what it has every this many requests.
DUMP_EVERY = 250
DEFAULT_WORKLOADS = 'dp-create,dp-get,arq-create'

_marks = []
_now = time.perf_counter_ns


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
    """

    def __init__(self, app):
        self.app = app
        self.segments = collections.defaultdict(
            lambda: collections.defaultdict(list))
        self.orders = {}
        self.count = 0

    def __call__(self, environ, start_response):
        from cyborg.api import metrics
        del _marks[:]
        started = _now()
        body = self.app(environ, start_response)
        ended = _now()
        kind = '%s %s' % (environ.get('REQUEST_METHOD'),
                          metrics.route(environ.get('PATH_INFO') or '/'))
        segments = self.segments[kind]
        order = []
        previous = ('start', started)
        for name, at in _marks + [('end', ended)]:
            segment = '%s .. %s' % (previous[0], name)
            segments[segment].append(at - previous[1])
            order.append(segment)
            previous = (name, at)
        segments['TOTAL'].append(ended - started)
        self.orders.setdefault(kind, order)
        self.count += 1
        return body

    def medians(self):
        """{kind: [(segment, median µs, count)]}, in a request's order."""
        out = {}
        for kind, segments in self.segments.items():
            names = list(dict.fromkeys(
                s for s in self.orders[kind] if s in segments))
            names += sorted(set(segments) - set(names) - {'TOTAL'})
            out[kind] = [(s, statistics.median(segments[s]) / 1000.0,
                          len(segments[s])) for s in names + ['TOTAL']]
        return out


_TIMED = None


def application(environ, start_response):
    """The API (cyborg.wsgi.api), its layers marked; a worker writes its
    durations to $CYBORG_BENCH_LAYERS_DIR/<pid>.json now and then.
    """
    global _TIMED
    if _TIMED is None:
        install()
        from cyborg.wsgi import api
        _TIMED = Timed(api.application)
    body = _TIMED(environ, start_response)
    if _TIMED.count % DUMP_EVERY == 0 and os.environ.get(ENV_DIR):
        path = os.path.join(os.environ[ENV_DIR], '%d.json' % os.getpid())
        with open(path + '.new', 'w') as f:
            json.dump({'segments': _TIMED.segments,
                       'orders': _TIMED.orders}, f)
        os.replace(path + '.new', path)
    return body


def _merged(directory):
    """Every worker's durations as one Timed's."""
    merged = Timed(None)
    for name in sorted(os.listdir(directory)):
        if not name.endswith('.json'):
            continue
        with open(os.path.join(directory, name)) as f:
            doc = json.load(f)
        for kind, segments in doc['segments'].items():
            for segment, values in segments.items():
                merged.segments[kind][segment].extend(values)
            merged.orders.setdefault(kind, doc['orders'][kind])
    return merged


def table(medians):
    lines = []
    for kind, rows in sorted(medians.items()):
        lines += ['', '### %s' % kind, '',
                  '| segment | median µs | requests |', '|---|---:|---:|']
        lines += ['| %s | %.1f | %d |' % row for row in rows]
    return '\n'.join(lines)


def run(args):
    side_by_side.ensure_ref_venv()
    workdir = tempfile.mkdtemp(prefix='cyborg-layers-')
    marks = os.path.join(workdir, 'marks')
    os.makedirs(marks)
    api = None
    try:
        api, url, db_url = side_by_side.start_ours(
            workdir, args.workers, module='cyborg_bench.layers:application',
            env={ENV_DIR: marks})
        subprocess.run(side_by_side.BENCH + [
            '--url', url, '--workloads', args.workloads, '--requests',
            str(args.requests), '--seed-db', db_url], check=True)
    finally:
        if api is not None:
            api.stop()
    print('\n## Inside the worker (uWSGI, %d workers), median per segment'
          % args.workers)
    print(table(_merged(marks).medians()))
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


def add_arguments(parser):
    parser.add_argument('--workloads', default=DEFAULT_WORKLOADS,
                        help='cyborg-bench load workloads (default %s)'
                        % DEFAULT_WORKLOADS)
    parser.add_argument('--requests', type=int, default=3000,
                        help='operations per workload (default 3000)')
    parser.add_argument('--workers', type=int, default=2,
                        help='uWSGI processes (default 2, as side-by-side)')
