# SPDX-License-Identifier: Apache-2.0
"""Binding ARQs after the API moved them to BindStarted, and telling Nova.

bind(): claim a handle, let the device's agent prepare it, record Bound or
BindFailed (with the reason). Outcomes are marked `event_pending` in the
same transaction, and a notifier thread delivers every pending event to
Nova, so an event survives Nova being down and the conductor restarting.
Binds that arrive together share their transactions and Nova POST
(cyborg.common.combining): one claims all their handles, then each is
prepared on its own, and the outcomes that end meanwhile are recorded and
sent together.
"""

import collections
from concurrent import futures
import threading
import time

from oslo_log import log

from cyborg.common import combining
from cyborg.common import loop
from cyborg.common import nova
from cyborg import context as cyborg_context
from cyborg.db import bindings
from cyborg import drivers

LOG = log.getLogger(__name__)


def _reason(exc):
    """The message of an exception raised in an agent, without the remote
    traceback oslo.messaging appends.
    """
    if isinstance(getattr(exc, 'value', None), str):
        return exc.value                      # messaging.RemoteError
    if exc.args and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)


# One ARQ's bind, ended: reason None (Bound) or why it failed; info is
# what the driver's prepare() learnt.
_Outcome = collections.namedtuple('_Outcome',
                                  'uuid context claim reason info',
                                  defaults=(None,))


