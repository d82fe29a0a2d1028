# SPDX-License-Identifier: Apache-2.0
"""cyborg-bench: the load generator against our API served in this
process (the shape of its JSON, wrong answers counted as errors), the
subcommands' arguments and the pieces they share. Nothing is timed.
"""

import argparse
import json
import socketserver
import threading
import wsgiref.simple_server

import pytest

from cyborg.api import app
from cyborg.conf import CONF
from cyborg.drivers import fake
from cyborg.wsgi import floor
from cyborg_bench import agent_scale
from cyborg_bench import bind
from cyborg_bench import cli
from cyborg_bench import client
from cyborg_bench import hostspec
from cyborg_bench import load
from cyborg_bench import per_db
from cyborg_bench import rounds
from cyborg_bench import side_by_side
from cyborg_bench import soak
from cyborg_bench import stats


class _Server(socketserver.ThreadingMixIn, wsgiref.simple_server.WSGIServer):
    daemon_threads = True


class _QuietHandler(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, *args):
        pass


def _serve(wsgi_app):
    server = wsgiref.simple_server.make_server(
        '127.0.0.1', 0, wsgi_app, server_class=_Server,
        handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, 'http://127.0.0.1:%d' % server.server_address[1]


@pytest.fixture
def api(sqlite_database):
    server, url = _serve(app.setup_app(CONF))
    yield url, sqlite_database.url
    server.shutdown()
    server.server_close()


@pytest.fixture
def floor_url():
    server, url = _serve(floor.application)
    yield url
    server.shutdown()
    server.server_close()


def _run(tmp_path, *argv):
    out = tmp_path / 'bench.json'
    rc = cli.main(['load'] + list(argv) + ['--json', str(out), '--quiet'])
    return rc, json.loads(out.read_text())


def test_every_workload_reports_its_figures(api, tmp_path):
    url, db_url = api
    rc, doc = _run(
        tmp_path, '--url', url + '/v2', '--requests', '3', '--warmup', '1',
        '--workloads', ','.join(load.ALL), '--sizes', '20,40',
        '--dp-list-rows', '5', '--seed-db', db_url,
        '--no-bind-reason', 'no events receiver in this test')
    assert rc == 0, doc
    assert {'date', 'loadavg_start', 'loadavg_end', 'cpus',
            'seconds'} <= set(doc['meta'])
    ran = [r for r in doc['results'] if 'not_run' not in r]
    assert [r['workload'] for r in doc['results'] if 'not_run' in r] == [
        'bind']
    assert doc['results'][-1]['not_run'] == 'no events receiver in this test'
    assert {r['workload'] for r in ran} == set(load.ALL) - {'bind'}
    for r in ran:
        assert r['errors'] == 0, r
        assert r['ok'] == r['planned']
        for key in ('ops_per_s', 'p50_ms', 'p90_ms', 'p99_ms', 'max_ms',
                    'concurrency', 'time_capped', 'error_kinds'):
            assert key in r, (key, r)
    assert [r['rows'] for r in ran if r['workload'] == 'lookup'] == [20, 40]
    assert [r['listed'] for r in ran if r['workload'] == 'arq-list'] == [
        20, 40]
    assert [r['rows'] for r in ran if r['workload'] == 'dp-list'] == [5]


def test_wrong_answers_are_counted_as_errors(floor_url, tmp_path):
    # The floor app answers 404 to everything but GET /.
    rc, doc = _run(tmp_path, '--url', floor_url, '--requests', '4',
                   '--warmup', '0', '--workloads', 'noop,dp-create',
                   '--concurrency', '1,2')
    assert rc == 1
    noop = [r for r in doc['results'] if r['workload'] == 'noop']
    assert [(r['ok'], r['errors']) for r in noop] == [(4, 0), (4, 0)]
    create = [r for r in doc['results'] if r['workload'] == 'dp-create']
    assert [r['concurrency'] for r in create] == [1, 2]
    for r in create:
        assert (r['ok'], r['errors']) == (0, 4)
        assert r['error_kinds'] == {'404': 4}
        assert r['error_samples'] and 'p50_ms' not in r
    # dp-get/dp-delete need created profiles: not run, with the reason.
    rc, doc = _run(tmp_path, '--url', floor_url, '--workloads', 'dp-get')
    assert doc['results'] == [{'workload': 'dp-get', 'not_run':
                               'needs profiles from dp-create first'}]


def test_table_workloads_need_a_database(floor_url, tmp_path):
    rc, doc = _run(tmp_path, '--url', floor_url, '--workloads', 'lookup')
    assert rc == 0
    assert doc['results'] == [{'workload': 'lookup', 'not_run':
                               'needs --seed-db to fill the ARQ table'}]


def test_endpoint_accepts_the_v2_url_or_the_root():
    assert client.Endpoint('http://h:1/accelerator/v2/').prefix == (
        '/accelerator')
    assert client.Endpoint('http://h:1').prefix == ''
    with pytest.raises(ValueError):
        client.Endpoint('h:1')


@pytest.mark.parametrize('argv', [
    ['load', '--url', 'http://127.0.0.1:1'],
    ['api', '--quick', '--db', 'mysql'],
    ['bind', '--quick', '--deployment', 'distributed'],
    ['agent-scale', '--quick', '--transport', 'rabbit'],
    ['nvidia', '--gpus', '1', '--mig-binds', '1'],
    ['side-by-side', '--quick', '--skip-reference'],
    ['soak', '--minutes', '0.1'],
    ['profile', '--db', 'postgresql', '--calls'],
    ['profile', '--evict-mib', '8', '--workloads', 'dp-get,dp-create'],
    ['per-db', '--db', 'mysql'],
    ['prepare-rpc', '--transport', 'inproc', '--batch', '2'],
    ['layers', '--workloads', 'dp-get', '--requests', '10'],
    ['ab', '--base', 'HEAD~1', '--workloads', 'dp-get', '--requests', '10'],
])
def test_every_subcommand_parses_its_arguments(argv):
    args = cli.parser().parse_args(argv)
    assert args.run is cli.BENCHMARKS[argv[0]][0].run


@pytest.mark.parametrize('argv', [
    ['bind', '--experiment', 'fake-notify'],   # removed experiments
    ['nvidia', '--gc-freeze'],
    ['--url', 'http://127.0.0.1:1'],           # a subcommand is needed
])
def test_removed_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.parser().parse_args(argv)
    assert e.value.code == 2


def test_generated_host_specs_are_what_the_fake_driver_reads(tmp_path):
    fpgas = tmp_path / 'fpgas.yaml'
    hostspec.write_fpgas(str(fpgas), devices=3, functions=4)
    devices = fake.FakeDriver(str(fpgas)).discover()
    assert len(devices) == 3
    assert [len(d.deployables[0].attach_handles) for d in devices] == [4] * 3
    gpus = tmp_path / 'gpus.yaml'
    hostspec.write_gpus(str(gpus), devices=5)
    devices = fake.FakeDriver(str(gpus)).discover()
    assert sorted(d.type for d in devices) == ['GPU'] * 5
    assert len({d.deployables[0].name for d in devices}) == 5
    with pytest.raises(ValueError):
        hostspec.write_fpgas(str(fpgas), devices=0, functions=1)


def test_summaries_are_nearest_rank_in_ms():
    values = [0.005, 0.001, 0.004, 0.002, 0.003]
    summary = stats.summarize(values)
    assert (summary['n'], summary['p50_ms'], summary['max_ms'],
            summary['mean_ms']) == (5, 3.0, 5.0, 3.0)
    assert stats.summarize([]) == {'n': 0}
    assert stats.fmt(summary, 'p90_ms') == '5.0'
    # To the microsecond: 84 µs and 89 µs are not both 0.09 ms.
    assert [stats.summarize([s])['p50_ms'] for s in (84e-6, 89e-6)] == [
        0.084, 0.089]
    assert stats.fmt({}, 'p90_ms') == '—'


def _result(workload, ops, p50, rows=None, ok=10, **extra):
    r = {'workload': workload, 'rows': rows, 'concurrency': 1, 'ok': ok,
         'errors': 0, 'planned': 10, 'ops_per_s': ops, 'time_capped': ok < 10}
    if p50 is not None:
        r.update(p50_ms=p50, p99_ms=p50 * 2)
    r.update(extra)
    return r


def test_side_by_side_ratios_bounds_and_not_run():
    sbs = side_by_side
    ours = {'results': [
        _result('dp-create', 500.0, 2.0),
        _result('lookup', 400.0, 2.5, rows=100000),
        _result('arq-list', 30.0, 33.0, rows=1000, listed=1000),
        dict(_result('boot', 50.0, 20.0), concurrency=4)]}
    ref = {'results': [
        _result('dp-create', 25.0, 40.0),
        _result('lookup', 0.0, None, rows=100000, ok=0, timeout_s=240),
        _result('arq-list', 0.25, 4000.0, rows=1000, ok=3, listed=1000),
        {'workload': 'bind', 'not_run': 'no agent'}]}
    rows = {r['workload']: r for r in sbs.compare(ours, ref)}
    assert 'boot' not in rows            # one client only
    assert rows['dp-create']['ratio'] == 20.0
    assert rows['dp-create']['p50_ratio'] == 20.0
    lookup = rows['lookup']
    assert lookup['ref_timed_out_s'] == 240
    assert lookup['ratio_at_least'] == 400 * 240
    assert rows['arq-list']['ref_listed'] == 1000
    table = sbs.markdown(list(rows.values()))
    assert '> 240 s' in table and '> 96000×' in table
    assert '(3 done, time cap)' in table


def test_side_by_side_limit_is_floor_plus_commits_and_reads():
    runs = {'floor': {'results': [_result('noop', 3000.0, 0.3),
                                  _result('dp-list', 1000.0, 0.9,
                                          rows=200, listed=200)]},
            'storage': {'commit_ms': 0.5, 'read_ms': 0.05,
                        'list_read_ms': 0.2, 'list_rows': 200},
            'ours': {'results': [_result('dp-create', 500.0, 1.6),
                                 _result('dp-get', 1000.0, 0.7),
                                 _result('dp-list', 500.0, 1.0),
                                 _result('boot', 100.0, 3.0)]}}
    rows = {r['workload']: r for r in side_by_side.ratios(runs)}
    assert rows['dp-create']['limit_p50_ms'] == 0.8       # floor + commit
    assert rows['dp-create']['p50_over_limit'] == 2.0
    assert rows['dp-get']['limit_p50_ms'] == 0.35         # floor + read
    # The list: the floor's answer of its size + one read of its rows.
    assert rows['dp-list']['limit_p50_ms'] == 1.1
    # Three requests, two commits (create, delete), one read (GET).
    assert rows['boot']['limit_p50_ms'] == pytest.approx(
        3 * 0.3 + 2 * 0.5 + 0.05)
    table = side_by_side.markdown(
        list(rows.values()), side_by_side.floor_figures(runs['floor']),
        runs['storage'])
    assert '| 2.00× |' in table and 'synchronous=FULL' in table
    # No reference in this run: no ratio at the limit either.
    assert 'p50_ratio_at_limit' not in rows['dp-create']
    assert 'the 200 rows dp-list lists: p50 0.2 ms' in table
    assert "its answer of the list's size (dp-list): p50 0.9 ms" in table


def test_side_by_side_list_has_no_limit_without_the_floors_list():
    # A floor run without its list (the list not compared): the list's
    # limit is not made up from the floor's `{}`.
    runs = {'floor': {'results': [_result('noop', 3000.0, 0.3)]},
            'storage': {'commit_ms': 0.5, 'read_ms': 0.05,
                        'list_read_ms': 0.2, 'list_rows': 200},
            'ours': {'results': [_result('dp-list', 500.0, 1.0),
                                 _result('dp-get', 1000.0, 0.7)]}}
    rows = {r['workload']: r for r in side_by_side.ratios(runs)}
    assert 'limit_p50_ms' not in rows['dp-list']
    assert rows['dp-get']['limit_p50_ms'] == 0.35


def _rounds_runs():
    """Three rounds in which the medians of the ratios differ from the
    ratios of the medians; the reference's 100k lookup ran past its bound
    once, after the rounds.
    """
    sides = (('ours', 'reference'), ('reference', 'ours'),
             ('ours', 'reference'))
    rounds = []
    for n, (floor_ms, commit_ms, ours, ref, lookup) in enumerate([
            (0.3, 0.5, (500.0, 2.0), (25.0, 40.0), (400.0, 2.5)),
            (0.4, 0.6, (400.0, 2.5), (50.0, 20.0), (500.0, 2.0)),
            (0.5, 0.4, (600.0, 1.6), (40.0, 30.0), (450.0, 2.2))]):
        mine = [_result('dp-create', *ours, errors=int(n == 1)),
                _result('lookup', *lookup, rows=100000)]
        rounds.append({
            'round': n + 1, 'order': list(sides[n]),
            'floor': {'results': [_result('noop', 1 / floor_ms * 1000,
                                          floor_ms)]},
            'storage': {'commit_ms': commit_ms, 'read_ms': 0.05,
                        'list_read_ms': 0.2, 'list_rows': 200},
            'ours': {'results': mine},
            'reference': {'results': [
                _result('dp-create', *ref),
                {'workload': 'bind', 'not_run': 'no agent'}]}})
    return {'rounds': rounds,
            'reference-large': {'results': [
                _result('lookup', 0.0, None, rows=100000, ok=0,
                        timeout_s=240)]},
            'ours-aio': {'results': [_result('bind', 40.0, 25.0)]}}


def test_side_by_side_rounds_report_medians_of_each_rounds_ratios():
    runs = _rounds_runs()
    rows = {r['workload']: r for r in side_by_side.round_rows(runs)}
    create = rows['dp-create']
    # Each round's ratio: 20, 8, 15; their median, not 500/40 = 12.5.
    assert [r['ratio'] for r in create['rounds']] == [20.0, 8.0, 15.0]
    assert create['ratio'] == 15.0
    # Reference p50 / ours p50: 20, 8, 18.75 (not 30/2.0 = 15).
    assert create['p50_ratio'] == 18.8
    assert (create['ours_ops_per_s'], create['ours_p50_ms'],
            create['ref_ops_per_s'], create['ref_p50_ms']) == (
        500.0, 2.0, 40.0, 30.0)
    # Each round its own limit: its floor plus its commit.
    assert [r['limit_p50_ms'] for r in create['rounds']] == [0.8, 1.0, 0.9]
    assert [r['p50_over_limit'] for r in create['rounds']] == [
        2.5, 2.5, 1.78]
    assert create['p50_over_limit'] == 2.5
    assert create['limit_p50_ms'] == 0.9
    # The reference's p50 over each round's limit: 40/0.8, 20/1.0, 30/0.9
    # (what a server at the limit would show), and their median.
    assert [r['p50_ratio_at_limit'] for r in create['rounds']] == [
        50.0, 20.0, 33.3]
    assert create['p50_ratio_at_limit'] == 33.3
    assert '| 33.3× |' in side_by_side.markdown([create])
    assert create['ours_errors'] == 1          # summed, not a median
    assert create['ref_time_capped'] is False
    assert [r['first'] for r in create['rounds']] == [
        'ours', 'reference', 'ours']
    # The one bounded reference lookup against each round of ours.
    lookup = rows['lookup']
    assert lookup['ref_timed_out_s'] == 240
    assert [r['ratio_at_least'] for r in lookup['rounds']] == [
        96000, 120000, 108000]
    assert lookup['ratio_at_least'] == 108000
    assert 'rounds' not in rows['bind (bound, cyborg-aio)']
    assert rows['bind (bound, cyborg-aio)']['ref_not_run'] == 'no agent'
    table = side_by_side.markdown(list(rows.values()))
    assert '| 15× | 18.8× |' in table and '> 108000×' in table


def test_side_by_side_rounds_table_shows_each_round():
    runs = _rounds_runs()
    rows = side_by_side.round_rows(runs)
    floor, storage, each = side_by_side.round_figures(runs)
    assert floor['p50_ms'] == 0.4 and storage['commit_ms'] == 0.5
    assert storage['list_rows'] == 200
    assert each == [
        {'first': 'ours', 'floor_p50_ms': 0.3, 'commit_ms': 0.5},
        {'first': 'reference', 'floor_p50_ms': 0.4, 'commit_ms': 0.6},
        {'first': 'ours', 'floor_p50_ms': 0.5, 'commit_ms': 0.4}]
    table = rounds.table(rows, each)
    assert ('| dp-create |  | 20×, 8×, 15× | 20×, 8×, 18.8× '
            '| 2.50×, 2.50×, 1.78× |') in table
    assert '| lookup | 100,000 | > 96000×, > 120000×, > 108000× |' in table
    assert '| 2 | reference | 0.4 | 0.6 |' in table
    assert 'bind (bound' not in table


def test_side_by_side_one_round_merges_to_its_own_rows():
    runs = {'floor': {'results': [_result('noop', 3000.0, 0.3)]},
            'storage': {'commit_ms': 0.5, 'read_ms': 0.05,
                        'list_read_ms': 0.2, 'list_rows': 200},
            'ours': {'results': [_result('dp-create', 500.0, 1.6),
                                 _result('dp-list', 500.0, 1.0,
                                         rows=200, listed=200)]},
            'reference': {'results': [_result('dp-create', 60.0, 13.0),
                                      _result('dp-list', 50.0, 9.5,
                                              rows=200, listed=200)]}}
    rows = side_by_side.ratios(runs)
    merged = rounds.merge([rows])
    assert [r.pop('rounds') for r in merged] == [
        [dict({'round': 1}, **{k: r[k] for k in rounds.PER_ROUND if k in r})
         for r in [row]] for row in rows]
    assert merged == rows


@pytest.mark.parametrize('argv, heading', [
    ([], '## Side by side (one client; ratio = ours / reference)\n'),
    (['--rounds', '1'],
     '## Side by side (one client; ratio = ours / reference)\n'),
    (['--rounds', '3'], '## Side by side (one client; median of 3 rounds; '
                        'ratio = ours / reference)\n'),
])
def test_side_by_side_rounds_1_is_one_run_of_each(
        argv, heading, tmp_path, monkeypatch, capsys):
    one = {'floor': {'results': [_result('noop', 3000.0, 0.3)]},
           'storage': {'commit_ms': 0.5, 'read_ms': 0.05,
                       'list_read_ms': 0.2, 'list_rows': 200},
           'ours': {'results': [_result('dp-create', 500.0, 1.6)]},
           'reference': {'results': [_result('dp-create', 60.0, 13.0)]}}
    monkeypatch.setattr(side_by_side, 'run_all', lambda *a: one)
    monkeypatch.setattr(side_by_side, 'run_rounds',
                        lambda *a: _rounds_runs())
    out = tmp_path / 'sbs.json'
    args = cli.parser().parse_args(['side-by-side', '--skip-reference',
                                    '--json', str(out)] + argv)
    # The rounds' runs have a wrong answer in round 2: the exit status
    # counts every round's documents.
    assert side_by_side.run(args) == (1 if '3' in argv else 0)
    doc = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert heading in printed
    if '3' in argv:
        assert doc['meta']['rounds'] == 3
        assert doc['meta']['requests_per_round'] == 100
        assert len(doc['side_by_side'][0]['rounds']) == 3
        assert len(doc['runs']['rounds']) == 3
        assert '### Each round' in printed
    else:
        assert 'rounds' not in doc['meta']
        assert doc['side_by_side'] == side_by_side.ratios(one)
        assert doc['runs'] == one
        assert 'round' not in printed.replace(heading, '')


def test_side_by_side_storage_costs_measure_each_part(tmp_path):
    costs = side_by_side.storage_costs(str(tmp_path), commits=5, reads=5,
                                       list_reads=5)
    assert costs['list_rows'] == 200
    for key in ('commit_ms', 'read_ms', 'list_read_ms'):
        assert costs[key] > 0


def test_per_db_limits_are_p50s_of_the_driver_alone(tmp_path,
                                                    monkeypatch):
    monkeypatch.setattr(per_db, 'STORAGE_OPS',
                        {'commit': 5, 'read': 9, 'list_read': 3})
    timed = []
    real = side_by_side.p50_ms

    def counted(op, n, warmup=0):
        timed.append(n)
        return real(op, n, warmup)
    monkeypatch.setattr(side_by_side, 'p50_ms', counted)
    costs = per_db._storage('sqlite:///%s' % (tmp_path / 'limits.sqlite'))
    assert sorted(costs) == ['commit_ms', 'list_read_ms', 'read_ms']
    assert all(isinstance(v, float) and v > 0 for v in costs.values())
    # Each limit timed as many operations as STORAGE_OPS says.
    assert timed == [5, 9, 3]
    # Warm-up calls first, untimed; then the timed ones, numbered on.
    calls = []
    assert real(calls.append, 3, 2) >= 0
    assert calls == [0, 1, 2, 3, 4]


def test_per_db_rows_carry_the_reference_ratios_where_it_ran():
    doc = {'results': [
        {'workload': 'dp-get', 'concurrency': 1, 'ops_per_s': 2000.0,
         'p50_ms': 0.4, 'p99_ms': 0.8, 'errors': 0},
        {'workload': 'dp-create', 'concurrency': 1, 'ops_per_s': 1000.0,
         'p50_ms': 0.9, 'p99_ms': 1.5, 'errors': 0},
        # Not at one client, or not run: no row.
        {'workload': 'dp-get', 'concurrency': 4, 'ops_per_s': 1.0,
         'p50_ms': 1.0, 'p99_ms': 1.0, 'errors': 0},
        {'workload': 'lookup', 'not_run': 'needs --seed-db'}]}
    floor = {'p50_ms': 0.3}
    storage = {'commit_ms': 0.3, 'read_ms': 0.1, 'list_read_ms': 0.2}
    ref = {'dp-get': {'ops_per_s': 250.0, 'p50_ms': 3.6, 'errors': 0}}
    get, create = per_db.rows_of('mysql', doc, floor, storage, ref)
    assert get['limit_ms'] == 0.4 and get['p50_over_limit'] == 1.0
    assert (get['ratio'], get['ratio_p50'], get['ratio_p50_at_limit']) == (
        8.0, 9.0, 9.0)
    # The reference's dp-create did not run: no ratio made up.
    assert create['limit_ms'] == 0.6 and 'ratio' not in create
    assert per_db._reference_cells(create, {'reference_not_run': 'no'}) == [
        'not run', '', '', '', '']
    assert per_db._reference_cells(get, {})[2:] == ['8.0×', '9.0×', '9.0×']


def _per_db_round(first, floor_ms, commit_ms, ours, ref):
    """One per-db round: ours and the reference's (op/s, p50) of
    dp-create, ours' errors; the reference's dp-get left out.
    """
    doc = {'results': [
        {'workload': 'dp-create', 'concurrency': 1, 'ops_per_s': ours[0],
         'p50_ms': ours[1], 'p99_ms': 2 * ours[1], 'errors': ours[2]},
        {'workload': 'dp-get', 'concurrency': 1, 'ops_per_s': 2000.0,
         'p50_ms': 0.5, 'p99_ms': 1.0, 'errors': 0}]}
    storage = {'commit_ms': commit_ms, 'read_ms': 0.1, 'list_read_ms': 0.2}
    floor_ = {'p50_ms': floor_ms, 'list_p50_ms': 3 * floor_ms}
    theirs = {'dp-create': {'ops_per_s': ref[0], 'p50_ms': ref[1],
                            'errors': 0}}
    return {'first': first, 'floor_p50_ms': floor_ms,
            'floor_list_p50_ms': 3 * floor_ms, 'storage': storage,
            'rows': per_db.rows_of('mysql', doc, floor_, storage, theirs)}


def test_per_db_rounds_report_medians_of_each_rounds_ratios():
    each = [_per_db_round('ours', 0.3, 0.3, (1000.0, 0.9, 0), (50.0, 20.0)),
            _per_db_round('reference', 0.4, 0.4, (800.0, 1.2, 2),
                          (100.0, 9.0)),
            _per_db_round('ours', 0.35, 0.5, (900.0, 1.0, 0), (60.0, 15.0))]
    res = per_db.summary(each)
    create, get = res['rows']
    # Each round's ratio by op/s: 20, 8, 15, and their median.
    assert [r['ratio'] for r in create['rounds']] == [20.0, 8.0, 15.0]
    assert create['ratio'] == 15.0
    # By p50: 20/0.9, 9/1.2, 15/1.0; at each round's limit: 20/0.6,
    # 9/0.8, 15/0.85, whose median 17.65 is not the medians' ratio (15 /
    # the median limit 0.8 = 18.75).
    assert [r['ratio_p50'] for r in create['rounds']] == [22.22, 7.5, 15.0]
    assert [r['ratio_p50_at_limit'] for r in create['rounds']] == [
        33.33, 11.25, 17.65]
    assert create['ratio_p50_at_limit'] == 17.65
    # Each round its own limit (floor + commit), the median of p50 / it.
    assert [r['p50_over_limit'] for r in create['rounds']] == [
        1.5, 1.5, 1.18]
    assert (create['limit_ms'], create['p50_over_limit']) == (0.8, 1.5)
    # Wrong answers in any round count.
    assert create['errors'] == 2
    assert [r['first'] for r in create['rounds']] == [
        'ours', 'reference', 'ours']
    # The reference ran no dp-get: no ratio in any round.
    assert 'ratio' not in get and all('ratio' not in r
                                      for r in get['rounds'])
    assert (res['floor_p50_ms'], res['floor_list_p50_ms']) == (0.35, 1.05)
    assert res['storage']['commit_ms'] == 0.4
    assert [r['first'] for r in res['rounds']] == [
        'ours', 'reference', 'ours']
    assert all('rows' not in r for r in res['rounds'])
    table = per_db.round_table({'mysql': res}).splitlines()
    assert table[2] == '| mysql | dp-create | 20.0×, 8.0×, 15.0× | ' \
        '1.50×, 1.50×, 1.18× |'
    assert table[3].startswith('| mysql | dp-get | – |')


def test_per_db_one_round_keeps_no_rounds_list():
    res = per_db.summary([_per_db_round('ours', 0.3, 0.3, (1000.0, 0.9, 0),
                                        (50.0, 20.0))])
    create = res['rows'][0]
    assert 'rounds' not in create
    assert (create['ratio'], create['p50_over_limit'], create['ops_per_s']) \
        == (20.0, 1.5, 1000.0)


def test_reference_setup_errors_are_named_without_the_log_prefix():
    done = argparse.Namespace(stdout='', stderr=(
        'CRITICAL cyborg [-] Unhandled error\n'
        '2026-12-06 14:07:01.992 6780 ERROR cyborg '
        'sqlalchemy.exc.CompileError: PostgreSQL Enum type requires a '
        'name.\n2026-12-06 14:07:01.992 6780 ERROR cyborg \n'))
    assert side_by_side._last_error(done) == (
        'sqlalchemy.exc.CompileError: PostgreSQL Enum type requires a name.')


def test_side_by_side_workloads_keep_dp_create_for_what_needs_it():
    args = cli.parser().parse_args(['side-by-side', '--workloads',
                                    'dp-get,noop', '--no-aio'])
    assert side_by_side._compared(args) == ['noop', 'dp-create', 'dp-get']
    assert args.aio is False
    args = cli.parser().parse_args(['side-by-side', '--workloads', 'nope'])
    with pytest.raises(SystemExit):
        side_by_side._compared(args)


def test_side_by_side_runs_the_load_generator_as_a_subcommand(
        floor_url, tmp_path):
    args = cli.parser().parse_args(['side-by-side', '--quick'])
    doc = side_by_side.bench('floor', floor_url, str(tmp_path),
                             ['noop', 'dp-list'], args,
                             ['--requests', '2', '--warmup', '0'])
    assert doc['meta']['label'] == 'floor'
    # The floor's list answers dp-list's 200 profiles as they are.
    assert [(r['workload'], r['ok'], r['errors'])
            for r in doc['results']] == [('noop', 2, 0), ('dp-list', 2, 0)]
    floor_doc = side_by_side.floor_figures(doc)
    assert floor_doc['list_p50_ms'] == doc['results'][1]['p50_ms']


def test_floor_list_is_shaped_and_sized_as_the_apis(
        api, floor_url, tmp_path):
    # dp-list's 200 profiles in our API, then both lists side by side:
    # the same fields of the same types, and as many bytes within 2 %.
    url, _ = api
    rc, doc = _run(tmp_path, '--url', url, '--requests', '1', '--warmup',
                   '0', '--workloads', 'dp-list')
    assert rc == 0, doc
    ours = client.Endpoint(url).client().request(
        'GET', '/v2/device_profiles')[1]
    floors = client.Endpoint(floor_url).client().request(
        'GET', '/v2/device_profiles')[1]
    mine = json.loads(ours)['device_profiles']
    theirs = json.loads(floors)['device_profiles']
    assert len(mine) == len(theirs) == floor.LIST_ROWS

    def shape(value):
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shape(v) for v in value]
        return type(value).__name__
    assert [shape(p) for p in theirs] == [shape(p) for p in mine]
    assert abs(len(floors) - len(ours)) <= 0.02 * len(ours)


