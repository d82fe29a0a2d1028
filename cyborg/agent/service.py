# SPDX-License-Identifier: Apache-2.0
"""The agent service: its report loop, RPC server and metrics endpoint."""

from cyborg.agent import manager
from cyborg.agent import metrics
from cyborg.common import ksa
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.conf import CONF
from cyborg.placement import client as placement
from cyborg import rpc


class AgentService:
    """The agent's report loop and its RPC server (addressed by host)."""

    def __init__(self):
        self.agent = manager.AgentManager(
            conductor_rpcapi.ConductorAPI(),
            placement.PlacementClient(
                ksa.get_adapter('placement'),
                max_delay=CONF.agent.placement_retry_max_delay))
        self.server = rpc.get_server(rpc.AGENT_TOPIC, [self.agent],
                                     server=self.agent.host)
        self.metrics_server = None

    def start(self, first_report=False):
        if CONF.agent.metrics_port:
            self.metrics_server = metrics.serve(
                self.agent, CONF.agent.metrics_listen,
                CONF.agent.metrics_port)
        self.server.start()
        if first_report:
            self.agent.report_once(full=True)
        self.agent.start()

    def stop(self):
        self.agent.stop()
        self.server.stop()
        self.server.wait()
        if self.metrics_server is not None:
            self.metrics_server.stop()
            self.metrics_server = None
