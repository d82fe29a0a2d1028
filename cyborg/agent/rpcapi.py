# SPDX-License-Identifier: Apache-2.0
"""Client side of the agent's RPC API (addressed by the agent's host).

1.0 - resync
1.1 - prepare, release
1.2 - prepare_batch (several handles of one agent in one round trip);
      prepare takes arq_uuid, and joins the prepare of that ARQ and
      handle already running (or recently finished) on the agent

[upgrade_levels] agent caps the version sent, for conductors upgraded
before the agents: under a cap below 1.2 prepare_batch sends nothing and
answers every ARQ pending, so the caller prepares each with prepare(), as
before 1.2.
"""

from cyborg.conf import CONF
from cyborg import rpc

BATCH_VERSION = '1.2'


class AgentAPI:
    VERSION = '1.2'

    def __init__(self):
        self.client = rpc.get_client(rpc.AGENT_TOPIC, self.VERSION,
                                     version_cap=CONF.upgrade_levels.agent)

    def resync(self, context, host):
        """Ask the agent on `host` for a report pass now (e.g. a device was
        put into or taken out of maintenance).
        """
        return rpc.best_effort_cast(
            self.client.prepare(server=host, version='1.0'), context,
            'resync')

    def can_prepare_batch(self):
        """Whether the agents may be sent prepare_batch (the cap)."""
        return self.client.can_send_version(BATCH_VERSION)

    def prepare(self, context, host, deployable_name, driver_name, handle,
                arq_uuid=None):
        """Have the driver make `handle` usable; returns attach info
        updates (or None). Raises what the driver raised, or the messaging
        error when the agent did not answer (the binder asks again): with
        the broker unreachable, MessageDeliveryFailure after a few
        reconnection attempts rather than waiting for it forever.

        With arq_uuid (sent to agents of 1.2 and later) the agent joins a
        prepare of that ARQ and handle it already runs (prepare_batch
        answered it pending) instead of running the driver's again.
        """
        kwargs = {}
        version = '1.1'
        if arq_uuid is not None and self.can_prepare_batch():
            version, kwargs['arq_uuid'] = BATCH_VERSION, arq_uuid
        return self.client.prepare(server=host, version=version,
                                   retry=rpc.CAST_RETRIES).call(
            context, 'prepare', deployable_name=deployable_name,
            driver_name=driver_name, handle=handle, **kwargs)

    def prepare_batch(self, context, host, items, wait):
        """prepare() of several handles on `host` in one round trip:
        items are {arq_uuid, deployable_name, driver_name, handle}. The
        agent answers once every prepare ended or after `wait` seconds,
        with one entry per ARQ: {'info': attach info updates or None},
        {'error': why the driver failed}, or {'pending': True} (still
        running: ask prepare() with the ARQ's uuid for its outcome).
        Raises the messaging error when the agent did not answer.

        Under an [upgrade_levels] agent cap below 1.2 nothing is sent and
        every ARQ is pending.
        """
        if not self.can_prepare_batch():
            return {item['arq_uuid']: {'pending': True} for item in items}
        return self.client.prepare(server=host, version=BATCH_VERSION,
                                   retry=rpc.CAST_RETRIES).call(
            context, 'prepare_batch', items=items, wait=wait)

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
