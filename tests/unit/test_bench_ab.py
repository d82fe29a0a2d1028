# SPDX-License-Identifier: Apache-2.0
"""cyborg-bench ab: the turns it takes between the two trees, what it keeps
of them and the figures it makes; a --base that is not a commit.
"""

import types

import pytest

from cyborg_bench import ab
from cyborg_bench import cli


class _Side:
    """A side whose requests are noted in one shared list."""

    def __init__(self, name, sent, prepared):
        self.name = name
        self.sent = sent
        self.prepared = prepared

    def prepare(self, kind, count):
        self.prepared.append((self.name, kind, count))

    def request(self, kind, i):
        self.sent.append((self.name, kind, i))


def test_each_turn_goes_to_both_sides_in_alternating_order(monkeypatch):
    sent, prepared = [], []
    sides = [_Side('base', sent, prepared), _Side('this', sent, prepared)]
    clock = iter(range(0, 10 ** 6, 1000))
    monkeypatch.setattr(ab.time, 'perf_counter_ns', lambda: next(clock))
    kept = ab.alternate(sides, 'dp-get', requests=3, warmup=2)
    # Everything the 5 turns use is made first, on both sides.
    assert prepared == [('base', 'dp-get', 5), ('this', 'dp-get', 5)]
    assert sent == [('base', 'dp-get', 0), ('this', 'dp-get', 0),
                    ('this', 'dp-get', 1), ('base', 'dp-get', 1),
                    ('base', 'dp-get', 2), ('this', 'dp-get', 2),
                    ('this', 'dp-get', 3), ('base', 'dp-get', 3),
                    ('base', 'dp-get', 4), ('this', 'dp-get', 4)]
    # The warm-up's two turns are not kept; each request took 1,000 ns.
    assert kept == {'base': [1000] * 3, 'this': [1000] * 3}


def test_figures_are_medians_p90s_the_change_and_paired_differences():
    kept = {'base': [100000, 200000, 300000, 400000, 500000],
            'this': [90000, 210000, 250000, 380000, 900000]}
    f = ab.figures(kept)
    assert f['base_p50_us'] == 300.0 and f['this_p50_us'] == 250.0
    assert f['change_pct'] == pytest.approx(-100.0 / 6)
    # Pairs: -10, +10, -50, -20, +400 µs; their median is -10.
    assert f['paired_us'] == -10.0
    assert f['base_p90_us'] == 400.0 and f['this_p90_us'] == 380.0
    assert f['requests'] == 5
    line = ab.table({'dp-get': f}).splitlines()[-1]
    assert line == ('| dp-get | 300.0 | 250.0 | -16.7% | -10.0 | 400.0 '
                    '| 380.0 | 5 |')


def test_a_base_that_is_not_a_commit_or_an_unknown_workload_is_refused():
    args = cli.parser().parse_args(['ab', '--base', 'no-such-rev-xyz'])
    with pytest.raises(SystemExit, match='--base no-such-rev-xyz: not a '
                                         'commit'):
        ab.run(args)
    args = types.SimpleNamespace(workloads='dp-get,nope', base='HEAD')
    with pytest.raises(SystemExit, match='unknown workload nope'):
        ab.run(args)
