"""Client side of the conductor's RPC API.

1.0 - report_data
1.1 - bind_arqs
1.2 - update_handles; report_data also answers the host's in-use handles
"""

from cyborg import rpc


class ConductorAPI:
    VERSION = '1.2'

    def __init__(self, timeout=None):
        self.client = rpc.get_client(rpc.CONDUCTOR_TOPIC, self.VERSION,
                                     timeout=timeout)

    def report_data(self, context, hostname, devices):
        """Store a host's discovered devices; returns which are fenced."""
        return self.client.prepare(version='1.0').call(
            context, 'report_data', hostname=hostname,
            devices=[d.to_dict() for d in devices])

    def bind_arqs(self, context, arq_uuids):
        """Bind ARQs the API moved to BindStarted; answers nothing. With
        the broker down the ARQs stay BindStarted (stored already) and the
        conductors' sweep re-drives them: returns False then."""
        return rpc.best_effort_cast(self.client.prepare(version='1.1'),
                                    context, 'bind_arqs',
                                    arq_uuids=arq_uuids)

    def update_handles(self, context, updates):
        """Record attach info an agent re-made ({handle uuid: info})."""
        self.client.prepare(version='1.2').call(context, 'update_handles',
                                                updates=updates)
