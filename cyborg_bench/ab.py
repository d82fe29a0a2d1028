# SPDX-License-Identifier: Apache-2.0
"""Two trees of this project's API, one client alternating between them.

    cyborg-bench ab [--base REV] [--requests N] [--warmup N]
                    [--workloads noop,dp-create,dp-get,dp-delete,arq-create]
                    [--workers 2] [--json FILE]

A change that saves a few per cent of a request is smaller than what this
kind of machine drifts by between two runs a minute apart, so runs before
and after it cannot be compared. Here both trees are served at once, each
under the side-by-side's uWSGI (the same options and workers) on a SQLite
file of its own: the commit REV (default HEAD), checked out with `git
worktree` into a temporary directory whose `cyborg` package the first
server imports instead of the installed one, and this checkout as it is
(uncommitted changes included). One client sends each request to both,
in turns (base then this one, then this one then base), so that whatever
the machine does meanwhile falls on both. Per workload it prints the
median and p90 latency of each in µs, their change, and the median of
the per-pair differences (this tree's request minus the base's request
of the same turn). The same tree on both sides (`--base HEAD` on a clean
checkout) shows the noise of a run: on a 2-vCPU VM, within ±1 µs on
dp-get at the default 2,000 requests, but -7 to +37 µs at 300.

Both sides run on this virtualenv's libraries: REV must need no other
version of them. The workloads are cyborg-bench load's requests (the same
bodies); dp-get and dp-delete use profiles made before the timing, not
dp-create's. The worktree is removed at the end. See docs/performance.md.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from cyborg_bench import client as bench_client
from cyborg_bench import machine
from cyborg_bench import side_by_side
from cyborg_bench import workloads

KINDS = ('noop', 'dp-create', 'dp-get', 'dp-delete', 'arq-create')
DEFAULT_WORKLOADS = 'dp-create,dp-get,arq-create'


def log(msg):
    print('[cyborg-bench ab %s] %s' % (time.strftime('%H:%M:%S'), msg),
          file=sys.stderr, flush=True)


class Side:
    """One served tree and what its requests need."""

    def __init__(self, name, url):
        self.name = name
        self.client = bench_client.Endpoint(url).client()
        self.serial = 0
        self.profiles = []
        self.arq_profile = None

    def new_profile(self):
        """The answer to a new profile's POST (its uuid, name, ...)."""
        self.serial += 1
        return self.client.call('POST', '/v2/device_profiles', [{
            'name': 'ab-%s-%d' % (self.name, self.serial),
            'groups': workloads.GPU_GROUPS}], expect=201)

    def prepare(self, kind, count):
        """Made before the timing: what `count` requests of `kind` use."""
        if kind in ('dp-get', 'dp-delete'):
            self.profiles = [self.new_profile()['uuid']
                             for _ in range(count)]
        elif kind == 'arq-create' and self.arq_profile is None:
            self.arq_profile = self.new_profile()['name']

    def request(self, kind, i):
        """Request `i` of `kind` (its answer checked)."""
        cl = self.client
        if kind == 'noop':
            cl.call('GET', '/')
        elif kind == 'dp-create':
            self.new_profile()
        elif kind == 'dp-get':
            cl.call('GET', '/v2/device_profiles/%s' % self.profiles[i])
        elif kind == 'dp-delete':
            cl.call('DELETE', '/v2/device_profiles/%s' % self.profiles[i],
                    expect=204)
        else:
            cl.call('POST', '/v2/accelerator_requests',
                    {'device_profile_name': self.arq_profile}, expect=201)


def alternate(sides, kind, requests, warmup):
    """{side name: [ns per request]}: each request sent to every side,
    the order reversed every other turn; the first `warmup` turns are
    not kept.
    """
    for side in sides:
        side.prepare(kind, requests + warmup)
    kept = {side.name: [] for side in sides}
    now = time.perf_counter_ns
    for i in range(requests + warmup):
        for side in (sides if i % 2 == 0 else sides[::-1]):
            started = now()
            side.request(kind, i)
            if i >= warmup:
                kept[side.name].append(now() - started)
    return kept


