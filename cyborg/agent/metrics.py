# SPDX-License-Identifier: Apache-2.0
"""Prometheus metrics of the agent: GET /metrics on [agent] metrics_listen
and metrics_port (0: off).

Everything is read at scrape time: the devices of the last report pass
(`agent.last_devices`), what bindings hold (`agent.last_in_use`), and, for
drivers whose `telemetry(address)` hook answers, live readings (memory,
utilisation, temperature, power, ECC, MIG instances and the processes NVML
attributes to them). The registry is our own, never prometheus_client's
global one, so nothing else in the process leaks into the scrape.

Metric names (labels host, device = PCI address, uuid, model on each
per-device metric):

    cyborg_gpu_memory_used_bytes, cyborg_gpu_memory_total_bytes
    cyborg_gpu_utilization_ratio, cyborg_gpu_memory_utilization_ratio (0-1)
    cyborg_gpu_temperature_celsius, cyborg_gpu_power_watts
    cyborg_gpu_ecc_errors_total{type=corrected|uncorrected}  (gauge of the
        volatile counter, which a driver reload resets)
    cyborg_gpu_xid_errors_total{xid}    (from the driver's health monitor)
    cyborg_gpu_mig_instances{profile}
    cyborg_mig_instance_memory_used_bytes{mig_uuid, profile, start, arq,
        server}  (summed memory of the processes NVML puts in the MIG
        instance; arq/server are empty for an instance no ARQ holds)
    cyborg_device_phase{phase}, cyborg_device_management_state{state}
        (state sets: 1 for the current value, 0 for the others)
    cyborg_device_condition{type, status}
    cyborg_agent_devices
    cyborg_agent_report_seconds (histogram of report pass durations)
    cyborg_agent_report_failures_total
    cyborg_agent_last_report_timestamp_seconds
"""

import json
import threading
import time

from oslo_log import log
import prometheus_client
from prometheus_client import core

from cyborg.common import wsgi_server

LOG = log.getLogger(__name__)

try:
    from cyborg.common import lifecycle as _lifecycle
    PHASES = tuple(_lifecycle.PHASES)
    STATES = tuple(_lifecycle.STATES)
except (ImportError, AttributeError):   # pragma: no cover
    PHASES = ('Pending', 'Initializing', 'Ready', 'Reconfiguring',
              'Passthrough', 'Failed', 'Lost')
    STATES = ('Managed', 'Excluded', 'Orphaned', 'Unclaimed', 'Unknown')

DEVICE_LABELS = ('host', 'device', 'uuid', 'model')
REPORT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                  30.0, 60.0)


