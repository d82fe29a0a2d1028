# SPDX-License-Identifier: Apache-2.0
"""A CyborgFixture whose Cyborg is ours, for Nova's functional tests.

Nova's CyborgFixture replaces the methods of
nova.accelerator.cyborg._CyborgClient with fakes. This one leaves the
client's code alone: its adapter points at our real API (service.py, a
process of its own) and each method is only spied on (the same mock_*
attributes, so the tests' call assertions still hold). Our conductor binds
the ARQs and sends `accelerator-request-bound` to the test's Nova API;
our agents' RPC servers prepare the handles.

What is adapted, and why:
- The tests create the device providers in Placement themselves
  (FakeDevice<i>, FPGA, CUSTOM_FAKE_DEVICE, under each compute node). On
  each Cyborg call the fixture reads them back and has each host's
  agent report them, so our database holds matching deployables and
  attach handles (an agent reporting its own would put a second set of
  providers next to the test's).
- fake_get_arqs_for_instance, which the tests call to check the ARQs,
  asks our API.
"""

import json
import logging
import os
import subprocess
import sys
from unittest import mock

import fixtures
import requests

from nova.accelerator import cyborg as nova_cyborg
from nova.tests.fixtures import cyborg as nova_cyborg_fixture
from oslo_utils.fixture import uuidsentinel

from tools.nova_functional import bridge
from tools.nova_functional import seeding

# Under nova.: the tests' log capture keeps it with Nova's own lines.
LOG = logging.getLogger('nova.tests.real_cyborg')
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
PLACEMENT_HEADERS = {'X-Auth-Token': 'admin',
                     'OpenStack-API-Version': 'placement 1.20'}
# Nova's stubbed Keystone context: who our conductor's events come from.
# It makes the user named admin an admin (Nova's context_is_admin, which a
# real service user passes by its admin role): only such a context sees
# every project's instances, as the events API needs.
NOVA_CALLER = {'HTTP_X_AUTH_USER': 'admin',
               'HTTP_X_AUTH_PROJECT_ID': 'service',
               'HTTP_X_ROLES': 'admin,service'}
# Nova's CyborgFixture mocks, by attribute: the _CyborgClient method.
SPIED = {
    'mock_get_dp': '_get_device_profile_list',
    'mock_create_arqs': 'create_arqs',
    'mock_bind_arqs': 'bind_arqs',
    'mock_get_arqs': 'get_arqs_for_instance',
    'mock_del_arqs': 'delete_arqs_for_instance',
    'mock_get_arq_by_uuid': 'get_arq_by_uuid',
    'mock_get_arq_device_rp_uuid': 'get_arq_device_rp_uuid',
    'mock_create_arq_and_match_rp':
        'create_arqs_and_match_resource_providers',
    'mock_fake_delete_arqs_by_uuid': 'delete_arqs_by_uuid',
}


