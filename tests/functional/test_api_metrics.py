# SPDX-License-Identifier: Apache-2.0
"""GET /metrics on the API: no token needed, request counters by route
template and status, latency histogram, ARQs by state from the database."""

import uuid

from prometheus_client import parser
import pytest

from cyborg.api import app as api_app
from cyborg.api import metrics
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import models
from tests import wsgi_calls

DP_BODY = [{'name': 'metrics-dp', 'groups': [
    {'resources:CUSTOM_ACCELERATOR_GPU': '1'}]}]


@pytest.fixture
def api(sqlite_database):
    return api_app.setup_app(CONF)


_call = wsgi_calls.call


def _scrape(app):
    response = _call(app, 'GET', '/metrics')
    assert response.status_int == 200, response.text
    assert response.content_type == 'text/plain'
    return {f.name: [(s.name, s.labels, s.value) for s in f.samples]
            for f in parser.text_string_to_metric_families(response.text)}


def _value(families, family, sample=None, **labels):
    found = [v for n, lab, v in families.get(family, [])
             if (sample is None or n == sample)
             and all(lab.get(k) == want for k, want in labels.items())]
    assert len(found) <= 1, (family, labels, found)
    return found[0] if found else 0


def test_route_templates():
    assert metrics.route('/') == '/'
    assert metrics.route('/v2') == '/v2'
    assert metrics.route('/v2/') == '/v2'
    assert metrics.route('/v2/accelerator_requests') == \
        '/v2/accelerator_requests'
    assert metrics.route('/v2/accelerator_requests/%s' % uuid.uuid4()) == \
        '/v2/accelerator_requests/{uuid}'
    assert metrics.route('/device_profiles/my-profile') == \
        '/v2/device_profiles/{name_or_uuid}'
    assert metrics.route('/v2/devices/%s/disable' % uuid.uuid4()) == \
        '/v2/devices/{uuid}/disable'
    assert metrics.route('/v2/deployables/x/program') == \
        '/v2/deployables/{uuid}/program'
    assert metrics.route('/v2/devices/x/program') == 'unmatched'
    assert metrics.route('/v2/nothing/here') == 'unmatched'
    assert metrics.route('/v2/devices/a/disable/b') == 'unmatched'


def test_metrics_needs_no_token(sqlite_database):
    CONF.set_override('auth_strategy', 'keystone', group='api')
    CONF.set_override('www_authenticate_uri',
                      'http://keystone.example.org/identity',
                      group='keystone_authtoken')
    app = api_app.setup_app(CONF)
    before = _scrape(app)
    assert _call(app, 'GET', '/v2/device_profiles').status_int == 401
    after = _scrape(app)
    labels = dict(method='GET', route='/v2/device_profiles', status='401')
    assert _value(after, 'cyborg_api_requests', **labels) == \
        _value(before, 'cyborg_api_requests', **labels) + 1


def test_request_counters_and_latency(api):
    missing = dict(method='GET', route='/v2/accelerator_requests/{uuid}',
                   status='404')
    created = dict(method='POST', route='/v2/device_profiles',
                   status='201')
    timed = dict(method='GET', route='/v2/accelerator_requests/{uuid}')
    count = 'cyborg_api_request_duration_seconds_count'
    before = _scrape(api)
    for _ in range(2):
        assert _call(api, 'GET', '/v2/accelerator_requests/%s'
                     % uuid.uuid4()).status_int == 404
    assert _call(api, 'POST', '/v2/device_profiles',
                 DP_BODY).status_int == 201
    after = _scrape(api)
    assert _value(after, 'cyborg_api_requests', **missing) == \
        _value(before, 'cyborg_api_requests', **missing) + 2
    assert _value(after, 'cyborg_api_requests', **created) == \
        _value(before, 'cyborg_api_requests', **created) + 1
    assert _value(after, 'cyborg_api_request_duration_seconds', count,
                  **timed) == _value(before,
                                     'cyborg_api_request_duration_seconds',
                                     count, **timed) + 2
    # Scrapes are not counted; raw paths never become labels.
    routes = {lab['route'] for _, lab, _ in after['cyborg_api_requests']}
    assert '/metrics' not in routes
    assert all('-' not in r for r in routes)


def test_arqs_by_state(api):
    with db_api.writer() as session:
        dp = session.execute(models.DeviceProfile.__table__.insert().values(
            uuid=str(uuid.uuid4()), name='dp', profile_json='{}')
        ).inserted_primary_key[0]
        for state in ('Initial', 'Initial', 'Bound', 'BindFailed',
                      'Initial'):
            session.execute(
                models.ExtendedAcceleratorRequest.__table__.insert().values(
                    uuid=str(uuid.uuid4()), state=state,
                    device_profile_id=dp))
    families = _scrape(api)
    counts = {lab['state']: v for _, lab, v in families['cyborg_arqs']}
    assert counts == dict({s: 0 for s in models.ARQ_STATES},
                          Initial=3, Bound=1, BindFailed=1)
    assert _value(families, 'cyborg_api_database_up') == 1


def test_database_down_is_reported(api, monkeypatch):
    def broken():
        raise RuntimeError('no database')
    monkeypatch.setattr(db_api, 'reader', broken)
    families = _scrape(api)
    assert _value(families, 'cyborg_api_database_up') == 0
    assert 'cyborg_arqs' not in families


def test_metrics_can_be_turned_off(sqlite_database):
    CONF.set_override('metrics_enabled', False, group='api')
    app = api_app.setup_app(CONF)
    assert not isinstance(app, metrics.Middleware)
    assert _call(app, 'GET', '/metrics').status_int == 404


def test_status_known_only_while_iterating():
    """An app that calls start_response lazily is still counted."""
    def lazy(environ, start_response):
        yield b''
        start_response('204 No Content', [])

    observed = metrics.ApiMetrics()
    app = metrics.Middleware(lazy, observed)
    body = app({'PATH_INFO': '/v2/devices', 'REQUEST_METHOD': 'GET'},
               lambda *a: None)
    list(body)
    body.close()
    assert observed.registry.get_sample_value(
        'cyborg_api_requests_total',
        {'method': 'GET', 'route': '/v2/devices', 'status': '204'}) == 1


def test_requests_add_up_as_through_prometheus_client():
    """The counts and durations added to prometheus_client's values
    directly (metrics._cells) are what its inc() and observe() add.
    """
    direct, public = metrics.ApiMetrics(), metrics.ApiMetrics()
    for status in ('200', '404'):
        # Used through inc() and observe(), as _cells falls back to.
        public._children[('GET', '/v2', status)] = (
            None, public.requests.labels('GET', '/v2', status),
            public.latency.labels('GET', '/v2'))
    seconds = [0.0, 0.001, 0.005, 0.0050001, 0.3, 0.5, 9.99, 10.0, 11.0,
               float('inf'), 0.01, 0.025, 0.1]
    for i, s in enumerate(seconds):
        for api in (direct, public):
            api.observe('GET', '/v2', '200' if i % 3 else '404', s)
    assert direct._children[('GET', '/v2', '200')][0] is True

    def samples(api):
        return sorted((s.name, sorted(s.labels.items()), s.value)
                      for m in (api.requests, api.latency)
                      for f in m.collect() for s in f.samples
                      if not s.name.endswith('_created'))
    assert samples(direct) == samples(public)
