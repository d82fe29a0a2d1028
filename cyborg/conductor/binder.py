"""Binding ARQs after the API moved them to BindStarted, and telling Nova.

bind(): claim a handle, let the device's agent prepare it, record Bound or
BindFailed (with the reason). Outcomes are marked `event_pending` in the
same transaction, and a notifier thread delivers every pending event to
Nova, so an event survives Nova being down and the conductor restarting.
Binds that arrive together run as one batch (cyborg.common.combining): two
transactions and one Nova POST serve all of them.
"""

from concurrent import futures
import time

from oslo_log import log

from cyborg.common import combining
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
        self._binds = combining.Combiner(self._bind_batch,
                                         after=self._loop.wake)
        self._preparers = futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix='bind-prepare')

    # Binding ---------------------------------------------------------------

    def bind(self, context, arq_uuids, wait=True):
        """Bind the ARQs, in a batch with whatever else arrived meanwhile;
        the notifier, woken after each batch, sends the outcomes. Returns
        once they are bound or failed, or with wait=False (the RPC cast)
        at once when another thread is binding already: it takes these
        too, and the RPC thread is free for other messages."""
        self._binds.run(((context, uuid) for uuid in arq_uuids), wait=wait)

    def _bind_batch(self, items):
        contexts = dict((uuid, context) for context, uuid in items)
        try:
            claims = bindings.claim_handles(list(contexts))
        except Exception as e:
            if len(contexts) > 1 and not bindings.transient(e):
                # Something about one ARQ breaks the batch's transaction:
                # bind each alone, so only that one is left behind.
                for uuid, context in contexts.items():
                    self._bind_batch([(context, uuid)])
                return
            # The DB stayed unusable through the retries: the ARQs are
            # still BindStarted, and the sweep re-drives them later.
            LOG.exception('Binding %d ARQ(s) failed; will retry',
                          len(contexts))
            return
        claimed = {u: c for u, c in claims.items() if isinstance(c, dict)}
        prepared = self._prepare(contexts, claimed)
        reasons, infos = {}, {}
        for uuid, claim in claims.items():
            if isinstance(claim, bindings.Gone):
                LOG.info('ARQ %s is no longer being bound, or another '
                         'binder claimed it first; skipping', uuid)
            elif isinstance(claim, bindings.BindError):
                reasons[uuid] = str(claim)
            elif isinstance(prepared[uuid], Exception):
                reason = _reason(prepared[uuid])
                LOG.warning('Preparing device for ARQ %s failed: %s', uuid,
                            reason)
                reasons[uuid] = 'Preparing the device failed: %s' % reason
            else:
                reasons[uuid] = None
                if prepared[uuid]:
                    infos[uuid] = (claim['handle']['uuid'], prepared[uuid])
        if not reasons:
            return
        try:
            released, gone = bindings.finish_many(reasons, infos)
        except Exception:
            LOG.exception('Recording the outcome of %d ARQ(s) failed; will '
                          'retry', len(reasons))
            return
        self._log_outcomes(reasons, claimed, gone)
        self._resync(contexts, claimed, reasons, gone)
        if released:
            self._release(next(iter(contexts.values())), released)

    def _prepare(self, contexts, claimed):
        """Each claimed handle's driver prepare() on its agent: {uuid:
        attach info updates or None | the exception}. Several run at once
        (creating a MIG instance takes a while)."""
        def one(uuid):
            claim = claimed[uuid]
            try:
                return self.agent_api.prepare(
                    contexts[uuid], claim['device']['hostname'],
                    claim['deployable']['name'],
                    claim['deployable']['driver_name'], claim['handle'])
            except Exception as e:
                return e
        if len(claimed) == 1:
            return {uuid: one(uuid) for uuid in claimed}
        return dict(zip(claimed, self._preparers.map(one, claimed)))

    @staticmethod
    def _log_outcomes(reasons, claimed, gone):
        for uuid, reason in reasons.items():
            if uuid in gone:
                LOG.info('ARQ %s was unbound while it was being bound', uuid)
            elif reason is not None:
                LOG.warning('ARQ %s failed to bind: %s', uuid, reason)
            else:
                LOG.info('ARQ %s bound to handle %s of %s', uuid,
                         claimed[uuid]['handle']['uuid'],
                         claimed[uuid]['deployable']['name'])

    def _resync(self, contexts, claimed, reasons, gone):
        """Devices are claimed now: the agents of drivers that follow
        bindings re-settle their lifecycle (Managed, Passthrough) on a pass
        of their own. Other drivers' devices show Managed from their next
        periodic pass."""
        hosts = {}
        for uuid, reason in reasons.items():
            if reason is not None or uuid in gone:
                continue
            claim = claimed[uuid]
            if drivers.follows_bindings(claim['deployable']['driver_name']):
                hosts.setdefault(claim['device']['hostname'], uuid)
        for host, uuid in hosts.items():
            try:
                self.agent_api.resync(contexts[uuid], host)
            except Exception as e:
                LOG.debug('Could not wake the agent of %s: %s', host, e)

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
        self.bind(context, [u for uuids in stuck.values() for u in uuids])
        return sum(len(u) for u in stuck.values())

    # Notifying Nova --------------------------------------------------------

    def notify_soon(self):
        self._loop.wake()

    def start(self):
        self._loop.start()

    def stop(self, timeout=10):
        self._loop.stop(timeout)
        self._preparers.shutdown(wait=False)

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
