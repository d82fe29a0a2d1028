"""Client side of the conductor's RPC API.

1.0 - report_data
"""

from cyborg import rpc


class ConductorAPI:
    VERSION = '1.0'

    def __init__(self, timeout=None):
        self.client = rpc.get_client(rpc.CONDUCTOR_TOPIC, self.VERSION,
                                     timeout=timeout)

    def report_data(self, context, hostname, devices):
        """Store a host's discovered devices; returns which are fenced."""
        return self.client.prepare().call(
            context, 'report_data', hostname=hostname,
            devices=[d.to_dict() for d in devices])
