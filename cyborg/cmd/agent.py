"""cyborg-agent: one per compute host; discovers and reports devices."""

import sys

from cyborg.agent import manager
from cyborg.cmd import common
from cyborg.common import ksa
from cyborg.common import service
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.conf import CONF
from cyborg.placement import client as placement
from cyborg import rpc


def build():
    """(agent manager, RPC server), neither started."""
    agent = manager.AgentManager(
        conductor_rpcapi.ConductorAPI(),
        placement.PlacementClient(ksa.get_adapter('placement'),
                                  max_delay=CONF.agent.placement_retry_max_delay))
    server = rpc.get_server(rpc.AGENT_TOPIC, [agent], server=agent.host)
    return agent, server


def main(argv=None):
    common.parse_args(sys.argv[1:] if argv is None else argv)
    agent, server = build()

    def start():
        server.start()
        agent.start()

    def stop():
        agent.stop()
        server.stop()
        server.wait()
        rpc.cleanup()

    return service.run_until_signalled('cyborg-agent', start, stop)


if __name__ == '__main__':
    sys.exit(main())
