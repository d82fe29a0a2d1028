# SPDX-License-Identifier: Apache-2.0
"""The agent's periodic report pass and its RPC endpoint.

Prepares (RPC 1.2): prepare_batch() starts each of a batch's prepares on
its own thread and answers once all ended or after the conductor's
bounded wait, listing those still running as pending; the conductor then
asks for each of them with prepare(arq_uuid=...), which joins the prepare
already running instead of starting the driver's prepare a second time.
The in-flight table keyed by (ARQ, handle) keeps a finished prepare's
outcome for PREPARED_KEEP seconds, so a conductor asking again (its reply
was lost, or a peer took the bind over) gets that outcome, until the
handle is released.
"""

import collections
from concurrent import futures
import threading
import time

from oslo_log import log
import oslo_messaging as messaging
from stevedore import driver as stevedore_driver

from cyborg.agent import metrics
from cyborg.agent import providers
from cyborg.agent import share_pools
from cyborg.common import lifecycle
from cyborg.common import loop
from cyborg.conf import CONF
from cyborg import context as cyborg_context
from cyborg import drivers as drivers_pkg
from cyborg.drivers import base
from cyborg.placement import client as placement

LOG = log.getLogger(__name__)
WAKE_MIN_GAP = 1.0
# Seconds a finished prepare of a known ARQ stays in the in-flight table
# for a conductor asking again (its reply was lost, or a peer took the
# bind over): longer than the RPC timeout (60 s) plus the conductor's
# back-off between two asks (10 s) and its heartbeat timeout (6 s).
PREPARED_KEEP = 120.0
# The longest a batch waits for its prepares, whatever the caller asks.
BATCH_WAIT_MAX = 30.0


class InvalidDriver(Exception):
    pass


def _message(exc):
    """What a failed prepare reports to the conductor."""
    if exc.args and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc) or type(exc).__name__


def load_drivers(names):
    drivers = []
    for name in names:
        try:
            drivers.append(stevedore_driver.DriverManager(
                drivers_pkg.NAMESPACE, name, invoke_on_load=True).driver)
        except Exception as e:
            raise InvalidDriver('Cannot load accelerator driver %r from %s: '
                                '%s' % (name, drivers_pkg.NAMESPACE, e))
    return drivers


def annotate(devices, nodename):
    """Give each deployable its provider uuid and Cyborg-style attributes
    (`rc`, `trait0..N`) before the report goes to the conductor.
    """
    for device in devices:
        traits = providers.device_traits(device)
        for dep in device.deployables:
            dep.rp_uuid = providers.provider_uuid(nodename, dep.name)
            attrs = {'rc': dep.resource_class}
            for n, trait in enumerate(sorted(traits | set(dep.traits))):
                attrs['trait%d' % n] = trait
            dep.attributes = dict(attrs, **dep.attributes)
    return devices