def test_dp_list_trims_a_paged_table_to_size(api, tmp_path):
    # More profiles than one page holds: dp-list must still end up with
    # exactly --dp-list-rows in the table before it measures.
    CONF.set_override('max_limit', 4, group='api')
    url, _ = api
    rc, doc = _run(tmp_path, '--url', url, '--requests', '7', '--warmup',
                   '0', '--workloads', 'dp-create,dp-list',
                   '--dp-list-rows', '3')
    assert rc == 0, doc
    assert [(r['workload'], r['ok'], r['errors'])
            for r in doc['results']] == [('dp-create', 7, 0),
                                         ('dp-list', 7, 0)]


def test_bind_rounds_are_concurrency_colon_rounds():
    args = cli.parser().parse_args(['bind', '--rounds', '1:5,10:2'])
    assert args.rounds == {1: 5, 10: 2}
    with pytest.raises(SystemExit) as e:
        cli.parser().parse_args(['bind', '--rounds', '10'])
    assert e.value.code == 2


def test_bind_aio_exe_is_an_argv_with_an_absolute_program(monkeypatch):
    monkeypatch.chdir('/tmp')
    assert bind.aio_command(None) is None
    assert bind.aio_command('old/bin/cyborg-aio --debug') == [
        '/tmp/old/bin/cyborg-aio', '--debug']
    assert bind.aio_command("python -m 'cyborg_aio'") == [
        'python', '-m', 'cyborg_aio']


