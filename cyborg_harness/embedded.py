# SPDX-License-Identifier: Apache-2.0
"""The service wired in this process: a conductor (its binder and RPC
server), agents (their RPC servers; reports when asked) and the API app,
over the oslo.messaging transport cyborg's CONF names (fake:// in tests,
inproc:// in cyborg-aio). Pieces stay reachable: stop the conductor and
start another, replace an agent, drive the binder by hand.

cyborg-aio's own wiring (cyborg_aio.stack) serves the all-in-one; this
one is for checks that reach in.
"""

import json
import uuid


def point_at(group, url, conf=None):
    """[group] endpoint_override = url, no auth ('nova', 'placement')."""
    from cyborg.conf import CONF

    conf = conf or CONF
    conf.set_override('auth_type', 'none', group=group)
    conf.set_override('endpoint_override', url, group=group)


class Conductor:
    """A conductor: the binder and the RPC server that feeds it.

    bind=False leaves the binder out (no sweep of the database): a
    conductor that only stores reports, for measuring them alone.
    """

    def __init__(self, notifier=None, sweep_interval=0.2, stale_after=1.0,
                 manager=None, name=None, bind=True):
        from cyborg.agent import rpcapi as agent_rpcapi
        from cyborg.conductor import binder as conductor_binder
        from cyborg.conductor import manager as conductor_manager
        from cyborg import rpc

        self.binder = conductor_binder.Binder(
            agent_rpcapi.AgentAPI(), notifier,
            sweep_interval=sweep_interval,
            stale_after=stale_after) if bind else None
        self.manager = manager or conductor_manager.ConductorManager(
            self.binder)
        self.server = rpc.get_server(
            rpc.CONDUCTOR_TOPIC, [self.manager],
            server=name or 'conductor-%s' % uuid.uuid4().hex[:6])

    def start(self):
        self.server.start()
        if self.binder is not None:
            self.binder.start()
        return self

    def stop(self):
        self.server.stop()
        self.server.wait()
        if self.binder is not None:
            self.binder.stop()


class Agent:
    """One host's agent: its manager (report_once, prepare, release) and
    its RPC server, addressed by host. No report loop: reports are sent
    when asked (report()).
    """

    def __init__(self, manager):
        self.manager = manager
        self.host = manager.host
        self.server = None

    @classmethod
    def build(cls, host, drivers, placement_client, rpc_timeout=None,
              conductor_api=None):
        """An AgentManager for `host` with `drivers`, wrapped."""
        from cyborg.agent import manager as agent_manager
        from cyborg.conductor import rpcapi as conductor_rpcapi

        return cls(agent_manager.AgentManager(
            conductor_api or conductor_rpcapi.ConductorAPI(
                timeout=rpc_timeout),
            placement_client, drivers=drivers, host=host))

    def start(self):
        from cyborg import rpc

        self.server = rpc.get_server(rpc.AGENT_TOPIC, [self.manager],
                                     server=self.host)
        self.server.start()
        return self

    def report(self, full=True):
        return self.manager.report_once(full=full)

    def stop(self):
        if self.server is not None:
            self.server.stop()
            self.server.wait()
            self.server = None