class RealCyborgFixture(nova_cyborg_fixture.CyborgFixture):
    """Nova's CyborgFixture interface, our service behind it."""

    current = None      # the running one (fake_get_arqs_for_instance)
    log_dir = None      # where each test's service log goes, if set
    started = 0         # services started so far (numbers the logs)

    def setUp(self):
        fixtures.Fixture.setUp(self)    # not the parent's fakes
        self._reported = {}
        self._generations = None
        self._start_bridges()
        self._start_service()
        self.http = requests.Session()
        for profile in seeding.device_profiles(self.trait):
            resp = self.http.post(self.api_url + '/device_profiles',
                                  json=[profile])
            if resp.status_code != 201:
                raise RuntimeError('device profile %s: %s %s' % (
                    profile['name'], resp.status_code, resp.text))
        self.useFixture(fixtures.MockPatch(
            'nova.service_auth.get_service_user_token_auth_plugin'))
        self.useFixture(fixtures.MockPatch(
            'nova.utils.get_sdk_adapter', side_effect=self._adapter))
        for attr, method in SPIED.items():
            setattr(self, attr, self.useFixture(fixtures.MockPatch(
                'nova.accelerator.cyborg._CyborgClient.' + method,
                side_effect=self._spy(method))).mock)
        RealCyborgFixture.current = self
        self.addCleanup(setattr, RealCyborgFixture, 'current', None)

    # -- the service and its view of the test's Placement and Nova ------

    def _start_bridges(self):
        placement = [key for key, script in bridge.intercepts().items()
                     if script == '/placement']
        if len(placement) != 1:
            raise RuntimeError('no single Placement intercept: %s'
                               % bridge.intercepts())
        self.placement = bridge.Bridge(*placement[0]).start()
        self.addCleanup(self.placement.stop)
        self.nova = bridge.Bridge(str(uuidsentinel.osapi_host), 80,
                                  headers=NOVA_CALLER).start()
        self.addCleanup(self.nova.stop)

    def _start_service(self):
        state = self.useFixture(fixtures.TempDir()).path
        RealCyborgFixture.started += 1
        log_path = os.path.join(self.log_dir or state, 'service-%03d.log'
                                % RealCyborgFixture.started)
        self._log = open(log_path, 'w')
        self.addCleanup(self._log.close)
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'tools.nova_functional.service',
             '--state-dir', state,
             '--placement-url', self.placement.url,
             '--nova-url', self.nova.url + '/v2.1'],
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, text=True)
        self.addCleanup(self._stop_service)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError('our service did not start; see %s'
                               % log_path)
        self.api_url = json.loads(line)['api'] + '/v2'

    def _stop_service(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _ask(self, command):
        self.proc.stdin.write(json.dumps(command) + '\n')
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        if 'error' in answer:
            raise RuntimeError('our service: %s' % answer['error'])
        return answer

    def _placement_get(self, path):
        resp = self.http.get(self.placement.url + path,
                             headers=PLACEMENT_HEADERS)
        resp.raise_for_status()
        return resp.json()

    def sync_devices(self):
        """Each host's agent reports the providers the test created.

        Called before every Cyborg call: one listing of the providers
        with their generations (which any inventory change bumps) tells
        whether anything changed since the last report; only then are
        their roots and inventories read.
        """
        listing = self._placement_get('/resource_providers?required=%s'
                                      % self.trait)
        generations = sorted((rp['uuid'], rp['generation'])
                             for rp in listing['resource_providers'])
        if generations == self._generations:
            return
        seeded = seeding.seeded_devices(self._placement_get, self.trait)
        for host, devices in seeded.items():
            if self._reported.get(host) != devices:
                self._ask({'op': 'report', 'host': host,
                           'devices': devices})
                self._reported[host] = devices
        self._generations = generations

    # -- Nova's side ----------------------------------------------------

    def _adapter(self, service_type, *args, **kwargs):
        if service_type != 'accelerator':
            return mock.MagicMock()
        self.sync_devices()
        return _Adapter(self.api_url)

    @staticmethod
    def _spy(method):
        real = getattr(nova_cyborg._CyborgClient, method)

        def call(*args, **kwargs):
            # The class attribute is a mock: calls reach it without self.
            return real(nova_cyborg._CyborgClient(None), *args, **kwargs)
        return call

    @staticmethod
    def fake_get_arqs_for_instance(instance_uuid, only_resolved=False):
        """The ARQs our API holds for the instance (the tests check them
        through this name).
        """
        self = RealCyborgFixture.current
        resp = self.http.get(self.api_url + '/accelerator_requests',
                             params={'instance': instance_uuid})
        resp.raise_for_status()
        return resp.json()['arqs']


class _Adapter:
    """What nova.utils.get_sdk_adapter returns, as _CyborgClient uses it:
    get/post/patch/delete on paths under the accelerator endpoint.
    """

    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.http = requests.Session()

    def __getattr__(self, method):
        if method not in ('get', 'post', 'put', 'patch', 'delete'):
            raise AttributeError(method)

        def call(url, **kwargs):
            kwargs.pop('microversion', None)
            resp = self.http.request(method.upper(), self.endpoint + url,
                                     **kwargs)
            LOG.info('Cyborg API %s %s %s: %s %s', method.upper(), url,
                     kwargs.get('params') or '', resp.status_code,
                     resp.text[:300] if resp.status_code >= 400 else '')
            return resp
        return call
