# SPDX-License-Identifier: Apache-2.0
"""The service in one process for the race checks: the harness's embedded
deployment with the API served over loopback by a threaded server (so
racing clients are real concurrent HTTP requests), the conductor and an
agent on in-process messaging, the real Placement, and Nova's events API
recording every event.
"""

import json
import threading
import time
import uuid

import requests

from cyborg_harness import embedded
from cyborg_harness import nova as harness_nova

NOVA_HEADERS = {'X-Roles': 'member', 'X-Service-Roles': 'service',
                'X-Project-Id': 'p1', 'X-User-Id': 'u1',
                'Content-Type': 'application/json'}
# No identity headers: the noauth API's admin (profiles are admin-only).
ADMIN_HEADERS = {'Content-Type': 'application/json'}


class Stack(embedded.Embedded):

    def __init__(self, placement_service, threads=32):
        self.nova = harness_nova.NovaEvents()
        embedded.point_at('nova', self.nova.url)
        try:
            super().__init__(placement_service.adapter(),
                             host='bind-%s' % uuid.uuid4().hex[:8],
                             stale_after=5.0, rpc_timeout=30)
            self.url = self.serve_api(threads)
        except BaseException:
            self.stop()
            raise
        self._local = threading.local()

    def stop(self):
        super().stop()
        self.nova.down()

    def call(self, method, path, body=None, admin=False):
        """One API request on this thread's own connection, as Nova (or
        as the admin).
        """
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
        """Events by tag, once every tag has one (or at the timeout)."""
        self.nova.wait_for(tags, timeout)
        return self.nova.by_tag()
