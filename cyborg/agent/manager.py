"""The agent's periodic report pass and its RPC endpoint."""

import threading

from oslo_log import log
import oslo_messaging as messaging
from stevedore import driver as stevedore_driver

from cyborg.agent import providers
from cyborg.common import loop
from cyborg.conf import CONF
from cyborg import context as cyborg_context
from cyborg import drivers as drivers_pkg
from cyborg.drivers import base
from cyborg.placement import client as placement

LOG = log.getLogger(__name__)


class InvalidDriver(Exception):
    pass


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
    (`rc`, `trait0..N`) before the report goes to the conductor."""
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
    target = messaging.Target(version='1.1')

    def __init__(self, conductor_api, placement_client, drivers=None,
                 host=None, nodename=None):
        self.host = host or CONF.host
        self.nodename = (nodename or CONF.agent.resource_provider_name
                         or self.host)
        self.conductor_api = conductor_api
        self.drivers = drivers if drivers is not None else load_drivers(
            CONF.agent.enabled_drivers)
        self.sync = providers.ProviderSync(placement_client, self.nodename)
        self.context = cyborg_context.get_admin_context()
        self._loop = loop.Loop('agent-report', self._periodic_pass,
                               lambda: CONF.agent.report_interval,
                               setup=self._wait_for_compute_node)
        self._passes = 0
        self.last_writes = None
        self._sync_lock = threading.RLock()
        self._fenced = set()

    # RPC endpoint ----------------------------------------------------------

    def resync(self, context):
        self._loop.wake()

    @messaging.expected_exceptions(base.PrepareError)
    def prepare(self, context, deployable_name, driver_name, handle):
        try:
            return self._driver(driver_name).prepare(deployable_name, handle)
        finally:
            self._republish(driver_name)

    def release(self, context, handles):
        for handle in handles:
            try:
                self._driver(handle['driver_name']).release(
                    handle['deployable_name'], handle)
            except Exception:
                LOG.exception('Releasing handle %s failed', handle['uuid'])
        for name in {h['driver_name'] for h in handles}:
            self._republish(name)

    def _republish(self, driver_name):
        """A driver whose inventories follow what is bound (MIG: what still
        fits) tells Placement before the bind completes, so the next claim
        is judged on the new layout."""
        drv = self._driver(driver_name)
        if not getattr(drv, 'inventory_follows_bindings', False):
            return
        try:
            with self._sync_lock:
                devices = self.discover()
                self.sync.sync(providers.wanted_providers(
                    self.nodename, devices, self._fenced))
        except Exception as e:
            LOG.warning('Could not republish inventories after a binding '
                        'change (the next pass will): %s', e)

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
        """Discover, store via the conductor, then sync Placement.

        Returns (DB writes, Placement writes). A driver error aborts the
        pass: a partial report would look like vanished devices.
        """
        with self._sync_lock:
            devices = self.discover()
            result = self.conductor_api.report_data(self.context, self.host,
                                                    devices)
            if self._reconcile(result.get('in_use', {})):
                # What bindings own changes what the devices look like
                # (e.g. MIG instances that are not orphans after all).
                devices = self.discover()
                result = self.conductor_api.report_data(
                    self.context, self.host, devices)
            self._fenced = set(result['fenced'])
            wanted = providers.wanted_providers(self.nodename, devices,
                                                self._fenced)
            writes = self.sync.sync(wanted, full=full)
        self._passes += 1
        self.last_writes = (result['writes'], writes)
        return self.last_writes

    def _reconcile(self, in_use):
        """Tell drivers which handles bindings hold; record what they had
        to re-make. True when a driver changed something."""
        changed = False
        for drv in self.drivers:
            if not hasattr(drv, 'reconcile'):
                continue
            drv_changed, updates = drv.reconcile(in_use)
            changed = changed or drv_changed
            if updates:
                self.conductor_api.update_handles(self.context, updates)
        return changed

    def start(self):
        self._loop.start()

    def stop(self, timeout=10):
        self._loop.stop(timeout)

    def _wait_for_compute_node(self, stopped):
        try:
            self.sync.wait_for_compute_node(
                CONF.agent.placement_retry_max_delay, stop=stopped,
                sleep=stopped.wait)
        except providers.ComputeNodeNotFound:
            return False

    def _periodic_pass(self):
        full = self._passes % CONF.agent.full_resync_interval == 0
        try:
            self.report_once(full=full)
        except (placement.PlacementError, messaging.MessagingException,
                providers.ComputeNodeNotFound) as e:
            LOG.warning('Report pass failed, will retry: %s', e)
            self.sync.root_uuid = None
