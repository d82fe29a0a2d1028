# SPDX-License-Identifier: Apache-2.0
"""Binding ARQs after the API moved them to BindStarted, and telling Nova.

bind(): claim a handle, let the device's agent prepare it, record Bound or
BindFailed (with the reason). Outcomes are marked `event_pending` in the
same transaction, and a notifier thread delivers every pending event to
Nova, so an event survives Nova being down and the conductor restarting.
Binds that arrive together share their transactions and Nova POST
(cyborg.common.combining): one claims all their handles, then the handles
of each agent are prepared in one prepare_batch RPC (agent RPC 1.2), and
the outcomes that end meanwhile are recorded and sent together.

A slow or hung prepare holds back only its own ARQ (plus at most
[conductor] prepare_batch_wait for its batch): the agent runs each
prepare of a batch on its own thread and answers once all ended or after
that bounded wait, listing the ARQs still running as pending. Each
pending ARQ is then followed on its own: a per-ARQ prepare RPC carrying
the ARQ's uuid, which the agent joins to the prepare already running (its
in-flight table is keyed by ARQ and handle), so the driver's prepare runs
once per handle, and the batch's other outcomes are recorded meanwhile.
An ARQ alone for its agent goes by plain prepare (one round trip either
way). Agents capped below 1.2 ([upgrade_levels] agent) answer every ARQ
pending without a message being sent, which is the per-ARQ prepare of
before. A batch the agent does not answer (a messaging timeout, the
broker unreachable) falls back to per-ARQ prepares, each asked again as
below.

Failover: the conductor that claims an ARQ holds it (cyborg.db.conductors)
and heartbeats in the database; when it dies, a live conductor takes its
binds over within the heartbeat timeout and drives them again (the
conditional updates keep one handle per ARQ). An agent that does not
answer (a messaging timeout, a broker that cannot deliver) is asked again
with a back-off until the bind's deadline, Nova's arq_binding_timeout
([conductor] bind_timeout), and only then is the bind failed, with the
reason.
"""

import collections
from concurrent import futures
import os
import threading
import time
import uuid as uuidlib

from kombu import exceptions as kombu_exc
from oslo_log import log
import oslo_messaging as messaging

from cyborg.common import combining
from cyborg.common import loop
from cyborg.common import nova
from cyborg.conductor import outage
from cyborg import context as cyborg_context
from cyborg.db import bindings
from cyborg.db import conductors
from cyborg.db import models
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


def unreachable(exc):
    """The agent did not answer, as opposed to answering with an error:
    worth asking again (it may be restarting, or the broker recovering).
    With the broker refusing connections the rabbit driver raises kombu's
    OperationalError ("[Errno 111] Connection refused"), not a messaging
    error.
    """
    return isinstance(exc, (messaging.MessagingTimeout,
                            messaging.MessageDeliveryFailure,
                            messaging.MessageUndeliverable, OSError,
                            kombu_exc.OperationalError))


def conductor_name(host):
    """This process's name in the conductors table: unique per run."""
    return '%s:%d:%s' % (host, os.getpid(), uuidlib.uuid4().hex[:6])


# One ARQ's bind, ended: reason None (Bound) or why it failed; info is
# what the driver's prepare() learnt.
_Outcome = collections.namedtuple('_Outcome',
                                  'uuid context claim reason info',
                                  defaults=(None,))


