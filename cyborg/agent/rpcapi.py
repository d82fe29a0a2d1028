"""Client side of the agent's RPC API (addressed by the agent's host).

1.0 - resync
"""

from cyborg import rpc


class AgentAPI:
    VERSION = '1.0'

    def __init__(self):
        self.client = rpc.get_client(rpc.AGENT_TOPIC, self.VERSION)

    def resync(self, context, host):
        """Ask the agent on `host` for a report pass now (e.g. a device was
        put into or taken out of maintenance)."""
        self.client.prepare(server=host).cast(context, 'resync')
