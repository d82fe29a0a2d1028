"""Binding ARQs after the API moved them to BindStarted, and telling Nova.

bind(): claim a handle, let the device's agent prepare it, record Bound or
BindFailed (with the reason). Outcomes are marked `event_pending` in the
same transaction, and a notifier thread delivers every pending event to
Nova, so an event survives Nova being down and the conductor restarting.
"""

import time

from oslo_log import log

from cyborg.common import loop
from cyborg.common import nova
from cyborg import context as cyborg_context
from cyborg import drivers
from cyborg.db import bindings

LOG = log.getLogger(__name__)


def _reason(exc):
    """The message of an exception raised in an agent, without the remote
    traceback oslo.messaging appends."""
    if isinstance(getattr(exc, 'value', None), str):
        return exc.value                      # messaging.RemoteError
    if exc.args and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)


class Binder:

    def __init__(self, agent_api, notifier=None, sweep_interval=30.0,
                 stale_after=180.0):
        self.agent_api = agent_api
        self.notifier = notifier or nova.NovaNotifier()
        self.stale_after = stale_after
        self.sweep_interval = sweep_interval
        self._next_recover = 0.0
        self._loop = loop.Loop('nova-notifier', self._sweep, sweep_interval)

    # Binding ---------------------------------------------------------------

    def bind(self, context, arq_uuids):
        """RPC entry: bind, then let the notifier send the outcomes."""
        self._bind(context, arq_uuids)
        self._loop.wake()

    def _bind(self, context, arq_uuids):
        released = []
        for uuid in arq_uuids:
            try:
                released += self._bind_one(context, uuid)
            except Exception:
                # The DB stayed unusable through the retries: the ARQ is
                # still BindStarted, and the sweep re-drives it later.
                LOG.exception('Binding ARQ %s failed; will retry', uuid)
        self._release(context, released)

    def _bind_one(self, context, uuid):
        try:
            claim = bindings.claim_handle(uuid)
        except bindings.Gone:
            LOG.info('ARQ %s is no longer being bound, or another binder '
                     'claimed it first; skipping', uuid)
            return []
        except bindings.BindError as e:
            return self._fail(uuid, str(e))
        handle = claim['handle']
        try:
            info = self.agent_api.prepare(
                context, claim['device']['hostname'],
                claim['deployable']['name'],
                claim['deployable']['driver_name'], handle)
        except Exception as e:
            reason = _reason(e)
            LOG.warning('Preparing device for ARQ %s failed: %s', uuid,
                        reason)
            return self._fail(uuid, 'Preparing the device failed: %s'
                              % reason)
        try:
            if info:
                bindings.update_handle_info(handle['uuid'], info)
            bindings.finish(uuid)
        except bindings.Gone:
            LOG.info('ARQ %s was unbound while its device was prepared', uuid)
            return []
        LOG.info('ARQ %s bound to handle %s of %s', uuid, handle['uuid'],
                 claim['deployable']['name'])
        if drivers.follows_bindings(claim['deployable']['driver_name']):
            # The device is claimed now: its agent re-settles its lifecycle
            # (Managed, Passthrough) on a pass of its own. Other drivers'
            # devices show Managed from their next periodic pass.
            try:
                self.agent_api.resync(context, claim['device']['hostname'])
            except Exception as e:
                LOG.debug('Could not wake the agent of %s: %s',
                          claim['device']['hostname'], e)
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

    def recover(self, older_than=None):
        """Re-drive ARQs left in BindStarted: all of them at start (a
        previous conductor died), then periodically those stuck longer than
        any bind takes (a lost message, a DB outage)."""
        context = cyborg_context.get_admin_context()
        stuck = bindings.bind_started(older_than)
        for instance, uuids in stuck.items():
            LOG.info('Re-driving %d ARQ(s) of instance %s left in '
                     'BindStarted', len(uuids), instance)
            self._bind(context, uuids)
        return sum(len(u) for u in stuck.values())

    # Notifying Nova --------------------------------------------------------

    def notify_soon(self):
        self._loop.wake()

    def start(self):
        self._loop.start()

    def stop(self, timeout=10):
        self._loop.stop(timeout)

    def _sweep(self):
        # Woken after each bind, the pass only has events to send; the
        # search for stuck ARQs is periodic work and keeps to its interval.
        now = time.monotonic()
        if now >= self._next_recover:
            self._next_recover = now + self.sweep_interval
            self.recover(older_than=self.stale_after)
        self.notify_pending()

    def notify_pending(self):
        """Send every undelivered event; returns how many were delivered."""
        events = bindings.pending_events()
        if events and self.notifier.send(events):
            bindings.events_delivered([e['tag'] for e in events])
            return len(events)
        return 0