class Binder:

    def __init__(self, agent_api, notifier=None, sweep_interval=10.0,
                 stale_after=30.0, name=None, heartbeat_interval=2.0,
                 heartbeat_timeout=6.0, bind_timeout=300.0,
                 retry_max_delay=10.0, prepare_batch_wait=0.5):
        self.agent_api = agent_api
        self.notifier = notifier or nova.NovaNotifier()
        self.stale_after = stale_after
        self.sweep_interval = sweep_interval
        self.name = name or conductor_name('conductor')
        self.heartbeat_timeout = heartbeat_timeout
        self.bind_timeout = bind_timeout
        self.retry_max_delay = retry_max_delay
        self.prepare_batch_wait = prepare_batch_wait
        self.db = outage.DATABASE
        self._next_recover = 0.0
        self._stopping = threading.Event()
        self._loop = loop.Loop('nova-notifier', self._sweep, sweep_interval)
        self._heartbeat_loop = loop.Loop('conductor-heartbeat',
                                         self.heartbeat, heartbeat_interval)
        self._claims = combining.Combiner(self._claim_batch)
        self._outcomes = combining.Combiner(self._record_batch,
                                            after=self._loop.wake)
        # As many prepares at once as the RPC server had threads: a bind
        # waiting on an agent that is gone must not queue the others.
        self._preparers = futures.ThreadPoolExecutor(
            max_workers=64, thread_name_prefix='bind-prepare')
        self._lock = threading.Lock()
        # ARQ uuid: future of its prepare (None while it is being claimed;
        # its batch's, then its own once the agent answered it pending)
        self._preparing = {}
        # ARQ uuid: context, of binds the database was down for; the next
        # heartbeat tries again.
        self._deferred = {}

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
        while wait:
            # A batch hands the ARQs the agent answered pending to futures
            # of their own before it ends.
            with self._lock:
                preparing = [f for f in map(self._preparing.get, arq_uuids)
                             if f is not None and not f.done()]
            if not preparing:
                return
            futures.wait(preparing)

    def _claim_batch(self, items):
        with self._lock:
            # One this conductor is claiming or preparing already (the
            # sweep found it slow) is left to that.
            contexts = {uuid: context for context, uuid in items
                        if uuid not in self._preparing}
            for uuid in contexts:
                self._preparing[uuid] = None
        if not contexts:
            return
        try:
            self._claim(contexts)
        finally:
            with self._lock:
                for uuid in contexts:
                    if self._preparing.get(uuid, 0) is None:
                        del self._preparing[uuid]

    def _claim(self, contexts):
        try:
            claims = bindings.claim_handles(list(contexts),
                                            drivers.handle_picker,
                                            owner=self.name)
        except Exception as e:
            if len(contexts) > 1 and not bindings.transient(e):
                # Something about one ARQ breaks the batch's transaction:
                # claim each alone, so only that one is left behind.
                for uuid, context in contexts.items():
                    self._claim({uuid: context})
                return
            if self.db.failed(e, 'claiming handles'):
                # The DB stayed unusable through the retries: the ARQs
                # are still BindStarted, and the next heartbeat tries
                # again.
                with self._lock:
                    self._deferred.update(contexts)
                return
            # An error about this ARQ (alone by now), which claiming it
            # again would meet again at every heartbeat until Nova gave
            # up: the bind fails now, with the reason, and Nova is told.
            [(uuid, context)] = contexts.items()
            LOG.exception('Claiming a device for ARQ %s failed; the bind '
                          'fails', uuid)
            self._outcomes.run([_Outcome(
                uuid, context, None, 'Claiming a device failed: %s: %s'
                % (type(e).__name__, _reason(e)))])
            return
        refused = []
        by_host = {}
        for uuid, claim in claims.items():
            if isinstance(claim, bindings.Gone):
                LOG.info('ARQ %s is no longer being bound, or another '
                         'conductor holds it; skipping', uuid)
            elif isinstance(claim, bindings.BindError):
                refused.append(_Outcome(uuid, contexts[uuid], None,
                                        str(claim)))
            else:
                by_host.setdefault(claim['device']['hostname'], []).append(
                    (contexts[uuid], uuid, claim))
        for host, jobs in by_host.items():
            if len(jobs) == 1:
                self._submit(self._prepare, jobs, *jobs[0])
            else:
                self._submit(self._prepare_batch, jobs, host, jobs)
        if refused:
            self._outcomes.run(refused)

    def _submit(self, work, jobs, *args, **kwargs):
        """Run work(*args) for the ARQs of `jobs` on a thread of its own;
        the future stands for their prepares.
        """
        with self._lock:
            future = self._preparers.submit(work, *args, **kwargs)
            for _, uuid, _ in jobs:
                self._preparing[uuid] = future
        for _, uuid, _ in jobs:
            future.add_done_callback(
                lambda done, uuid=uuid: self._prepared(uuid, done))

    def _prepare_batch(self, host, jobs):
        """The prepares of one agent's ARQs in one RPC: the outcomes it
        answered are recorded together, each ARQ it answered pending (or
        all, when it did not answer) is followed on its own.
        """
        context = jobs[0][0]
        items = [{'arq_uuid': uuid,
                  'deployable_name': claim['deployable']['name'],
                  'driver_name': claim['deployable']['driver_name'],
                  'handle': claim['handle']} for _, uuid, claim in jobs]
        LOG.debug('Preparing %d ARQ(s) on %s in one call', len(jobs), host)
        error, join = None, True
        try:
            results = self.agent_api.prepare_batch(
                context, host, items, self.prepare_batch_wait)
        except Exception as e:
            results = {}
            if unreachable(e):
                # Each is asked again on its own, with the back-off and
                # deadline of _prepare, joining the batch's prepare if it
                # reached the agent after all.
                error = e
            else:
                # An agent older than 1.2 without the [upgrade_levels]
                # cap, say: each is prepared on its own, the 1.1 way.
                LOG.warning('Batch prepare on %s failed (%s: %s); '
                            'preparing each of its %d ARQ(s) on its own',
                            host, type(e).__name__, _reason(e), len(jobs))
                join = False
        outcomes, pending = [], []
        for job in jobs:
            context, uuid, claim = job
            result = results.get(uuid) or {'pending': True}
            if 'error' in result:
                LOG.warning('Preparing device for ARQ %s failed: %s',
                            uuid, result['error'])
                outcomes.append(_Outcome(
                    uuid, context, claim,
                    'Preparing the device failed: %s' % result['error']))
            elif 'pending' in result:
                pending.append(job)
            else:
                outcomes.append(_Outcome(uuid, context, claim, None,
                                         result.get('info')))
        if outcomes:
            self._outcomes.run(outcomes)
        for job in pending:
            try:
                self._submit(self._prepare, [job], *job, unanswered=error,
                             join=join)
            except RuntimeError:
                # Stopping (no new work): the ARQ stays BindStarted, and
                # a peer (or this conductor's next run) takes it over.
                return

    def _seconds_left(self, claim):
        """Until the bind's deadline: Nova stops waiting for its event
        bind_timeout seconds after it asked.
        """
        started = claim['arq'].get('bind_started_at') or models.utcnow()
        return self.bind_timeout - (models.utcnow()
                                    - started).total_seconds()

    def _prepare(self, context, uuid, claim, unanswered=None, join=True):
        """The driver's prepare() on the device's agent, asked again while
        the agent does not answer (until the bind's deadline), then the
        outcome recorded (in a batch with others that ended meanwhile).
        unanswered: the messaging error of a batch prepare that included
        this ARQ, counting as the first ask. join: send the ARQ's uuid,
        for the agent to join its prepare of the ARQ already under way
        (agents of 1.2 and later); not after a batch the agent refused.
        """
        host = claim['device']['hostname']
        delay = min(1.0, self.retry_max_delay)
        while True:
            try:
                if unanswered is not None:
                    e, unanswered = unanswered, None
                    raise e
                info = self.agent_api.prepare(
                    context, host, claim['deployable']['name'],
                    claim['deployable']['driver_name'], claim['handle'],
                    arq_uuid=uuid if join else None)
                outcome = _Outcome(uuid, context, claim, None, info)
                break
            except Exception as e:
                reason = _reason(e)
                left = self._seconds_left(claim)
                if not unreachable(e):
                    LOG.warning('Preparing device for ARQ %s failed: %s',
                                uuid, reason)
                    outcome = _Outcome(uuid, context, claim,
                                       'Preparing the device failed: %s'
                                       % reason)
                    break
                if left <= 0:
                    LOG.warning('Preparing device for ARQ %s: the agent on '
                                '%s did not answer before the bind\'s '
                                'deadline (%s); failing it', uuid, host,
                                reason)
                    outcome = _Outcome(
                        uuid, context, claim,
                        'Preparing the device failed: the agent on %s did '
                        'not answer within %g s (%s: %s)'
                        % (host, self.bind_timeout, type(e).__name__,
                           reason))
                    break
                delay = min(delay, left)
                LOG.warning('Preparing device for ARQ %s: the agent on %s '
                            'did not answer (%s: %s); asking again in '
                            '%.1f s (%.0f s left before the bind fails)',
                            uuid, host, type(e).__name__, reason, delay,
                            left)
                if self._stopping.wait(delay):
                    # Stopping: the ARQ stays BindStarted, and a peer (or
                    # this conductor's next run) takes it over.
                    return
                delay = min(delay * 2, self.retry_max_delay)
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
        except Exception as e:
            # The ARQs stay BindStarted and held by this conductor: its
            # next heartbeat drives them again.
            if not self.db.failed(e, 'recording bind outcomes'):
                LOG.exception('Recording the outcome of %d ARQ(s) failed; '
                              'will retry', len(reasons))
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
        """Drive ARQs left in BindStarted that no conductor holds: all of
        them at start, then periodically those no conductor picked up for
        stale_after seconds (their bind message was lost: the broker or
        the database was down). Binds held by a conductor that died are
        taken over by the heartbeat.
        """
        context = cyborg_context.get_admin_context()
        stuck = bindings.bind_started(older_than, unowned=True)
        for instance, uuids in stuck.items():
            LOG.info('Re-driving %d ARQ(s) of instance %s left in '
                     'BindStarted', len(uuids), instance)
        self.bind(context, [u for uuids in stuck.values() for u in uuids],
                  wait=wait)
        return sum(len(u) for u in stuck.values())

    # Heartbeat and failover -------------------------------------------------

    def heartbeat(self):
        """Tell the peers this conductor is alive, take over the binds of
        conductors that are not, and drive again those this one holds but
        has nothing running for (taken over, or their outcome could not
        be recorded). Returns how many it (re-)drove.
        """
        try:
            conductors.heartbeat(self.name)
            taken = conductors.take_over(self.name, self.heartbeat_timeout)
            held = conductors.held_by(self.name)
        except Exception as e:
            if not self.db.failed(e, 'heartbeating'):
                LOG.exception('Conductor heartbeat failed; will retry')
            return 0
        self.db.ok()
        for holder, uuids in taken.items():
            LOG.warning('Taking over %d bind(s) from conductor %s, which '
                        'has not heartbeat for %.0f s: %s', len(uuids),
                        holder, self.heartbeat_timeout, ' '.join(uuids))
        with self._lock:
            deferred, self._deferred = self._deferred, {}
            idle = [u for u in held if u not in self._preparing
                    and u not in deferred]
        context = cyborg_context.get_admin_context()
        for uuid in idle:
            deferred[uuid] = context
        self._claims.run([(ctx, uuid) for uuid, ctx in deferred.items()],
                         wait=False)
        return len(deferred)

    # Notifying Nova --------------------------------------------------------

    def notify_soon(self):
        self._loop.wake()

    def start(self):
        self._heartbeat_loop.start()
        self._loop.start()

    def stop(self, timeout=10):
        """Stop the loops and any prepare waiting to ask again; a bind
        still in an agent's hands finishes in the background, or is taken
        over by a peer right away: this conductor's heartbeat row goes.
        """
        self._stopping.set()
        self._heartbeat_loop.stop(timeout)
        self._loop.stop(timeout)
        self._preparers.shutdown(wait=False, cancel_futures=True)
        try:
            conductors.forget(self.name)
        except Exception as e:
            LOG.warning('Could not remove conductor %s from the database '
                        '(%s); peers take its binds over after %.0f s',
                        self.name, e, self.heartbeat_timeout)

    def _sweep(self):
        # Woken after each bind, the pass only has events to send; the
        # search for stuck ARQs is periodic work and keeps to its interval.
        now = time.monotonic()
        try:
            if now >= self._next_recover:
                self._next_recover = now + self.sweep_interval
                # Not waiting for the prepares: events keep flowing
                # meanwhile.
                self.recover(older_than=self.stale_after, wait=False)
            self.notify_pending()
        except Exception as e:
            if not self.db.failed(e, 'sending Nova events'):
                raise
            return
        self.db.ok()

    def notify_pending(self):
        """Send every undelivered event; returns how many were delivered."""
        events = bindings.pending_events()
        if events and self.notifier.send(events):
            bindings.events_delivered([e['tag'] for e in events])
            return len(events)
        return 0