class Binder:

    def __init__(self, agent_api, notifier=None, sweep_interval=30.0,
                 stale_after=180.0):
        self.agent_api = agent_api
        self.notifier = notifier or nova.NovaNotifier()
        self.stale_after = stale_after
        self.sweep_interval = sweep_interval
        self._next_recover = 0.0
        self._loop = loop.Loop('nova-notifier', self._sweep, sweep_interval)
        self._claims = combining.Combiner(self._claim_batch)
        self._outcomes = combining.Combiner(self._record_batch,
                                            after=self._loop.wake)
        # As many prepares at once as the RPC server had threads: a bind
        # waiting on an agent that is gone must not queue the others.
        self._preparers = futures.ThreadPoolExecutor(
            max_workers=64, thread_name_prefix='bind-prepare')
        self._lock = threading.Lock()
        self._preparing = {}      # ARQ uuid: future of its prepare

    # Binding ---------------------------------------------------------------

    def bind(self, context, arq_uuids, wait=True):
        """Bind the ARQs: their handles are claimed in a batch with
        whatever else arrived meanwhile, each is prepared on its own (a
        slow or unreachable agent holds back only its ARQs), and outcomes
        are recorded in batches too; the notifier, woken after each, sends
        them. Returns once every outcome is recorded, or with wait=False
        (the RPC cast) as soon as the ARQs are in someone's hands.
        """
        arq_uuids = list(arq_uuids)
        self._claims.run(((context, uuid) for uuid in arq_uuids), wait=wait)
        if wait:
            with self._lock:
                preparing = [self._preparing[u] for u in arq_uuids
                             if u in self._preparing]
            futures.wait(preparing)

    def _claim_batch(self, items):
        with self._lock:
            # One this conductor is preparing already (the sweep found it
            # slow) is left to that prepare.
            contexts = {uuid: context for context, uuid in items
                        if uuid not in self._preparing}
        if not contexts:
            return
        try:
            claims = bindings.claim_handles(list(contexts),
                                            drivers.handle_picker)
        except Exception as e:
            if len(contexts) > 1 and not bindings.transient(e):
                # Something about one ARQ breaks the batch's transaction:
                # claim each alone, so only that one is left behind.
                for uuid, context in contexts.items():
                    self._claim_batch([(context, uuid)])
                return
            # The DB stayed unusable through the retries: the ARQs are
            # still BindStarted, and the sweep re-drives them later.
            LOG.exception('Binding %d ARQ(s) failed; will retry',
                          len(contexts))
            return
        refused = []
        for uuid, claim in claims.items():
            if isinstance(claim, bindings.Gone):
                LOG.info('ARQ %s is no longer being bound, or another '
                         'binder claimed it first; skipping', uuid)
            elif isinstance(claim, bindings.BindError):
                refused.append(_Outcome(uuid, contexts[uuid], None,
                                        str(claim)))
            else:
                with self._lock:
                    future = self._preparers.submit(
                        self._prepare, contexts[uuid], uuid, claim)
                    self._preparing[uuid] = future
                future.add_done_callback(
                    lambda done, uuid=uuid: self._prepared(uuid, done))
        if refused:
            self._outcomes.run(refused)

    def _prepare(self, context, uuid, claim):
        """The driver's prepare() on the device's agent, then the outcome
        recorded (in a batch with others that ended meanwhile).
        """
        try:
            info = self.agent_api.prepare(
                context, claim['device']['hostname'],
                claim['deployable']['name'],
                claim['deployable']['driver_name'], claim['handle'])
            outcome = _Outcome(uuid, context, claim, None, info)
        except Exception as e:
            reason = _reason(e)
            LOG.warning('Preparing device for ARQ %s failed: %s', uuid,
                        reason)
            outcome = _Outcome(uuid, context, claim,
                               'Preparing the device failed: %s' % reason)
        self._outcomes.run([outcome])

    def _prepared(self, uuid, future):
        with self._lock:
            if self._preparing.get(uuid) is future:
                del self._preparing[uuid]

    def _record_batch(self, outcomes):
        reasons = {o.uuid: o.reason for o in outcomes}
        infos = {o.uuid: (o.claim['handle']['uuid'], o.info)
                 for o in outcomes if o.reason is None and o.info}
        try:
            released, gone = bindings.finish_many(reasons, infos)
        except Exception:
            LOG.exception('Recording the outcome of %d ARQ(s) failed; will '
                          'retry', len(reasons))
            return
        for o in outcomes:
            if o.uuid in gone:
                LOG.info('ARQ %s was unbound while it was being bound',
                         o.uuid)
            elif o.reason is not None:
                LOG.warning('ARQ %s failed to bind: %s', o.uuid, o.reason)
            else:
                LOG.info('ARQ %s bound to handle %s of %s', o.uuid,
                         o.claim['handle']['uuid'],
                         o.claim['deployable']['name'])
        self._resync([o for o in outcomes
                      if o.reason is None and o.uuid not in gone])
        if released:
            self.release(outcomes[0].context, released)

    def _resync(self, bound):
        """Devices are claimed now: the agents of drivers that follow
        bindings re-settle their lifecycle (Managed, Passthrough) on a pass
        of their own. Other drivers' devices show Managed from their next
        periodic pass.
        """
        hosts = {}
        for o in bound:
            if drivers.follows_bindings(o.claim['deployable']['driver_name']):
                hosts.setdefault(o.claim['device']['hostname'], o.context)
        for host, context in hosts.items():
            try:
                self.agent_api.resync(context, host)
            except Exception as e:
                LOG.debug('Could not wake the agent of %s: %s', host, e)

    def release(self, context, handles):
        """Have each freed handle's agent undo what prepare() did: handles
        a failed bind gave back, or an unbind or delete freed (the API
        casts those here, release_handles). Best effort: the DB has freed
        them already.
        """
        try:
            self.agent_api.release_handles(context, handles)
        except Exception as e:
            LOG.warning('Could not ask the agents to release %d handle(s): '
                        '%s', len(handles), e)

    def recover(self, older_than=None, wait=True):
        """Re-drive ARQs left in BindStarted: all of them at start (a
        previous conductor died), then periodically those stuck longer than
        any bind takes (a lost message, a DB outage).
        """
        context = cyborg_context.get_admin_context()
        stuck = bindings.bind_started(older_than)
        for instance, uuids in stuck.items():
            LOG.info('Re-driving %d ARQ(s) of instance %s left in '
                     'BindStarted', len(uuids), instance)
        self.bind(context, [u for uuids in stuck.values() for u in uuids],
                  wait=wait)
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
            # Not waiting for the prepares: events keep flowing meanwhile.
            self.recover(older_than=self.stale_after, wait=False)
        self.notify_pending()

    def notify_pending(self):
        """Send every undelivered event; returns how many were delivered."""
        events = bindings.pending_events()
        if events and self.notifier.send(events):
            bindings.events_delivered([e['tag'] for e in events])
            return len(events)
        return 0