class AgentManager:
    target = messaging.Target(version='1.2')

    def __init__(self, conductor_api, placement_client, drivers=None,
                 host=None, nodename=None):
        self.host = host or CONF.host
        self.nodename = (nodename or CONF.agent.resource_provider_name
                         or self.host)
        self.conductor_api = conductor_api
        self.drivers = drivers if drivers is not None else load_drivers(
            CONF.agent.enabled_drivers)
        self.sync = providers.ProviderSync(placement_client, self.nodename)
        self.pools = share_pools.SharePools(placement_client, self.nodename)
        self.context = cyborg_context.get_admin_context()
        # Binds and releases wake the loop to re-settle lifecycle; a burst
        # of them costs one pass a second at most.
        self._loop = loop.Loop('agent-report', self._periodic_pass,
                               lambda: CONF.agent.report_interval,
                               setup=self._wait_for_compute_node,
                               min_gap=WAKE_MIN_GAP)
        self._passes = 0
        self.last_writes = None
        self._sync_lock = threading.RLock()
        self._fenced = set()
        # What the conductor said on the last pass (None: nothing yet).
        self._in_use = None
        self._excluded = set()
        self._reclaims = {}           # cpid key → when it was asked for
        self._resets = {}             # cpid key → when it was asked for
        # (action, cpid key) → the last Reclaim or Reset condition
        self._reclaim_results = {}
        self._unowned_since = {}      # cpid key → orphan timer start
        self._states = {}             # cpid key → (phase, state) last seen
        self.clock = time.monotonic
        self.last_devices = []
        self.last_in_use = {}
        # (ARQ uuid or None, handle uuid): future of its prepare; finished
        # ones of a known ARQ are kept (see PREPARED_KEEP), in the order
        # they finished.
        self._prepares_lock = threading.Lock()
        self._prepares = {}
        self._finished = collections.deque()
        # Prepares of a batch, each on its own thread, as many at once as
        # the RPC server has threads.
        self._preparers = futures.ThreadPoolExecutor(
            max_workers=64, thread_name_prefix='agent-prepare')

    # RPC endpoint ----------------------------------------------------------

    def resync(self, context):
        self._loop.wake()

    @messaging.expected_exceptions(base.PrepareError)
    def prepare(self, context, deployable_name, driver_name, handle,
                arq_uuid=None):
        """The driver's prepare() of `handle`, or (1.2, with `arq_uuid`)
        the outcome of the one already running or recently finished for
        that ARQ and handle (prepare_batch answered it pending).
        """
        future, start = self._start(arq_uuid, handle)
        if start:
            # In this thread: nothing else waits on it.
            self._run_prepare(future, arq_uuid, deployable_name,
                              driver_name, handle)
        return future.result()

    def prepare_batch(self, context, items, wait):
        """Prepare several handles at once (1.2): items are {arq_uuid,
        deployable_name, driver_name, handle}. Each prepare runs on its
        own thread; the answer comes once all ended or after `wait`
        seconds, one entry per ARQ: {'info': attach info updates or
        None}, {'error': the driver's error}, or {'pending': True} for a
        prepare still running (ask prepare() with its arq_uuid for its
        outcome). One ARQ's failure is its own.
        """
        running = {}
        for item in items:
            handle = item['handle']
            future, start = self._start(item['arq_uuid'], handle)
            if start:
                self._preparers.submit(
                    self._run_prepare, future, item['arq_uuid'],
                    item['deployable_name'], item['driver_name'], handle,
                    log_errors=True)
            running[item['arq_uuid']] = future
        futures.wait(list(running.values()),
                     timeout=max(0.0, min(float(wait), BATCH_WAIT_MAX)))
        results = {}
        for arq_uuid, future in running.items():
            if not future.done():
                results[arq_uuid] = {'pending': True}
            elif future.exception() is not None:
                results[arq_uuid] = {'error': _message(future.exception())}
            else:
                results[arq_uuid] = {'info': future.result()}
        return results

    def _start(self, arq_uuid, handle):
        """The future of the (ARQ, handle) prepare, and whether the caller
        must run it (none was running or kept).
        """
        key = (arq_uuid, handle['uuid'])
        with self._prepares_lock:
            self._forget_finished()
            future = self._prepares.get(key)
            if future is not None:
                return future, False
            future = futures.Future()
            future.set_running_or_notify_cancel()
            self._prepares[key] = future
            return future, True

    def _run_prepare(self, future, arq_uuid, deployable_name, driver_name,
                     handle, log_errors=False):
        try:
            try:
                info = self._driver(driver_name).prepare(deployable_name,
                                                         handle)
            finally:
                self._republish(driver_name)
        except Exception as e:
            # (An error prepare() raises is logged by oslo.messaging.)
            if log_errors and not isinstance(e, base.PrepareError):
                LOG.exception('Preparing handle %s of %s failed',
                              handle['uuid'], deployable_name)
            future.set_exception(e)
        else:
            future.set_result(info)
        finally:
            key = (arq_uuid, handle['uuid'])
            with self._prepares_lock:
                if arq_uuid is None:
                    # Nobody can ask for it again by its ARQ.
                    if self._prepares.get(key) is future:
                        del self._prepares[key]
                else:
                    self._finished.append((time.monotonic(), key, future))

    def _forget_finished(self):
        """Drop kept outcomes older than PREPARED_KEEP (lock held)."""
        cutoff = time.monotonic() - PREPARED_KEEP
        while self._finished and self._finished[0][0] < cutoff:
            _, key, future = self._finished.popleft()
            if self._prepares.get(key) is future:
                del self._prepares[key]

    def _forget_prepares(self, handle_uuids):
        """Released handles: a later bind prepares them afresh."""
        with self._prepares_lock:
            for key in [k for k in self._prepares if k[1] in handle_uuids]:
                if self._prepares[key].done():
                    del self._prepares[key]

    def release(self, context, handles):
        self._forget_prepares({h['uuid'] for h in handles})
        for handle in handles:
            try:
                self._driver(handle['driver_name']).release(
                    handle['deployable_name'], handle)
            except Exception:
                LOG.exception('Releasing handle %s failed', handle['uuid'])
        for name in {h['driver_name'] for h in handles}:
            self._republish(name)
        # The device is free now: a pass of the agent's own learns that
        # from the conductor and re-settles its lifecycle (Managed back to
        # Unclaimed; unfencing a whole GPU that was passed through).
        self._loop.wake()

    def _republish(self, driver_name):
        """A driver whose inventories follow what is bound (MIG: what still
        fits) tells Placement before the bind completes, so the next claim
        is judged on the new layout. True for such drivers.
        """
        if not self._driver(driver_name).inventory_follows_bindings:
            return False
        try:
            with self._sync_lock:
                devices = self.pools.filter(self.discover())
                self.sync.sync(providers.wanted_providers(
                    self.nodename, devices, self._fenced))
        except Exception as e:
            LOG.warning('Could not republish inventories after a binding '
                        'change (the next pass will): %s', e)
        return True

    def _driver(self, name):
        for drv in self.drivers:
            if drv.name == name:
                return drv
        raise InvalidDriver('No enabled driver %r on host %s'
                            % (name, self.host))

    # Report pass -----------------------------------------------------------

    def discover(self):
        devices = []
        for drv in self.drivers:
            devices.extend(drv.discover())
        return annotate(devices, self.nodename)

    def report_once(self, full=False):
        """Discover, settle each device's lifecycle, store via the
        conductor, then sync Placement.

        Returns (DB writes, Placement writes). A driver error aborts the
        pass: a partial report would look like vanished devices.
        """
        with self._sync_lock:
            devices = self._observe()
            result = self.conductor_api.report_data(self.context, self.host,
                                                    devices)
            stale = False
            # Claims, exclusions, share modes and reclaims change what the
            # devices look like (MIG instances that are no orphans after
            # all, a share pool, a device handed back to its driver):
            # settle and report again.
            if self._absorb(result, devices):
                devices = self._observe()
                stale = True
            if self._reclaim(devices):
                devices = self._observe()
                stale = True
            writes = self._publish(result, devices, full)
            # Share pools need the GPU providers to exist; taking or
            # giving one back changes the share providers to publish.
            if self.pools.apply(devices):
                devices = self._observe()
                writes += self._publish(result, devices)
                stale = True
            if stale:
                # After Placement: once the API shows a device free,
                # Placement offers it too.
                result = self.conductor_api.report_data(
                    self.context, self.host, devices)
        self._passes += 1
        self.last_writes = (result['writes'], writes)
        return self.last_writes

    def _observe(self):
        return self.pools.filter(self._settle(self.discover()))

    def _publish(self, result, devices, full=False):
        self._fenced = set(result['fenced']) | {
            d.cpid_key for d in devices if not lifecycle.offered(d)}
        self.last_devices = devices
        wanted = providers.wanted_providers(self.nodename, devices,
                                            self._fenced)
        return self.sync.sync(wanted, full=full)

    # Lifecycle -------------------------------------------------------------

    def _claimed(self, device):
        if self._in_use is None:
            return None
        return any(dep.name in self._in_use for dep in device.deployables)

    def _settle(self, devices):
        """Phase, management state and conditions of every device."""
        now = self.clock()
        timers = {}
        for device in devices:
            key = device.cpid_key
            since = lifecycle.classify(device, lifecycle.Facts(
                claimed=self._claimed(device),
                excluded=key in self._excluded,
                unowned_since=self._unowned_since.get(key)), now)
            if since is not None:
                timers[key] = since
            for action in ('reclaim', 'reset'):
                if (action, key) in self._reclaim_results:
                    device.conditions.append(
                        self._reclaim_results[(action, key)])
            self._log_transition(device)
        self._unowned_since = timers
        return devices

    def _log_transition(self, device):
        now = (device.phase, device.management_state)
        before = self._states.get(device.cpid_key)
        self._states[device.cpid_key] = now
        if before is None or before == now or self._in_use is None:
            return
        log = LOG.warning if now[0] in ('Failed', 'Lost') or \
            now[1] == 'Orphaned' else LOG.info
        log('Device %s (%s): %s/%s -> %s/%s (%s)',
            device.deployables[0].name if device.deployables else '?',
            device.model, before[0], before[1], now[0], now[1],
            '; '.join('%s %s' % (c['type'], c['reason'])
                      for c in device.conditions if c['status'] != 'True'))

    def _absorb(self, result, devices=()):
        """Take the conductor's view (claims, exclusions, share modes,
        reclaim requests); True when it changes how devices are
        classified.
        """
        in_use = result.get('in_use', {})
        excluded = set(result.get('excluded', []))
        changed = in_use != self._in_use or excluded != self._excluded
        self._in_use, self._excluded = in_use, excluded
        self.last_in_use = in_use
        self._reclaims = dict(result.get('reclaim', {}))
        self._resets = dict(result.get('reset', {}))
        changed = self.pools.set_requested(result.get('share', {})) \
            or changed
        changed = self._set_share_modes(devices) or changed
        return self._reconcile(in_use) or changed

    def _set_share_modes(self, devices):
        """Give drivers the share modes operators set (before discovery,
        like reconcile).
        """
        modes = self.pools.modes_by_name(devices)
        changed = False
        for drv in self.drivers:
            changed = drv.set_share_modes(modes) or changed
        return changed

    def _reconcile(self, in_use):
        """Tell drivers which handles bindings hold; record what they had
        to re-make. True when a driver changed something.
        """
        changed = False
        for drv in self.drivers:
            drv_changed, updates = drv.reconcile(in_use)
            changed = changed or drv_changed
            if updates:
                self.conductor_api.update_handles(self.context, updates)
        return changed

    def _reclaim(self, devices):
        """Carry out admitted reclaim and reset requests, fail-closed: the
        device must be Orphaned (reclaim) or Failed/Lost (reset) now, no
        binding may hold it, Placement must show no allocation on its
        providers, and its driver must find nothing using it. True when
        an outcome changed (it goes into the device's conditions, type
        Reclaim or Reset).
        """
        acted = False
        for device in devices:
            for action, requests in (('reclaim', self._reclaims),
                                     ('reset', self._resets)):
                requested = requests.get(device.cpid_key)
                if requested is None:
                    continue
                key = (action, device.cpid_key)
                last = self._reclaim_results.get(key, {})
                if last.get('requested_at') == requested and \
                        last.get('reason') != 'Held':
                    continue   # done; the conductor clears the request
                status, reason, message = self._try_reclaim(device, action)
                result = dict(lifecycle.condition(
                    action.capitalize(), status, reason, message),
                    requested_at=requested)
                acted = acted or result != last
                self._reclaim_results[key] = result
        return acted

    def _gate(self, device, action):
        """Why the device's state does not allow `action`, or None; a
        (status, reason, message) for a request to hold.
        """
        if action == 'reset':
            if device.phase not in ('Failed', 'Lost'):
                return ('False', 'Refused', 'the device is %s, not Failed '
                        'or Lost' % device.phase)
            return None
        state = device.management_state
        if state == 'Unknown' and any(
                c['reason'] == 'OrphanPending' for c in device.conditions):
            return ('Unknown', 'Held', 'held until the orphan wait ends')
        if state != 'Orphaned':
            return ('False', 'Refused',
                    'the device is %s, not Orphaned' % state)
        return None

    def _try_reclaim(self, device, action='reclaim'):
        refused = self._gate(device, action)
        if refused:
            return refused
        if self._claimed(device) is not False:
            return 'False', 'Refused', 'a binding holds the device'
        try:
            for dep in device.deployables:
                if dep.rp_uuid and any(self.sync.client.usages(
                        dep.rp_uuid).values()):
                    return ('False', 'Refused',
                            'Placement has allocations on provider %s'
                            % dep.rp_uuid)
        except placement.PlacementError as e:
            return ('False', 'OccupancyUnknown',
                    'cannot read allocations from Placement: %s' % e)
        dep = device.deployables[0]
        drv = self._driver(dep.driver_name)
        try:
            done = drv.reclaim(dep.name)
        except base.Unsupported as e:
            return 'False', 'Refused', str(e)
        except base.Busy as e:
            LOG.warning('Not %sing %s: %s', action, dep.name, e)
            return ('False', 'Refused' if e.reason == 'Busy' else e.reason,
                    str(e))
        except Exception as e:
            LOG.warning('%s of %s failed: %s', action.capitalize(),
                        dep.name, e)
            return 'False', 'Failed', str(e)
        LOG.info('%s device %s: %s', 'Reclaimed' if action == 'reclaim'
                 else 'Reset', dep.name, done)
        self._unowned_since.pop(device.cpid_key, None)
        return 'True', 'Succeeded', done

    def start(self):
        for drv in self.drivers:
            drv.start()
        self._loop.start()

    def stop(self, timeout=10):
        self._loop.stop(timeout)
        self._preparers.shutdown(wait=False)
        for drv in self.drivers:
            drv.stop()

    def _wait_for_compute_node(self, stopped):
        try:
            self.sync.wait_for_compute_node(
                CONF.agent.placement_retry_max_delay, stop=stopped,
                sleep=stopped.wait)
        except providers.ComputeNodeNotFound:
            return False

    def _periodic_pass(self):
        full = self._passes % CONF.agent.full_resync_interval == 0
        started = time.monotonic()
        try:
            self.report_once(full=full)
        except (placement.PlacementError, messaging.MessagingException,
                providers.ComputeNodeNotFound) as e:
            LOG.warning('Report pass failed, will retry: %s', e)
            self.sync.root_uuid = None
            metrics.observe_report(time.monotonic() - started, ok=False)
        else:
            metrics.observe_report(time.monotonic() - started)
