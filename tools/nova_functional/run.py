# SPDX-License-Identifier: Apache-2.0
"""Run Nova's accelerator functional tests against our service.

    python tools/nova_functional/run.py [--baseline] [-k SUBSTRING]
        [--json results.json] [--logs DIR] [--venv .bench/nova-venv]
        [--create-venv [--setup-only]] [--workers N] [--min-pass N]
        [--rerun-failures]

Runs in the nova virtualenv (re-executing itself with its python);
--create-venv makes that virtualenv first when it is missing, from the
pinned list in tools/nova_functional/requirements.txt (see
docs/nova-functional-tests.md). Each test's CyborgFixture is
tools.nova_functional.fixture.RealCyborgFixture (our API, conductor and
agents); --baseline keeps Nova's own fake, to tell the tests' own
failures from ours. Prints one line per test (outcome, seconds, id,
reason) and a summary line; --workers splits the tests over that many
processes. Exit status 0 when at least --min-pass tests passed (default:
all of them), 1 otherwise.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
DEFAULT_VENV = os.path.join(REPO, '.bench', 'nova-venv')
# pip freeze of a working nova 34.0.0 venv with our package's dependencies
# (installed --no-deps: no resolution, the same versions every run).
REQUIREMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            'requirements.txt')

TEST_CLASSES = [
    'nova.tests.functional.test_servers.' + name for name in (
        'AcceleratorServerTest',
        'AcceleratorServerReschedTest',
        'AcceleratorServerOpsTest',
        'TwoPortsAcceleratorServerOpsTest',
        'PortAcceleratorServerOpsTest',
        'PortAcceleratorServerCreateRejectTest',
        'PortAndFlavorAccelsServerCreateTest',
    )] + [
    'nova.tests.functional.regressions.test_bug_2140631.'
    'TestBug2140631Cyborg',
]


def create_venv(venv, python=None):
    """A virtualenv with nova 34.0.0, its test dependencies and our
    package (editable), from the pinned requirements.
    """
    python = python or sys.executable
    print('creating the nova virtualenv in %s' % venv, flush=True)
    pip = [os.path.join(venv, 'bin', 'python'), '-m', 'pip', 'install',
           '-q', '--disable-pip-version-check', '--no-deps']
    try:
        subprocess.check_call([python, '-m', 'venv', venv])
        subprocess.check_call(pip + ['-r', REQUIREMENTS])
        subprocess.check_call(pip + ['-e', REPO])
    except (OSError, subprocess.CalledProcessError):
        # Half a virtualenv would pass for a whole one next time.
        shutil.rmtree(venv, ignore_errors=True)
        raise


def _in_nova_venv(venv):
    """Re-run this script with the venv's python unless nova imports."""
    try:
        import nova  # noqa: F401
        return
    except ImportError:
        pass
    python = os.path.join(venv, 'bin', 'python')
    if not os.path.exists(python):
        sys.exit('no nova virtualenv at %s; see docs/nova-functional-tests.md'
                 ' (or pass --create-venv)' % venv)
    os.execv(python, [python] + sys.argv)


def _patch_like_novas_runner():
    """Import Nova's functional test package first: its __init__ applies
    eventlet monkey patching, which must precede every other import of
    Nova or of the libraries it patches (as under stestr, which imports
    the test modules, and so that package, before anything else). Without
    it the instance's network info stays empty and the port-accelerator
    paths are never taken.
    """
    import nova.tests.functional  # noqa: F401


def _link_nova_etc():
    """The wheel installs etc/nova/api-paste.ini under the venv prefix;
    Nova's ConfFixture looks for it next to the nova package.
    """
    import nova
    site = os.path.dirname(os.path.dirname(nova.__file__))
    link = os.path.join(site, 'etc')
    target = os.path.join(sys.prefix, 'etc')
    if not os.path.exists(link) and os.path.isdir(target):
        os.symlink(target, link)


