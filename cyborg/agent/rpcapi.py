# SPDX-License-Identifier: Apache-2.0
"""Client side of the agent's RPC API (addressed by the agent's host).

1.0 - resync
1.1 - prepare, release
"""

from cyborg import rpc


class AgentAPI:
    VERSION = '1.1'

    def __init__(self):
        self.client = rpc.get_client(rpc.AGENT_TOPIC, self.VERSION)

    def resync(self, context, host):
        """Ask the agent on `host` for a report pass now (e.g. a device was
        put into or taken out of maintenance).
        """
        return rpc.best_effort_cast(
            self.client.prepare(server=host, version='1.0'), context,
            'resync')

    def prepare(self, context, host, deployable_name, driver_name, handle):
        """Have the driver make `handle` usable; returns attach info
        updates (or None). Raises what the driver raised, or the messaging
        error when the agent did not answer (the binder asks again): with
        the broker unreachable, MessageDeliveryFailure after a few
        reconnection attempts rather than waiting for it forever.
        """
        return self.client.prepare(server=host, version='1.1',
                                   retry=rpc.CAST_RETRIES).call(
            context, 'prepare', deployable_name=deployable_name,
            driver_name=driver_name, handle=handle)

    def release(self, context, host, handles):
        """Undo prepare() for handles freed by unbind or delete. Best
        effort: the DB has freed the handles already, and a driver that
        reconciles (nvidia) undoes a missed release on its next report.
        """
        return rpc.best_effort_cast(
            self.client.prepare(server=host, version='1.1'), context,
            'release', handles=handles)

    def release_handles(self, context, handles):
        """release() of handles on any hosts: one cast to each handle's
        host (`hostname`, as cyborg.db.arqs.released_handles gives it).
        Returns whether every cast was sent.
        """
        by_host = {}
        for handle in handles:
            by_host.setdefault(handle['hostname'], []).append(handle)
        sent = [self.release(context, host, host_handles)
                for host, host_handles in by_host.items()]
        return all(sent)
