# SPDX-License-Identifier: Apache-2.0
"""Prometheus metrics of the API, at GET /metrics ([api] metrics_enabled).

    cyborg_api_requests_total{method, route, status}
    cyborg_api_request_duration_seconds{method, route}   (histogram)
    cyborg_arqs{state}      ARQs by state, read from the database at scrape
                            time (one GROUP BY)
    cyborg_api_database_up  0 when that read failed

`route` is the route template (/v2/accelerator_requests/{uuid}), never the
raw path, so the label set stays small whatever clients send; anything no
controller serves is `unmatched`. /device_profiles and /v2/device_profiles
are the same route.

/metrics is served by the outermost middleware, before authentication, as
Prometheus scrapes usually are: operators restrict it at the proxy or load
balancer. Scrapes are not counted.

Counters live in the worker process. Under gunicorn with several workers
set PROMETHEUS_MULTIPROC_DIR (an empty directory, wiped at each start) to
have every scrape sum all workers; without it a scrape shows the counters of
the worker that answered.
"""

import bisect
import os
import threading
import time

from oslo_log import log
import prometheus_client
from prometheus_client import core
from prometheus_client import multiprocess
import sqlalchemy as sa

from cyborg.db import api as db_api
from cyborg.db import models

LOG = log.getLogger(__name__)

PATH = '/metrics'
# Collection → how its member is named in the template, and its actions.
COLLECTIONS = {
    'accelerator_requests': ('{uuid}', ()),
    'device_profiles': ('{name_or_uuid}', ()),
    'devices': ('{uuid}', ('disable', 'enable')),
    'deployables': ('{uuid}', ('program',)),
    'attributes': ('{uuid}', ()),
}
METHODS = frozenset(('GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE',
                     'OPTIONS'))
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
UNMATCHED = 'unmatched'


def route(path):
    """The route template of a request path."""
    parts = path.strip('/').split('/')
    if '' in parts:
        # '/', or an empty segment ('//'): those that are not.
        parts = [p for p in parts if p]
    if parts and parts[0] == 'v2':
        if len(parts) == 1:
            return '/v2'
        parts = parts[1:]
    elif not parts:
        return '/'
    known = COLLECTIONS.get(parts[0])
    if known is None or len(parts) > 3:
        return UNMATCHED
    template = '/v2/' + parts[0]
    if len(parts) == 1:
        return template
    template += '/' + known[0]
    if len(parts) == 2:
        return template
    return template + '/' + parts[2] if parts[2] in known[1] else UNMATCHED


def _multiprocess_dir():
    return (os.environ.get('PROMETHEUS_MULTIPROC_DIR')
            or os.environ.get('prometheus_multiproc_dir'))


class ArqCollector:
    """ARQs by state, counted in the database when scraped."""

    def describe(self):
        return []

    def collect(self):
        up = core.GaugeMetricFamily(
            'cyborg_api_database_up',
            'Whether the last scrape could read the database.')
        arqs = models.ExtendedAcceleratorRequest.__table__
        try:
            with db_api.reader() as session:
                counts = dict(session.execute(
                    sa.select(arqs.c.state, sa.func.count())
                    .group_by(arqs.c.state)).all())
        except Exception as e:
            LOG.warning('Metrics: cannot count ARQs: %s', e)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        family = core.GaugeMetricFamily('cyborg_arqs', 'ARQs by state.',
                                        labels=('state',))
        for state in models.ARQ_STATES + tuple(
                sorted(set(counts) - set(models.ARQ_STATES))):
            family.add_metric([state], counts.get(state, 0))
        yield family


class ApiMetrics:
    """The API's counters and the registry a scrape reads."""

    def __init__(self):
        self.registry = prometheus_client.CollectorRegistry()
        self.requests = prometheus_client.Counter(
            'cyborg_api_requests', 'API requests answered.',
            ('method', 'route', 'status'), registry=self.registry)
        self.latency = prometheus_client.Histogram(
            'cyborg_api_request_duration_seconds',
            'Time to answer an API request (until the body is ready).',
            ('method', 'route'), buckets=BUCKETS, registry=self.registry)
        self.registry.register(ArqCollector())
        self._children = {}
        self._lock = threading.Lock()
        scrape = self.registry
        if _multiprocess_dir():
            scrape = prometheus_client.CollectorRegistry()
            multiprocess.MultiProcessCollector(scrape)
            scrape.register(ArqCollector())
        self.app = prometheus_client.make_wsgi_app(scrape)

    def observe(self, method, route_, status, seconds):
        key = (method, route_, status)
        cells = self._children.get(key)
        if cells is None:
            with self._lock:
                cells = self._children[key] = _cells(
                    self.requests.labels(method, route_, status),
                    self.latency.labels(method, route_))
        if cells[0] is None:
            cells[1].inc()
            cells[2].observe(seconds)
            return
        cells[1].inc(1)
        cells[2].inc(seconds)
        cells[3][bisect.bisect_left(cells[4], seconds)].inc(1)


def _cells(counter, histogram):
    """(None, counter, histogram), or the values their inc() and observe()
    add to: (True, the count, the sum, the buckets, their upper bounds).

    prometheus_client's inc() and observe() first check, in two calls
    each, that they were given a labelled child (they are, once and for
    all, here), then add to these values; observe() finds the bucket in
    a Python loop. Adding to the values directly is half the calls of
    every request. A prometheus_client whose children lack them is used
    through inc() and observe().
    """
    try:
        return (True, counter._value, histogram._sum,
                tuple(histogram._buckets), tuple(histogram._upper_bounds))
    except AttributeError:
        return (None, counter, histogram)


_DEFAULT = None
_DEFAULT_LOCK = threading.Lock()


def default():
    """The process's metrics, shared by every app built in it."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = ApiMetrics()
        return _DEFAULT


class _Observed:
    """A response body whose status was not known when the app returned
    (start_response called while iterating): recorded when it closes.
    """

    def __init__(self, body, done):
        self._body = body
        self._done = done

    def __iter__(self):
        return iter(self._body)

    def close(self):
        try:
            close = getattr(self._body, 'close', None)
            if close is not None:
                close()
        finally:
            self._done()


class Middleware:
    """Serve /metrics; count and time every other request."""

    def __init__(self, app, metrics=None):
        self.app = app
        self.metrics = metrics or default()

    def __call__(self, environ, start_response):
        path = environ.get('PATH_INFO') or '/'
        if path == PATH:
            return self.metrics.app(environ, start_response)
        started = time.perf_counter()
        status = []

        def recording_start_response(status_line, headers, exc_info=None):
            status.append(status_line)
            return start_response(status_line, headers, exc_info)

        method = environ.get('REQUEST_METHOD', 'GET')
        if method not in METHODS:
            method = 'OTHER'

        def done():
            self.metrics.observe(method, route(path),
                                 status[-1][:3] if status else '500',
                                 time.perf_counter() - started)

        try:
            body = self.app(environ, recording_start_response)
        except BaseException:
            done()
            raise
        if status:
            done()
            return body
        return _Observed(body, done)