class Embedded:
    """Conductor, this host's agent (with `driver`) and the API app, the
    agent reporting into the real Placement behind `placement_adapter`
    (a keystoneauth adapter, e.g. InProcessPlacement.adapter()).

    The compute node `host` (default: a fresh name) is registered in
    Placement first, the way nova-compute does, and one full report is
    done before start() returns. `api` is the pecan app; serve_api()
    serves it on a loopback port.
    """

    def __init__(self, placement_adapter, driver=None, host=None,
                 notifier=None, stale_after=1.0, sweep_interval=0.2,
                 rpc_timeout=10, start=True):
        from cyborg.drivers import fake
        from cyborg.placement import client as placement_client

        self.adapter = placement_adapter
        self.placement = placement_client.PlacementClient(placement_adapter)
        self.host = host or 'embedded-%s' % uuid.uuid4().hex[:8]
        self.driver = driver or fake.FakeDriver(fake.default_host_spec())
        self.notifier = notifier
        self.stale_after = stale_after
        self.sweep_interval = sweep_interval
        self.rpc_timeout = rpc_timeout
        self.agents = {}           # other hosts' agents (add_agent)
        self.agent = None          # this host's AgentManager
        self.agent_server = None
        self.conductors = []
        self.binder = None         # the last conductor's binder
        self.conductor = None      # its RPC server; None when stopped
        self.app = None
        self.api_server = None
        self._agent = None
        if start:
            self.start()

    def start(self):
        from cyborg.api import app as api_app

        self.register_node(self.host)
        self.agent = self.new_agent()
        self.start_agent()
        self.start_conductor()
        self.agent.report_once(full=True)
        self.app = api_app.setup_app()
        return self

    # -- Placement ----------------------------------------------------------

    def register_node(self, name):
        """The compute node's provider, as nova-compute creates it."""
        r = self.adapter.post('/resource_providers', microversion='1.26',
                              json={'name': name}, raise_exc=False)
        if r.status_code != 200:
            raise RuntimeError('Placement refused compute node %s: %s %s'
                               % (name, r.status_code, r.text[:500]))
        return r.json()['uuid']

    # -- this host's agent --------------------------------------------------

    def new_agent(self):
        """A fresh AgentManager for this host and driver (not started)."""
        return Agent.build(self.host, [self.driver], self.placement,
                           rpc_timeout=self.rpc_timeout).manager

    def start_agent(self):
        """Serve RPC for `agent` (set it to a new_agent() first to
        replace this host's agent).
        """
        self._agent = Agent(self.agent).start()
        self.agent_server = self._agent.server

    def stop_agent(self):
        self._agent.stop()
        self.agent_server = None

    # -- other hosts' agents ------------------------------------------------

    def add_agent(self, host, drivers, register_node=False, report=False):
        """An agent for another host, serving RPC; with report, its first
        full report is done. Returns its AgentManager.
        """
        if register_node:
            self.register_node(host)
        agent = Agent.build(host, drivers, self.placement,
                            rpc_timeout=self.rpc_timeout).start()
        self.agents[host] = agent
        if report:
            agent.report()
        return agent.manager

    # -- the conductor ------------------------------------------------------

    def start_conductor(self, manager=None):
        """A conductor (a new binder and RPC server); `binder` and
        `conductor` are its.
        """
        from cyborg.common import nova

        notifier = self.notifier or nova.NovaNotifier(give_up_after=30,
                                                      max_delay=0.2)
        conductor = Conductor(notifier, sweep_interval=self.sweep_interval,
                              stale_after=self.stale_after, manager=manager)
        conductor.start()
        self.conductors.append(conductor)
        self.binder, self.conductor = conductor.binder, conductor.server
        return conductor

    def stop_conductor(self):
        """Stop the latest conductor."""
        if self.conductors:
            self.conductors.pop().stop()
        self.conductor = None

    # -- the API ------------------------------------------------------------

    def serve_api(self, threads=32):
        """Serve the API app on a loopback port; returns its …/v2 URL."""
        from cyborg.common import wsgi_server

        self.api_server = wsgi_server.ThreadedServer('cyborg-api', self.app,
                                                     threads=threads)
        self.api_server.start()
        return self.api_url

    @property
    def api_url(self):
        return self.api_server.url + '/v2'

    def request(self, method, path, body=None, headers=None):
        """One request to the app in this process (no HTTP): a webob
        Response.
        """
        import webob

        request = webob.Request.blank(path, method=method,
                                      headers=headers or {})
        if body is not None:
            request.body = json.dumps(body).encode()
            request.content_type = 'application/json'
        return request.get_response(self.app)

    # -- the end ------------------------------------------------------------

    def stop(self):
        """API server, conductors, agents; the transport is left to the
        caller (rpc.cleanup()).
        """
        if self.api_server is not None:
            self.api_server.stop()
            self.api_server = None
        while self.conductors:
            self.conductors.pop().stop()
        self.conductor = None
        if self._agent is not None:
            self._agent.stop()
        for agent in self.agents.values():
            agent.stop()
        self.agents = {}
