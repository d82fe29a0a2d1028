"""Binding ARQs after the API moved them to BindStarted, and telling Nova.

bind(): claim a handle, let the device's agent prepare it, record Bound or
BindFailed (with the reason). Outcomes are marked `event_pending` in the
same transaction, and a notifier thread delivers every pending event to
Nova, so an event survives Nova being down and the conductor restarting.
"""

from oslo_log import log

from cyborg.common import loop
from cyborg.common import nova
from cyborg import context as cyborg_context
from cyborg.db import bindings

LOG = log.getLogger(__name__)


class Binder:

    def __init__(self, agent_api, notifier=None, sweep_interval=30.0):
        self.agent_api = agent_api
        self.notifier = notifier or nova.NovaNotifier()
        self._loop = loop.Loop('nova-notifier', self.notify_pending,
                               sweep_interval)

    # Binding ---------------------------------------------------------------

    def bind(self, context, arq_uuids):
        released = []
        for uuid in arq_uuids:
            released += self._bind_one(context, uuid)
        self._release(context, released)
        self._loop.wake()

    def _bind_one(self, context, uuid):
        try:
            claim = bindings.claim_handle(uuid)
        except bindings.Gone:
            LOG.info('ARQ %s is no longer being bound; skipping', uuid)
            return []
        except bindings.BindError as e:
            return self._fail(uuid, str(e))
        handle = claim['handle']
        try:
            info = self.agent_api.prepare(
                context, claim['device']['hostname'],
                claim['deployable']['name'],
                claim['deployable']['driver_name'], handle)
            if info:
                bindings.update_handle_info(handle['uuid'], info)
            bindings.finish(uuid)
        except bindings.Gone:
            LOG.info('ARQ %s was unbound while its device was prepared', uuid)
            return []
        except Exception as e:
            LOG.warning('Preparing device for ARQ %s failed: %s', uuid, e)
            return self._fail(uuid, 'Preparing the device failed: %s' % e)
        LOG.info('ARQ %s bound to handle %s of %s', uuid, handle['uuid'],
                 claim['deployable']['name'])
        return []

    @staticmethod
    def _fail(uuid, reason):
        LOG.warning('ARQ %s failed to bind: %s', uuid, reason)
        try:
            return bindings.finish(uuid, reason)
        except bindings.Gone:
            return []

    def _release(self, context, handles):
        for handle in handles:
            try:
                self.agent_api.release(context, handle['hostname'], [handle])
            except Exception as e:
                LOG.warning('Could not ask %s to release handle %s: %s',
                            handle['hostname'], handle['uuid'], e)

    def recover(self):
        """Re-drive every ARQ a previous conductor left in BindStarted."""
        context = cyborg_context.get_admin_context()
        stuck = bindings.bind_started()
        for instance, uuids in stuck.items():
            LOG.info('Re-driving %d ARQ(s) of instance %s left in '
                     'BindStarted', len(uuids), instance)
            self.bind(context, uuids)
        self._loop.wake()
        return sum(len(u) for u in stuck.values())

    # Notifying Nova --------------------------------------------------------

    def start(self):
        self._loop.start()

    def stop(self, timeout=10):
        self._loop.stop(timeout)

    def notify_pending(self):
        """Send every undelivered event; returns how many were delivered."""
        events = bindings.pending_events()
        if events and self.notifier.send(events):
            bindings.events_delivered([e['tag'] for e in events])
            return len(events)
        return 0