class Recorder(unittest.TestResult):
    """pass / fail / error / skip per test, with the reason."""

    def __init__(self, log_dir=None):
        super().__init__()
        self.log_dir = log_dir
        self.rows = []
        self._started = None

    def startTest(self, test):
        super().startTest(test)
        self._started = time.monotonic()

    def _row(self, test, outcome, reason=''):
        seconds = time.monotonic() - self._started
        self.rows.append({'test': test.id(), 'outcome': outcome,
                          'seconds': round(seconds, 1), 'reason': reason})
        print('%-5s %5.1fs %s %s' % (outcome, seconds, test.id(),
                                     reason[:160]), flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._row(test, 'pass')

    def addFailure(self, test, err=None, details=None):
        self._problem(test, 'fail', err, details)

    def addError(self, test, err=None, details=None):
        self._problem(test, 'error', err, details)

    def _problem(self, test, outcome, err, details):
        """testtools hands the exception over as details (with the test's
        captured log): the reason is the traceback's last line.
        """
        text = ''
        if details:
            text = '\n\n'.join('%s:\n%s' % (name, content.as_text())
                               for name, content in details.items())
        elif err:
            text = ''.join(traceback.format_exception(*err))
        if self.log_dir:
            name = test.id().rsplit('.', 2)
            path = os.path.join(self.log_dir, '.'.join(name[-2:]) + '.txt')
            with open(path, 'w') as f:
                f.write(text)
        kept = self.failures if outcome == 'fail' else self.errors
        kept.append((test, text))
        failure = details.get('traceback') if details else None
        self._row(test, outcome, _last_line(
            failure.as_text() if failure is not None else text))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._row(test, 'skip', reason)


def _last_line(text):
    """The exception line closing the last traceback in `text`."""
    lines = [line for line in text.splitlines() if line.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith('Traceback'):
            tail = [line for line in lines[i + 1:]
                    if not line.startswith((' ', '}'))]
            return tail[0] if tail else ''
    return lines[-1] if lines else ''


def summarize(rows, baseline, seconds, expected=None):
    """{'counts', 'passed', 'total', 'line'}: the outcome counts and the
    one summary line printed at the end. `expected` tests were to run: a
    test without a row (its worker died) counts as not passed.
    """
    counts = {}
    for row in rows:
        counts[row['outcome']] = counts.get(row['outcome'], 0) + 1
    passed = counts.get('pass', 0)
    others = ', '.join('%s %d' % (outcome, n)
                       for outcome, n in sorted(counts.items())
                       if outcome != 'pass')
    reruns = [row for row in rows if 'first_outcome' in row]
    if reruns:
        others += '%s%d rerun, %d of them passed' % (
            ', ' if others else '', len(reruns),
            sum(row['outcome'] == 'pass' for row in reruns))
    total = max(len(rows), expected or 0)
    if total > len(rows):
        others += '%sno result %d' % (', ' if others else '',
                                      total - len(rows))
    line = 'summary: %d/%d pass%s with %s in %.0f s' % (
        passed, total, ' (%s)' % others if others else '',
        "Nova's CyborgFixture" if baseline else 'our service', seconds)
    return {'counts': counts, 'passed': passed, 'total': total,
            'line': line}


def shard_of(test_ids, index, count):
    """The tests shard `index` of `count` runs: every count-th test of the
    sorted list, so each class is spread over the shards.
    """
    return [test_id for i, test_id in enumerate(sorted(test_ids))
            if i % count == index]


def _parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--venv', default=DEFAULT_VENV)
    parser.add_argument('--create-venv', action='store_true',
                        help='create --venv first if it does not exist')
    parser.add_argument('--setup-only', action='store_true',
                        help='with --create-venv: create it, run nothing')
    parser.add_argument('--baseline', action='store_true',
                        help="Nova's own CyborgFixture (no service of ours)")
    parser.add_argument('-k', dest='match', action='append', default=[],
                        help='only tests whose id contains this')
    parser.add_argument('--json', help='write the results here')
    parser.add_argument('--logs', help="keep each test's service log and "
                                       "each failure's details here")
    parser.add_argument('--workers', type=int, default=1,
                        help='processes to spread the tests over')
    parser.add_argument('--min-pass', type=int,
                        help='exit 0 when at least this many passed '
                             '(default: all)')
    parser.add_argument('--rerun-failures', action='store_true',
                        help='run each failed test once more, alone in a '
                             'fresh process, and keep that outcome')
    parser.add_argument('--shard', help=argparse.SUPPRESS)   # I/N, internal
    return parser.parse_args(argv)


def main(argv=None):
    started = time.monotonic()
    args = _parse(argv)
    args.venv = os.path.abspath(args.venv)
    if args.create_venv and not os.path.exists(
            os.path.join(args.venv, 'bin', 'python')):
        create_venv(args.venv)
    if args.setup_only:
        return 0
    _in_nova_venv(args.venv)
    _patch_like_novas_runner()
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    _link_nova_etc()
    if args.logs:
        args.logs = os.path.abspath(args.logs)
        os.makedirs(args.logs, exist_ok=True)

    tests = [test for test in _flatten(
        unittest.defaultTestLoader.loadTestsFromNames(TEST_CLASSES))
        if not args.match or any(m in test.id() for m in args.match)]
    if args.shard:
        index, count = (int(n) for n in args.shard.split('/'))
        kept = set(shard_of([t.id() for t in tests], index, count))
        tests = [test for test in tests if test.id() in kept]
    if args.workers > 1 and not args.shard:
        rows = _run_sharded(args, len(tests))
        order = {test.id(): i for i, test in enumerate(tests)}
        rows.sort(key=lambda row: order.get(row['test'], len(order)))
    else:
        rows = _run_here(args, tests)

    if args.rerun_failures and not args.shard:
        rows = _rerun_failures(args, rows)
    summary = summarize(rows, args.baseline, time.monotonic() - started,
                        expected=len(tests))
    if not args.shard:
        print(summary['line'], flush=True)
    if args.json:
        import nova.version
        with open(args.json, 'w') as f:
            json.dump({'nova': nova.version.version_string(),
                       'fixture': 'nova' if args.baseline else 'ours',
                       'counts': summary['counts'], 'tests': rows},
                      f, indent=1)
    wanted = summary['total'] if args.min_pass is None else args.min_pass
    return 0 if summary['passed'] >= wanted and summary['total'] else 1


def _run_here(args, tests):
    """Run the tests in this process; the rows of the Recorder."""
    import logging

    from nova.tests import fixtures as nova_fixtures
    # Each test's thread pools log their shutdown at INFO after the test's
    # log capture has ended, straight to stdout: eight lines a test.
    logging.getLogger('nova.thread_pool_factory').addFilter(
        lambda record: record.levelno >= logging.WARNING)
    if not args.baseline:
        from tools.nova_functional import fixture
        fixture.RealCyborgFixture.log_dir = args.logs
        # The tests look it up here at setUp (nova_fixtures.CyborgFixture).
        nova_fixtures.CyborgFixture = fixture.RealCyborgFixture
    suite = unittest.TestSuite(tests)
    result = Recorder(args.logs)
    suite.run(result)
    return result.rows


def _run_sharded(args, total):
    """Run `workers` copies of this script, each on its shard, and gather
    their rows (each prints its own per-test lines as it goes).
    """
    workers = min(args.workers, max(total, 1))
    with tempfile.TemporaryDirectory(prefix='nova-functional-') as tmp:
        procs = []
        for index in range(workers):
            extra = ['--shard', '%d/%d' % (index, workers)]
            for match in args.match:
                extra += ['-k', match]
            logs = args.logs and os.path.join(args.logs, 'shard-%d' % index)
            procs.append(_child(args, os.path.join(tmp, '%d.json' % index),
                                extra, logs))
        rows = []
        for index, proc in enumerate(procs):
            proc.wait()
            path = os.path.join(tmp, '%d.json' % index)
            if not os.path.exists(path):
                print('shard %d/%d wrote no results (exit status %s)'
                      % (index, workers, proc.returncode), flush=True)
                continue
            with open(path) as f:
                rows += json.load(f)['tests']
    return rows


def _child(args, json_path, extra, logs=None):
    """This script on a subset of the tests, in a new process."""
    cmd = [sys.executable, os.path.abspath(__file__), '--venv', args.venv,
           '--json', json_path] + extra
    if args.baseline:
        cmd.append('--baseline')
    if logs:
        cmd += ['--logs', logs]
    return subprocess.Popen(cmd, cwd=REPO)


def _rerun_failures(args, rows):
    """Each failed test once more, alone (Nova's tests give a server a few
    seconds to change state: on an overloaded machine they time out). The
    row keeps the first outcome as `first_outcome`.
    """
    with tempfile.TemporaryDirectory(prefix='nova-functional-') as tmp:
        for row in rows:
            if row['outcome'] not in ('fail', 'error'):
                continue
            print('rerun %s' % row['test'], flush=True)
            path = os.path.join(tmp, 'rerun.json')
            logs = args.logs and os.path.join(
                args.logs, 'rerun-' + '.'.join(row['test'].split('.')[-2:]))
            # A shard of one: no summary line of its own.
            _child(args, path, ['--shard', '0/1', '-k', row['test']],
                   logs).wait()
            if not os.path.exists(path):
                continue
            with open(path) as f:
                again = [r for r in json.load(f)['tests']
                         if r['test'] == row['test']]
            os.unlink(path)
            if again:
                first = row['outcome']
                row.update(again[0])
                row['first_outcome'] = first
    return rows


def _flatten(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flatten(item)
        else:
            yield item


if __name__ == '__main__':
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    sys.exit(main())
