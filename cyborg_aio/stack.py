# SPDX-License-Identifier: Apache-2.0
"""EmbeddedStack: the whole service in one process, for one machine.

State lives under one directory: cyborg.sqlite (our database) and
placement.sqlite (Placement's). The API runs with auth_strategy=noauth,
Placement with noauth2; both are served on loopback by threaded WSGI
servers. The conductor and an agent (fake driver by default) talk over
oslo.messaging's in-process transport. Nova's side is nova_cyborg_client:
its external events API is served here too (unless nova_endpoint names
another Nova), and [nova] points at it.
"""

import os
import sys
import time

from oslo_log import log
import yaml

from cyborg.common import ksa
from cyborg.common import wsgi_server
from cyborg.conf import CONF
from cyborg.placement import client as placement_client
from cyborg_aio import placement
from nova_cyborg_client import compute_node
from nova_cyborg_client import placement as nova_placement
from nova_cyborg_client import scheduler

LOG = log.getLogger(__name__)

LOOPBACK = '127.0.0.1'


def default_state_dir():
    data_home = (os.environ.get('XDG_DATA_HOME')
                 or os.path.join(os.path.expanduser('~'), '.local', 'share'))
    return os.path.join(data_home, 'cyborg-aio')


class EmbeddedStack:
    """API, Placement, conductor, agent (and Nova's events API) in this
    process.
    """

    def __init__(self, state_dir, port=6666, placement_port=8778,
                 host_spec=None, conf=CONF, nova_port=8774,
                 nova_endpoint=None, metrics_port=None,
                 auth_strategy='noauth'):
        if auth_strategy not in ('noauth', 'keystone'):
            raise ValueError('auth_strategy: noauth or keystone, not %r'
                             % auth_strategy)
        self.auth_strategy = auth_strategy
        self.state_dir = os.path.abspath(state_dir)
        self.port = port
        self.placement_port = placement_port
        # Nova's events API: served here (nova_port) unless the events go
        # to another Nova (nova_endpoint, e.g. nova_cyborg_client.flow's).
        self.nova_port = nova_port
        self.nova_endpoint = nova_endpoint
        self.nova_receiver = None
        self.metrics_port = metrics_port    # the agent's /metrics; None: off
        self.host_spec = os.path.abspath(host_spec) if host_spec else None
        self.conf = conf
        self.compute_rp_uuid = None
        self._servers = []
        self._services = []
        self.agent = None
        self.fake_gpus = None
        self._stop_requested = False

    # -- configuration --------------------------------------------------

    def _configure(self):
        os.makedirs(self.state_dir, exist_ok=True)
        conf = self.conf
        conf.set_override('state_path', self.state_dir)
        conf.set_override('auth_strategy', self.auth_strategy, group='api')
        conf.set_override('connection', 'sqlite:///%s' % os.path.join(
            self.state_dir, 'cyborg.sqlite'), group='database')
        if self.host_spec:
            conf.set_override('host_spec', self.host_spec,
                              group='fake_driver')
            self._fake_nvidia_gpus()
        # Conductor and agent talk in-process (cyborg.rpc.inproc).
        conf.set_override('transport_url', 'inproc://')

    def _fake_nvidia_gpus(self):
        """A host spec with an `nvidia` section: the real nvidia driver
        over a fake NVML and sysfs tree kept in the state directory (MIG
        instances survive a restart, as on hardware).
        """
        with open(self.host_spec) as f:
            spec = yaml.safe_load(f) or {}
        if not spec.get('nvidia'):
            return
        from cyborg_emulators.nvidia import fake_sysfs

        self.fake_gpus = fake_sysfs.FakeGpuHost(
            spec['nvidia'], root=os.path.join(self.state_dir, 'fake-sysfs'),
            state_file=os.path.join(self.state_dir, 'fake-nvml.json'))
        self.fake_gpus.install()
        conf = self.conf
        conf.set_override('enabled_drivers', ['nvidia'] + (
            ['fake'] if spec.get('devices') else []), group='agent')
        conf.set_override('sysfs_root', self.fake_gpus.root, group='nvidia')
        conf.set_override('proc_root', self.fake_gpus.proc_root,
                          group='nvidia')
        conf.set_override('geometry_cache', os.path.join(
            self.state_dir, 'nvidia-geometry.json'), group='nvidia')
        # Safe on a fake tree; lets the demo hand a whole GPU to a VM.
        conf.set_override('rebind_for_passthrough', True, group='nvidia')
        # MPS shares: the fake control program, one daemon per GPU here.
        conf.set_override('mps_control_command', '%s -m %s' % (
            sys.executable, 'cyborg_emulators.nvidia.fake_mps_control'),
            group='nvidia')
        conf.set_override('mps_root', os.path.join(self.state_dir, 'mps'),
                          group='nvidia')
        # The nvidia driver reports these GPUs: Cyborg-style PGPU/VGPU
        # profiles are translated (a config file may still say off).
        conf.set_default('gpu_profile_compat', 'nvidia', group='api')

    def _point_at_nova(self):
        """[nova] → the events API of nova_cyborg_client, served in this
        process, or the Nova at nova_endpoint.
        """
        url = self.nova_endpoint
        if url is None:
            from nova_cyborg_client import events as nova_events
            self.nova_receiver = nova_events.Receiver(
                self.conf if self._keystone else None)
            url = self._start_server('nova-events', self.nova_receiver.app,
                                     self.nova_port).url
        self._point_at('nova', url)

    def _point_at_placement(self, url):
        self._point_at('placement', url)

    @property
    def _keystone(self):
        return self.auth_strategy == 'keystone'

    def _point_at(self, group, url):
        """[group] → url; without Keystone, as the noauth2 admin."""
        if not self._keystone:
            self.conf.set_override('auth_type', 'none', group=group)
        self.conf.set_override('endpoint_override', url, group=group)

    # -- life cycle -----------------------------------------------------

    def start(self):
        """Migrate, start Placement, register the compute node, start the
        conductor and the agent (one report done), then the API. On return
        every server is listening.
        """
        from cyborg.api import app as api_app
        from cyborg.db import api as db_api
        from cyborg.db import migration

        self._configure()
        db_api.configure()
        migration.upgrade()
        LOG.info('Database %s at revision %s', self.conf.database.connection,
                 migration.version())

        try:
            pconf = placement.build_conf(
                self.state_dir, auth_strategy='keystone' if self._keystone
                else 'noauth2', config_files=self.conf.config_file)
            self._start_server('placement', placement.load_app(pconf),
                               self.placement_port)
            self._point_at_placement(self.placement_url)
            # The name the agent looks its compute node up by.
            node = self.conf.agent.resource_provider_name or self.conf.host
            self.compute_rp_uuid, _ = compute_node.ensure(
                nova_placement.PlacementClient(adapter=ksa.get_adapter(
                    'placement', self.conf, raise_exc=False,
                    default_microversion=scheduler.PLACEMENT_MICROVERSION)),
                node)
            LOG.info('Compute node resource provider %s (%s)', node,
                     self.compute_rp_uuid)
            self._point_at_nova()
            self._start_services()
            self._start_server('cyborg-api', api_app.setup_app(self.conf),
                               self.port)
        except BaseException:
            self.stop()
            raise

    def _start_services(self):
        """The conductor and this host's agent (fake driver by default),
        with one report done before the API opens: devices are visible
        as soon as the ready line is printed.
        """
        from cyborg.agent import service as agent_service
        from cyborg.conductor import service as conductor_service

        conductor = conductor_service.ConductorService()
        conductor.start()
        self._services.append(conductor)
        agent = agent_service.AgentService()
        self.agent = agent.agent
        self._services.append(agent)
        agent.start(first_report=True)
        if self.metrics_port is not None:
            from cyborg.agent import metrics
            self._start_server('agent-metrics', metrics.make_app(self.agent),
                               self.metrics_port)

    def _start_server(self, name, app, port):
        server = wsgi_server.ThreadedServer(name, app, LOOPBACK, port)
        server.start()
        self._servers.append(server)
        return server

    def _server(self, name):
        for server in self._servers:
            if server.name == name:
                return server
        raise RuntimeError('%s is not running' % name)

    @property
    def placement_url(self):
        return self._server('placement').url

    @property
    def metrics_url(self):
        return self._server('agent-metrics').url + '/metrics'

    @property
    def nova_url(self):
        """The served Nova events API (None with nova_endpoint)."""
        return self._server('nova-events').url if self.nova_receiver \
            else None

    @property
    def api_url(self):
        return self._server('cyborg-api').url + '/v2'

    def placement_client(self):
        """A Placement client for the embedded Placement ([placement]
        points at it once start() has started it).
        """
        return placement_client.PlacementClient(
            ksa.get_adapter('placement', self.conf))

    def request_stop(self):
        """Make wait() return; safe to call from a signal handler (a plain
        assignment: Event.set() there can deadlock against the main
        thread's own wait on the same lock).
        """
        self._stop_requested = True

    @property
    def stop_requested(self):
        """True once request_stop() was called (a stop is under way)."""
        return self._stop_requested

    def wait(self, poll=0.2):
        """Block until request_stop() is called or a server thread dies."""
        while not self._stop_requested:
            time.sleep(poll)
            dead = [s.name for s in self._servers if not s.is_alive()]
            if dead:
                LOG.error('Server thread(s) ended: %s', ', '.join(dead))
                return False
        return True

    def stop(self):
        """Stop the servers (API first) and release the database."""
        from cyborg.db import api as db_api
        from cyborg import rpc

        if self._servers and self._servers[-1].name == 'cyborg-api':
            self._servers.pop().stop()
        # No new agent report pass, and the one running finishes while the
        # conductor it talks to still answers.
        if self.agent is not None:
            self.agent.stop()
        # Then the conductor: its in-flight binds still need the agent's RPC
        # server to answer their prepare() calls.
        while self._services:
            self._services.pop(0).stop()
        rpc.cleanup()
        while self._servers:
            self._servers.pop().stop()
        db_api.dispose()
        if self.fake_gpus is not None:
            self.fake_gpus.uninstall()
            self.fake_gpus = None
