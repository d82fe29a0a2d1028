"""The service in one process for the race checks: the API served over
loopback by a threaded server (so racing clients are real concurrent HTTP
requests), the conductor and an agent on in-process messaging, the real
Placement, and a stand-in for Nova that records every event."""

import json
import threading
import time

import requests

from cyborg.api import app as api_app
from cyborg.common import wsgi_server
from cyborg.conf import CONF
from cyborg.drivers import fake
from tests.conductor import test_binding

NOVA_HEADERS = {'X-Roles': 'member', 'X-Service-Roles': 'service',
                'X-Project-Id': 'p1', 'X-User-Id': 'u1',
                'Content-Type': 'application/json'}
# No identity headers: the noauth API's admin (profiles are admin-only).
ADMIN_HEADERS = {'Content-Type': 'application/json'}


class EventRecorder:
    """Nova's /os-server-external-events: keeps every event it is sent."""

    def __init__(self):
        self.events = []
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        body = json.loads(environ['wsgi.input'].read(
            int(environ.get('CONTENT_LENGTH') or 0)))
        with self._lock:
            self.events.extend(body['events'])
        start_response('200 OK', [('Content-Type', 'application/json')])
        return [json.dumps({'events': [dict(e, code=200)
                                       for e in body['events']]}).encode()]

    def by_tag(self):
        with self._lock:
            found = {}
            for event in self.events:
                found.setdefault(event['tag'], []).append(event)
            return found


class Stack:

    def __init__(self, placement_service, threads=32):
        self.nova = EventRecorder()
        self.nova_server = wsgi_server.ThreadedServer('nova', self.nova)
        self.nova_server.start()
        CONF.set_override('auth_type', 'none', group='nova')
        CONF.set_override('endpoint_override', self.nova_server.url,
                          group='nova')
        # Agent, conductor and binder as the conductor tests wire them;
        # this stack adds the real HTTP front end.
        self.core = test_binding.Stack(
            placement_service, self.nova,
            fake.FakeDriver(fake.default_host_spec()), stale_after=5.0,
            rpc_timeout=30)
        self.host = self.core.host
        self.api_server = wsgi_server.ThreadedServer(
            'api', api_app.setup_app(), threads=threads)
        self.api_server.start()
        self.url = self.api_server.url + '/v2'
        self._local = threading.local()

    def stop(self):
        self.api_server.stop()
        self.core.stop()
        self.nova_server.stop()

    def call(self, method, path, body=None, admin=False):
        """One API request on this thread's own connection, as Nova (or
        as the admin)."""
        session = getattr(self._local, 'session', None)
        if session is None:
            session = self._local.session = requests.Session()
        headers = ADMIN_HEADERS if admin else NOVA_HEADERS
        return session.request(method, self.url + path, headers=headers,
                               data=None if body is None
                               else json.dumps(body), timeout=60)

    def rp(self, address):
        deps = self.call('GET', '/deployables',
                         admin=True).json()['deployables']
        return next(d['rp_uuid'] for d in deps if d['name'] == address)

    def profile(self, name, groups):
        r = self.call('POST', '/device_profiles',
                      [{'name': name, 'groups': groups}], admin=True)
        assert r.status_code == 201, r.text

    def create_arqs(self, profile):
        r = self.call('POST', '/accelerator_requests',
                      {'device_profile_name': profile})
        assert r.status_code == 201, r.text
        return r.json()['arqs']

    def bind(self, arq_uuid, instance, rp):
        return self.call('PATCH', '/accelerator_requests', {arq_uuid: [
            {'op': 'add', 'path': '/hostname', 'value': self.host},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance}]})

    def arq(self, arq_uuid):
        return self.call('GET', '/accelerator_requests/%s' % arq_uuid).json()

    def wait_resolved(self, arq_uuids, timeout=60):
        """The ARQs once none is still binding, by uuid."""
        deadline = time.time() + timeout
        while True:
            arqs = {u: self.arq(u) for u in arq_uuids}
            if all(a['state'] not in ('Initial', 'BindStarted')
                   for a in arqs.values()) or time.time() > deadline:
                return arqs
            time.sleep(0.1)

    def wait_events(self, tags, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = self.nova.by_tag()
            if all(t in found for t in tags):
                break
            time.sleep(0.1)
        return self.nova.by_tag()