def test_agent_scale_counts_placement_calls_per_endpoint():
    rp = '0b9e3cf0-64c5-4c4f-a2b0-50a5a0a7a7e1'
    assert agent_scale.endpoint(
        'PUT', '/resource_providers/%s/traits' % rp) == (
        'PUT /resource_providers/{uuid}/traits')
    assert agent_scale.endpoint('PUT', '/traits/CUSTOM_X') == (
        'PUT /traits/{name}')
    assert agent_scale.endpoint(
        'GET', '/resource_providers?required=X&in_tree=%s' % rp) == (
        'GET /resource_providers?in_tree&required')


def test_agent_scale_times_discovery_and_keeps_the_driver(tmp_path):
    spec = tmp_path / 'gpus.yaml'
    hostspec.write_gpus(str(spec), devices=2)
    driver = fake.FakeDriver(str(spec))
    timed = agent_scale.timed_driver(driver)
    assert timed.untimed is driver
    assert timed.name == driver.name
    agent_scale._TASK.rec = {}
    try:
        assert len(timed.discover()) == 2
        assert agent_scale._TASK.rec['discover'] > 0
    finally:
        del agent_scale._TASK.rec


def test_soak_reports_growth_past_its_thresholds():
    first = {'rss_mib': 100.0, 'fds': 20, 'sockets': 8, 'db_files': 10,
             'threads': 40}
    assert soak.growth(first, dict(first, rss_mib=120.0, fds=28,
                                   threads=44)) == []
    broken = soak.growth(first, dict(first, rss_mib=126.1, sockets=17,
                                     threads=45))
    assert broken == ['rss 126.1 > 126.0 MiB', 'sockets 17 > 16',
                      'threads 45 > 44']


