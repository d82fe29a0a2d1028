# SPDX-License-Identifier: Apache-2.0
"""Facts the README and docs state that the code can check."""

import glob
import os
import re

from cyborg.api import microversion

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def _docs():
    return ['README.md', 'CONTRIBUTING.rst'] + sorted(
        os.path.relpath(p, ROOT)
        for p in glob.glob(os.path.join(ROOT, 'docs', '**', '*.md'),
                           recursive=True))


def test_no_paths_of_a_particular_machine():
    for path in _docs():
        for line in _read(path).splitlines():
            assert not re.search(r'(?<![\w.])/(work|root|home)/', line), (
                '%s: %s' % (path, line))


def test_readme_quick_start_is_two_commands():
    readme = _read('README.md')
    section = readme.split('## Quick start', 1)[1].split('\n## ', 1)[0]
    [block] = re.findall(r'^```\n(.*?)^```$', section, re.M | re.S)
    assert len(block.splitlines()) == 2


def test_ci_runs_the_readme_test_command():
    """.ci/run runs the quick start's test command as written: its
    install, then its pytest line.
    """
    readme = _read('README.md')
    section = readme.split('## Quick start', 1)[1].split('\n## ', 1)[0]
    [block] = re.findall(r'^```\n(.*?)^```$', section, re.M | re.S)
    [test_command] = [line for line in block.splitlines() if 'pytest' in line]
    install, pytest_line = [part.strip()
                            for part in test_command.split('&&')]
    ci = [line.strip() for line in _read('.ci/run').splitlines()]
    assert install + ' || rc=$?' in ci
    assert pytest_line + ' || rc=$?' in ci


def test_readme_microversions_are_the_servers():
    readme = ' '.join(_read('README.md').split())
    assert 'the server advertises %d.%d–%d.%d' % (
        microversion.MIN_VERSION + microversion.MAX_VERSION) in readme


def test_relative_links_resolve():
    for path in _docs():
        for target in re.findall(r'\]\(([^)\s]+)\)', _read(path)):
            if re.match(r'[a-z]+:|#', target):
                continue
            linked = os.path.join(ROOT, os.path.dirname(path),
                                  target.split('#')[0])
            assert os.path.exists(linked), '%s: %s' % (path, target)
