# SPDX-License-Identifier: Apache-2.0
"""cyborg-bench layers: the marks it puts on the API's layers, the
segments it keeps per request kind, and what the workers write for the
runner to merge.
"""

import json

import pytest
import webob

from cyborg.api import app as api_app
from cyborg.api.controllers import base
from cyborg.api import stack
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg_bench import layers


@pytest.fixture
def marked():
    originals = [layers._owner(m, p) for m, p, _ in layers.MARKS]
    before = [layers._attribute(o, n) for o, n in originals]
    undo = layers.install()
    yield
    undo()
    assert [layers._attribute(o, n) for o, n in originals] == before


def _call(app, method, path, body=None):
    request = webob.Request.blank(path, method=method)
    if body is not None:
        request.json_body = body
    response = request.get_response(app)
    return response.status_int, response.json_body if response.body \
        else None


def _served(name, gets):
    """What uWSGI serves (the timed app, made at its first request) asked
    to create profile `name` and then to GET it `gets` times: (the
    profile, the app's answer at DUMP_PATH: what it kept, untimed).
    """
    app = layers._timed(lambda: api_app.setup_app(CONF))
    status, made = _call(app, 'POST', '/v2/device_profiles', [
        {'name': name, 'groups': [{'resources:FPGA': '1'}]}])
    assert status == 201
    for _ in range(gets):
        assert _call(app, 'GET', '/v2/device_profiles/%s'
                     % made['uuid']) == (200, {'device_profile': made})
    status, kept = _call(app, 'GET', layers.DUMP_PATH)
    assert status == 200
    return made, kept


def test_segments_follow_a_request_through_the_layers(sqlite_database,
                                                      marked):
    _, kept = _served('marked', 3)
    assert set(kept) == {'pid', 'segments', 'orders', 'spans'}
    # Merged as the runner merges the workers' answers.
    merged = layers.Timed(None)
    merged.merge(json.loads(json.dumps(kept)))
    medians = merged.medians()
    assert set(medians) == {layers.CREATE, layers.SHOW}
    shown = medians[layers.SHOW]
    names = [segment for segment, _, _ in shown]
    # In the order a request passes them, the whole call last.
    assert names[0] == 'start .. request id>'
    assert names[-1] == 'TOTAL'
    assert 'statement> .. <statement' in names
    assert names.index('find_controller> .. <find_controller') < \
        names.index('statement> .. <statement')
    assert all(count == 3 for _, _, count in shown)
    total = dict((s, m) for s, m, _ in shown)['TOTAL']
    assert 0 < max(m for s, m, _ in shown if s != 'TOTAL') <= total
    # A lone writer gives its connection back inside the commit's mark.
    assert any(s.startswith('commit> .. ')
               for s, _, _ in medians[layers.CREATE])
    # Each call's span, in the order of the calls.
    spans = merged.spans[layers.SHOW]
    assert len(spans) == 3 and spans == sorted(spans)
    assert all(called < returned for called, returned in spans)
    assert '### %s' % layers.SHOW in layers.table(medians)


def test_client_requests_are_matched_with_the_calls_that_answered():
    spans = {layers.NOOP: [[110, 150], [210, 260], [400, 420]]}
    # Sent at 100, read at 190: the call 110..150 answered it; the call
    # 400..420 answered no request of the client's (another client's).
    noted = {layers.NOOP: [(100, 190), (200, 300)],
             layers.SHOW: [(500, 600)]}
    figures = layers.matched(noted, spans)
    assert list(figures) == [layers.NOOP]
    before, inside, after, whole, count = figures[layers.NOOP]
    assert count == 2
    # Medians in µs of (10, 10) ns before, (40, 50) in, (40, 40) after.
    assert (before, inside, after, whole) == (0.01, 0.045, 0.04, 0.095)
    assert '| floor | GET / | 0.0 | 0.0 | 0.0 | 0.1 | 2 |' in \
        layers.outside_table([('floor', figures)])


def test_marks_keep_what_the_functions_are(marked):
    # A staticmethod stays one, a classmethod too.
    assert isinstance(stack.Stack.__dict__['_count'], staticmethod)
    assert isinstance(base.Response.__dict__['answer'], classmethod)
    assert callable(db_api._query)


def test_the_floor_spins_as_long_as_asked(monkeypatch):
    monkeypatch.setenv(layers.ENV_SPIN, '200')
    app = layers._timed(layers._floor)
    assert _call(app, 'GET', '/') == (200, {})
    status, kept = _call(app, 'GET', layers.DUMP_PATH)
    [(called, returned)] = kept['spans'][layers.NOOP]
    assert returned - called >= 200000
    monkeypatch.delenv(layers.ENV_SPIN)
    from cyborg.wsgi import floor
    assert layers._floor() is floor.application


def test_a_call_only_notes_its_readings_until_asked():
    # Between the application's return and the server's write nothing
    # is made of them: they become segments when the worker is asked.
    from cyborg.wsgi import floor
    timed = layers.Timed(floor.application)
    assert _call(timed, 'GET', '/') == (200, {})
    assert not timed.segments and not timed.spans
    kept = timed.kept()
    assert list(kept['spans']) == [layers.NOOP]
    assert kept['orders'][layers.NOOP] == ['start .. end']
    assert len(kept['segments'][layers.NOOP]['TOTAL']) == 1


def test_replay_calls_every_nth_get_again_on_the_environ_it_came_with(
        sqlite_database, marked, monkeypatch):
    monkeypatch.setenv(layers.ENV_REPLAY, '2')
    # Each GET still answers the profile (checked in _served()).
    _, kept = _served('replayed', 4)
    medians = layers.Timed(None)
    medians.merge(json.loads(json.dumps(kept)))
    medians = medians.medians()
    again = '%s /v2/device_profiles/{name_or_uuid}' % layers.AGAIN
    # The POST is no GET; the 2nd and 4th GET are called again, each
    # REPLAYS times, the first REPLAYS_WARMING of them not kept.
    assert set(medians) == {layers.CREATE, layers.SHOW, again}
    kept_again = (layers.REPLAYS - layers.REPLAYS_WARMING) * 2
    assert dict((s, n) for s, _, n in medians[again])['TOTAL'] == kept_again
    assert dict((s, n) for s, _, n in medians[layers.SHOW])['TOTAL'] == 4
    # Called again whole: its policy checked, its statement run.
    assert 'statement> .. <statement' in [s for s, _, _ in medians[again]]
    assert 'policy> .. <policy' in [s for s, _, _ in medians[again]]