def test_prepare_rpc_bench_runs_both_ways_in_process(tmp_path):
    """The in-process prepare RPC bench prepares real fake-driver handles
    both ways and reports each way's figures (not their values).
    """
    out = tmp_path / 'prepare-rpc.json'
    args = cli.parser().parse_args(
        ['prepare-rpc', '--transport', 'inproc', '--batch', '2',
         '--rounds', '2', '--json', str(out)])
    args.run(args)
    doc = json.loads(out.read_text())
    assert doc['transport'] == 'inproc' and doc['rounds'] == 2
    for way in ('per-ARQ prepare', 'prepare_batch'):
        assert doc[way]['caller_cpu_ms_per_arq'] > 0
        assert doc[way]['wall_p50_ms'] > 0


def test_profile_times_only_the_calls_after_each_eviction():
    from cyborg_bench import profile
    evict = profile.Evictor(1)
    order = []

    def op(i):
        order.append(('op', i, evict.buf[64 * 7]))
        evict.buf[64 * 7] = 0          # the next eviction writes it again

    def touch():
        order.append(('evict',))
        evict()
    cpu, wall, stats = profile.measure(op, 3, 2, evict=touch)
    assert order == [('op', 0, 0), ('op', 1, 0),          # warm-up
                     ('evict',), ('op', 2, 1), ('evict',), ('op', 3, 1),
                     ('evict',), ('op', 4, 1)]
    assert wall > 0 and stats is None


def test_side_by_side_requests_replace_the_profiles():
    parser = argparse.ArgumentParser()
    side_by_side.add_arguments(parser)
    full = side_by_side.profile_of(parser.parse_args([]))
    assert full == side_by_side.PROFILES['full']
    more = side_by_side.profile_of(parser.parse_args(
        ['--requests', '1500', '--rounds', '5']))
    assert more == dict(side_by_side.PROFILES['full'], requests=1500)
    quick = side_by_side.profile_of(parser.parse_args(
        ['--quick', '--requests', '60']))
    assert quick['requests'] == 60
    assert quick['sizes'] == side_by_side.PROFILES['quick']['sizes']
    with pytest.raises(SystemExit):
        parser.parse_args(['--requests', '0'])
