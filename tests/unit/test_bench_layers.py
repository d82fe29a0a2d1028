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


def test_segments_follow_a_request_through_the_layers(sqlite_database,
                                                      marked, tmp_path,
                                                      monkeypatch):
    timed = layers.Timed(api_app.setup_app(CONF))
    status, made = _call(timed, 'POST', '/v2/device_profiles', [
        {'name': 'marked', 'groups': [{'resources:FPGA': '1'}]}])
    assert status == 201
    for _ in range(3):
        assert _call(timed, 'GET', '/v2/device_profiles/%s'
                     % made['uuid'])[0] == 200
    medians = timed.medians()
    shown = medians['GET /v2/device_profiles/{name_or_uuid}']
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
    created = medians['POST /v2/device_profiles']
    assert 'commit> .. <commit' in [s for s, _, _ in created]
    # What a worker writes, merged as the runner merges them.
    monkeypatch.setattr(layers, '_TIMED', timed)
    monkeypatch.setattr(layers, 'DUMP_EVERY', 1)
    monkeypatch.setenv(layers.ENV_DIR, str(tmp_path))
    layers.application(webob.Request.blank('/').environ,
                       lambda *a: None)
    (written,) = tmp_path.glob('*.json')
    assert set(json.loads(written.read_text())) == {'segments', 'orders'}
    merged = layers._merged(str(tmp_path)).medians()
    assert merged['GET /v2/device_profiles/{name_or_uuid}'] == shown
    assert '### GET /' in layers.table(merged)


def test_marks_keep_what_the_functions_are(marked):
    # A staticmethod stays one, a classmethod too.
    assert isinstance(stack.Stack.__dict__['_count'], staticmethod)
    assert isinstance(base.Response.__dict__['answer'], classmethod)
    assert callable(db_api._query)
