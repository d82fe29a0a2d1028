# SPDX-License-Identifier: Apache-2.0
"""Client side of the conductor's RPC API.

1.0 - report_data
1.1 - bind_arqs
1.2 - update_handles; report_data also answers the host's in-use handles
1.3 - release_handles (unbind and delete reach the agents through the
      conductor, as bind does)

[upgrade_levels] conductor caps the version sent, for API servers upgraded
before the conductors; a call whose version is above the cap falls back to
what the older conductor understands.
"""

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conf import CONF
from cyborg import rpc


class ConductorAPI:
    VERSION = '1.3'

    def __init__(self, timeout=None):
        self.client = rpc.get_client(
            rpc.CONDUCTOR_TOPIC, self.VERSION, timeout=timeout,
            version_cap=CONF.upgrade_levels.conductor)

    def report_data(self, context, hostname, devices):
        """Store a host's discovered devices; returns which are fenced."""
        return self.client.prepare(version='1.0').call(
            context, 'report_data', hostname=hostname,
            devices=[d.to_dict() for d in devices])

    def bind_arqs(self, context, arq_uuids):
        """Bind ARQs the API moved to BindStarted; answers nothing. With
        the broker down the ARQs stay BindStarted (stored already) and the
        conductors' sweep re-drives them: returns False then.
        """
        return rpc.best_effort_cast(self.client.prepare(version='1.1'),
                                    context, 'bind_arqs',
                                    arq_uuids=arq_uuids)

    def update_handles(self, context, updates):
        """Record attach info an agent re-made ({handle uuid: info})."""
        self.client.prepare(version='1.2').call(context, 'update_handles',
                                                updates=updates)

    def release_handles(self, context, handles):
        """Have the agents undo prepare() for handles an unbind or delete
        freed ([{uuid, attach_type, attach_info, deployable_name,
        driver_name, hostname}]); answers nothing. Best effort, like
        bind_arqs: the DB has freed the handles already, and a driver
        that reconciles (nvidia) undoes a missed release on its next
        report. Returns False when the broker could not take a message.

        A conductor older than 1.3 has no release_handles: under such a
        cap the agents are asked directly, as before 1.3.
        """
        if not handles:
            return True
        if not self.client.can_send_version('1.3'):
            return agent_rpcapi.AgentAPI().release_handles(context, handles)
        return rpc.best_effort_cast(self.client.prepare(version='1.3'),
                                    context, 'release_handles',
                                    handles=handles)
