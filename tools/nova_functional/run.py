"""Run Nova's accelerator functional tests against our service.

    python tools/nova_functional/run.py [--baseline] [-k SUBSTRING]
        [--json results.json] [--venv .bench/nova-venv]

Runs in the nova virtualenv (re-executing itself with its python; see
docs/nova-functional-tests.md to create it). Each test's CyborgFixture is
tools.nova_functional.fixture.RealCyborgFixture (our API, conductor and
agents); --baseline keeps Nova's own fake, to tell the tests' own
failures from ours. Prints one line per test and a summary table.
"""

import argparse
import json
import os
import sys
import time
import traceback
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
DEFAULT_VENV = os.path.join(REPO, '.bench', 'nova-venv')

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
                 % venv)
    os.execv(python, [python] + sys.argv)


def _link_nova_etc():
    """The wheel installs etc/nova/api-paste.ini under the venv prefix;
    Nova's ConfFixture looks for it next to the nova package."""
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
        captured log): the reason is the traceback's last line."""
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--venv', default=DEFAULT_VENV)
    parser.add_argument('--baseline', action='store_true',
                        help="Nova's own CyborgFixture (no service of ours)")
    parser.add_argument('-k', dest='match', action='append', default=[],
                        help='only tests whose id contains this')
    parser.add_argument('--json', help='write the results here')
    parser.add_argument('--logs', help='keep each test\'s service log here')
    args = parser.parse_args(argv)
    _in_nova_venv(os.path.abspath(args.venv))
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    _link_nova_etc()

    if args.logs:
        args.logs = os.path.abspath(args.logs)
        os.makedirs(args.logs, exist_ok=True)
    from nova.tests import fixtures as nova_fixtures
    if not args.baseline:
        from tools.nova_functional import fixture
        fixture.RealCyborgFixture.log_dir = args.logs
        # The tests look it up here at setUp (nova_fixtures.CyborgFixture).
        nova_fixtures.CyborgFixture = fixture.RealCyborgFixture

    suite = unittest.TestSuite()
    for test in _flatten(unittest.defaultTestLoader.loadTestsFromNames(
            TEST_CLASSES)):
        if not args.match or any(m in test.id() for m in args.match):
            suite.addTest(test)
    result = Recorder(args.logs)
    suite.run(result)
    counts = {}
    for row in result.rows:
        counts[row['outcome']] = counts.get(row['outcome'], 0) + 1
    print('summary:', json.dumps(counts, sort_keys=True))
    if args.json:
        import nova.version
        with open(args.json, 'w') as f:
            json.dump({'nova': nova.version.version_string(),
                       'fixture': 'nova' if args.baseline else 'ours',
                       'counts': counts, 'tests': result.rows}, f, indent=1)
    return 0 if result.wasSuccessful() else 1


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