def figures(kept, base='base', new='this'):
    """Medians, p90s (µs), the change of the median (%), and the median
    of the paired differences (µs).
    """
    def p90(values):
        return sorted(values)[int(0.9 * (len(values) - 1))] / 1000.0
    a, b = kept[base], kept[new]
    median_a = statistics.median(a) / 1000.0
    median_b = statistics.median(b) / 1000.0
    return {'base_p50_us': median_a, 'base_p90_us': p90(a),
            'this_p50_us': median_b, 'this_p90_us': p90(b),
            'change_pct': (median_b - median_a) / median_a * 100.0,
            'paired_us': statistics.median(
                (y - x) / 1000.0 for x, y in zip(a, b)),
            'requests': len(a)}


def table(rows):
    lines = ['| workload | base p50 µs | this p50 µs | change | '
             'paired diff µs | base p90 µs | this p90 µs | requests |',
             '|---|---:|---:|---:|---:|---:|---:|---:|']
    for kind, f in rows.items():
        lines.append('| %s | %.1f | %.1f | %+.1f%% | %+.1f | %.1f | %.1f '
                     '| %d |' % (kind, f['base_p50_us'], f['this_p50_us'],
                                 f['change_pct'], f['paired_us'],
                                 f['base_p90_us'], f['this_p90_us'],
                                 f['requests']))
    return '\n'.join(lines)


def _git(*args, **kwargs):
    return subprocess.run(['git', '-C', machine.REPO] + list(args),
                          check=True, capture_output=True, text=True,
                          **kwargs).stdout.strip()


def served_from(pythonpath):
    """Where this virtualenv's Python imports `cyborg` from with
    `pythonpath` first, as the base's uWSGI does.
    """
    return subprocess.run(
        [sys.executable, '-c', 'import cyborg; print(cyborg.__file__)'],
        check=True, capture_output=True, text=True, cwd='/',
        env=dict(os.environ, PYTHONPATH=pythonpath)).stdout.strip()


def run(args):
    kinds = workloads.chosen(args.workloads, KINDS)
    try:
        commit = _git('rev-parse', '--verify', args.base + '^{commit}')
    except subprocess.CalledProcessError as e:
        raise SystemExit('--base %s: not a commit of %s (%s)'
                         % (args.base, machine.REPO, e.stderr.strip()))
    side_by_side.ensure_ref_venv()      # uwsgi comes from there
    meta = machine.describe()
    workdir = tempfile.mkdtemp(prefix='cyborg-bench-ab-')
    tree = os.path.join(workdir, 'base-tree')
    procs = []
    try:
        _git('worktree', 'add', '--detach', tree, commit)
        where = served_from(tree)
        if not where.startswith(tree + os.sep):
            raise SystemExit('the base tree is not what would be served '
                             '(cyborg from %s)' % where)
        log('base %s (%s) against this checkout'
            % (commit[:12], args.base))
        sides = []
        for name, pythonpath in (('base', tree), ('this', None)):
            d = os.path.join(workdir, name)
            os.makedirs(d)
            proc, url, _ = side_by_side.start_ours(
                d, args.workers, pythonpath=pythonpath)
            procs.append(proc)
            sides.append(Side(name, url))
        rows = {}
        for kind in kinds:
            rows[kind] = figures(alternate(sides, kind, args.requests,
                                           args.warmup))
            log('%s done' % kind)
        meta['loadavg_end'] = machine.loadavg()
        print('\n## %s (base, %s) against this checkout, one client '
              'alternating\n' % (commit[:12], args.base))
        print(table(rows))
        print('\nload average %s → %s' % (meta['loadavg_start'][0],
                                          meta['loadavg_end'][0]))
        if args.json:
            with open(args.json, 'w') as f:
                json.dump({'meta': meta, 'base': commit,
                           'workers': args.workers, 'rows': rows}, f,
                          indent=1)
    finally:
        for proc in procs:
            proc.stop()
        try:
            _git('worktree', 'remove', '--force', tree)
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def add_arguments(parser):
    parser.add_argument('--base', default='HEAD', metavar='REV',
                        help='the commit compared with this checkout '
                             '(default HEAD)')
    parser.add_argument('--requests', type=int, default=2000,
                        help='timed requests per workload and side (2000)')
    parser.add_argument('--warmup', type=int, default=200,
                        help='untimed turns first (200)')
    parser.add_argument('--workloads', default=DEFAULT_WORKLOADS,
                        help='comma-separated, of %s (default %s)'
                             % (', '.join(KINDS), DEFAULT_WORKLOADS))
    parser.add_argument('--workers', type=int, default=2,
                        help='uWSGI workers per side (2, as side-by-side)')
    parser.add_argument('--json', metavar='FILE')