class ReportStats:
    """Durations and outcome of report passes. The agent calls
    `observe_report(seconds)` after each pass (module level, so the
    manager needs no reference to the metrics server).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self.histogram = prometheus_client.Histogram(
            'cyborg_agent_report_seconds',
            'Duration of agent report passes (discover, report to the '
            'conductor, sync Placement).', buckets=REPORT_BUCKETS,
            registry=None)
        self.failures = prometheus_client.Counter(
            'cyborg_agent_report_failures',
            'Report passes that failed.', registry=None)
        self.last_timestamp = None

    def observe(self, seconds, ok=True, when=None):
        self.histogram.observe(seconds)
        if not ok:
            self.failures.inc()
            return
        with self._lock:
            self.last_timestamp = time.time() if when is None else when

    def collect(self):
        yield from self.histogram.collect()
        yield from self.failures.collect()
        if self.last_timestamp is not None:
            yield core.GaugeMetricFamily(
                'cyborg_agent_last_report_timestamp_seconds',
                'When the last successful report pass ended (Unix time).',
                value=self.last_timestamp)


REPORTS = ReportStats()


def observe_report(seconds, ok=True):
    """Record one report pass of `seconds` (ok=False: it failed)."""
    REPORTS.observe(seconds, ok)


def _address(device):
    if device.deployables:
        return device.deployables[0].name
    info = (device.controlpath_id or {}).get('cpid_info') or {}
    if isinstance(info, dict) and 'bus' in info:
        return '%s:%s:%s.%s' % (info['domain'], info['bus'], info['device'],
                                info['function'])
    return str(info)


def _uuid(device):
    board = device.std_board_info or {}
    return str(board.get('uuid') or device.vendor_board_info or '')


def _arq_by_instance(handles):
    """MIG instance → the ARQ holding it, from what bindings hold on one
    deployable: keyed by MIG UUID and by (profile, start) (GI ids are
    reused, placements are not).
    """
    out = {}
    for handle in handles or ():
        try:
            info = handle.get('attach_info') or {}
            if isinstance(info, str):
                info = json.loads(info)
        except (ValueError, AttributeError):
            continue
        if 'mig_start' not in info and 'mig_uuid' not in info:
            continue
        owner = (handle.get('arq_uuid') or '',
                 handle.get('instance_uuid') or '')
        if info.get('mig_uuid'):
            out[info['mig_uuid']] = owner
        if 'mig_start' in info:
            try:
                out[(info.get('mig_profile'), int(info['mig_start']))] = owner
            except (TypeError, ValueError):
                pass
    return out


def _xid_counts(driver, address, uuid):
    """{xid: count} from the driver's health monitor (Driver.health), if it
    has one: `xid_counts()` → {GPU uuid (or address): {xid: count}}.
    """
    if driver is None or driver.health is None:
        return {}
    try:
        all_counts = driver.health.xid_counts() or {}
    except Exception as e:
        LOG.debug('XID counts unavailable: %s', e)
        return {}
    found = all_counts.get(address)
    if found is None:
        found = all_counts.get(uuid)
    return found if isinstance(found, dict) else {}


class _Families:
    """The metric families of one scrape."""

    def __init__(self):
        def gauge(name, doc, extra=()):
            return core.GaugeMetricFamily(name, doc,
                                          labels=DEVICE_LABELS + extra)
        self.memory_used = gauge('cyborg_gpu_memory_used_bytes',
                                 'GPU memory in use (bytes).')
        self.memory_total = gauge('cyborg_gpu_memory_total_bytes',
                                  'GPU memory in all (bytes).')
        self.util = gauge('cyborg_gpu_utilization_ratio',
                          'Share of the last sample period the GPU was '
                          'busy (0-1).')
        self.mem_util = gauge('cyborg_gpu_memory_utilization_ratio',
                              'Share of the last sample period GPU memory '
                              'was read or written (0-1).')
        self.temperature = gauge('cyborg_gpu_temperature_celsius',
                                 'GPU core temperature.')
        self.power = gauge('cyborg_gpu_power_watts', 'GPU power draw.')
        self.ecc = gauge('cyborg_gpu_ecc_errors_total',
                         'Volatile ECC error counts (since the last driver '
                         'load).', ('type',))
        self.xid = core.CounterMetricFamily(
            'cyborg_gpu_xid_errors', 'XID errors seen since the agent '
            'started.', labels=DEVICE_LABELS + ('xid',))
        self.mig = gauge('cyborg_gpu_mig_instances',
                         'Live MIG GPU instances by profile.', ('profile',))
        self.mig_memory = gauge(
            'cyborg_mig_instance_memory_used_bytes',
            'Memory of the processes NVML attributes to a MIG instance, '
            'with the ARQ (and server) holding it.',
            ('mig_uuid', 'profile', 'start', 'arq', 'server'))
        self.phase = gauge('cyborg_device_phase',
                           'Device phase (1 for the current one).',
                           ('phase',))
        self.state = gauge('cyborg_device_management_state',
                           'Device management state (1 for the current '
                           'one).', ('state',))
        self.condition = gauge('cyborg_device_condition',
                               'Device conditions (1 per condition type '
                               'and status).', ('type', 'status'))

    def all(self):
        return [self.memory_used, self.memory_total, self.util,
                self.mem_util, self.temperature, self.power, self.ecc,
                self.xid, self.mig, self.mig_memory, self.phase, self.state,
                self.condition]


def _put(family, labels, value, scale=1.0):
    if value is not None:
        family.add_metric(labels, value * scale)


class AgentCollector:
    """A prometheus_client collector over an AgentManager (anything with
    `host`, `drivers`, `last_devices` and `last_in_use`).
    """

    def __init__(self, agent, reports=None):
        self.agent = agent
        self.reports = reports or REPORTS

    def describe(self):
        # Unknown until a scrape: don't let register() call collect().
        return []

    def collect(self):
        agent = self.agent
        host = str(getattr(agent, 'host', '') or '')
        devices = list(getattr(agent, 'last_devices', None) or [])
        in_use = getattr(agent, 'last_in_use', None) or {}
        drivers = {getattr(d, 'name', None): d
                   for d in getattr(agent, 'drivers', None) or []}
        f = _Families()
        for device in devices:
            try:
                self._device(f, host, device, drivers, in_use)
            except Exception:
                LOG.exception('Metrics of device %s failed',
                              _address(device))
        yield from f.all()
        yield self._count(host, devices)
        yield from self.reports.collect()

    @staticmethod
    def _count(host, devices):
        family = core.GaugeMetricFamily(
            'cyborg_agent_devices', 'Devices in the last report pass.',
            labels=('host',))
        family.add_metric([host], len(devices))
        return family

    def _device(self, f, host, device, drivers, in_use):
        address = _address(device)
        uuid = _uuid(device)
        labels = [host, address, uuid, str(device.model or '')]
        phase = getattr(device, 'phase', None)
        if phase:
            for value in PHASES + (() if phase in PHASES else (phase,)):
                f.phase.add_metric(labels + [value], int(value == phase))
        state = getattr(device, 'management_state', None)
        if state:
            for value in STATES + (() if state in STATES else (state,)):
                f.state.add_metric(labels + [value], int(value == state))
        for cond in getattr(device, 'conditions', None) or ():
            if isinstance(cond, dict) and cond.get('type'):
                f.condition.add_metric(
                    labels + [str(cond['type']), str(cond.get('status'))], 1)
        driver_name = device.deployables[0].driver_name \
            if device.deployables else None
        driver = drivers.get(driver_name)
        for xid, count in sorted(_xid_counts(driver, address, uuid).items(),
                                 key=lambda kv: str(kv[0])):
            f.xid.add_metric(labels + [str(xid)], count)
        data = driver.telemetry(address) if driver is not None else None
        if not data:
            return
        _put(f.memory_used, labels, data.get('memory_used'))
        _put(f.memory_total, labels, data.get('memory_total'))
        _put(f.util, labels, data.get('utilization_gpu'), 0.01)
        _put(f.mem_util, labels, data.get('utilization_memory'), 0.01)
        _put(f.temperature, labels, data.get('temperature_c'))
        _put(f.power, labels, data.get('power_mw'), 0.001)
        for kind in ('corrected', 'uncorrected'):
            _put(f.ecc, labels + [kind],
                 data.get('ecc_volatile_' + kind))
        instances = data.get('mig_instances') or []
        per_profile = {}
        for mi in instances:
            per_profile[mi['profile']] = per_profile.get(mi['profile'], 0) + 1
        for profile, count in sorted(per_profile.items()):
            f.mig.add_metric(labels + [profile], count)
        owners = _arq_by_instance(in_use.get(address))
        for mi in instances:
            owner = owners.get(mi.get('mig_uuid')) or owners.get(
                (mi['profile'], mi.get('start')), ('', ''))
            _put(f.mig_memory,
                 labels + [str(mi.get('mig_uuid') or ''), mi['profile'],
                           str(mi.get('start')), owner[0], owner[1]],
                 mi.get('memory_used'))


def registry_for(agent, reports=None):
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(agent, reports))
    return registry


def make_app(agent, reports=None):
    """The WSGI app serving the agent's metrics at /metrics."""
    metrics = prometheus_client.make_wsgi_app(registry_for(agent, reports))

    def app(environ, start_response):
        if environ.get('PATH_INFO') in ('/metrics', '/metrics/'):
            return metrics(environ, start_response)
        start_response('404 Not Found',
                       [('Content-Type', 'text/plain; charset=utf-8')])
        return [b'Not found: the agent serves /metrics only\n']
    return app


def serve(agent, host='127.0.0.1', port=0):
    """Start serving GET /metrics in a background thread; returns the
    started ThreadedServer (its `port` is the real one when port=0).
    """
    server = wsgi_server.ThreadedServer('cyborg-agent-metrics',
                                        make_app(agent), host=host,
                                        port=port, threads=2)
    server.start()
    return server
