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
    cyborg_gpu_ecc_errors_total{type=corrected|uncorrected}  (counter:
        NVML's volatile count, which a driver reload resets; Prometheus
        rate() handles the reset)
    cyborg_gpu_xid_errors_total{xid}    (from the driver's health monitor)
    cyborg_gpu_mig_instances{profile}
    cyborg_mig_instance_memory_used_bytes{mig_uuid, profile, start, arq,
        server}  (summed memory of the processes NVML puts in the MIG
        instance; arq/server are empty for an instance no ARQ holds)
    cyborg_consumer_memory_used_bytes, cyborg_consumer_memory_limit_bytes,
    cyborg_consumer_sm_utilization_ratio,
    cyborg_consumer_memory_utilization_ratio (0-1)
        {kind=vgpu|mig-vgpu|mps, consumer, arq, instance}: one series per
        running vGPU instance (consumer = its vGPU UUID; instance = the
        VM's domain UUID NVML reports, else the ARQ's) and per MPS client
        process (consumer = its PID, matched to the share it holds by the
        CYBORG_SHARE_HANDLE its environment carries; limit = the share's)
    cyborg_device_phase{phase}, cyborg_device_management_state{state}
        (state sets: 1 for the current value, 0 for the others)
    cyborg_device_condition{type, status}
    cyborg_agent_devices
    cyborg_agent_report_seconds (histogram of report pass durations)
    cyborg_agent_report_failures_total
    cyborg_agent_last_report_timestamp_seconds

Beside them, the DCGM exporter's names for what both can read, with its
labels (gpu = NVML minor number, UUID, pci_bus_id, device = nvidiaN,
modelName, Hostname) and units, so dashboards built for dcgm-exporter
work unchanged: DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_MEM_COPY_UTIL (%),
DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE (MiB), DCGM_FI_DEV_GPU_TEMP
(C), DCGM_FI_DEV_POWER_USAGE (W) (dcgm-exporter etc/default-counters.csv).
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
CONSUMER_LABELS = ('kind', 'consumer', 'arq', 'instance')
DCGM_LABELS = ('gpu', 'UUID', 'pci_bus_id', 'device', 'modelName',
               'Hostname')
MIB = 1 << 20
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
        self.ecc = core.CounterMetricFamily(
            'cyborg_gpu_ecc_errors', 'Volatile ECC errors (since the last '
            'driver load).', labels=DEVICE_LABELS + ('type',))
        self.consumer_used = gauge(
            'cyborg_consumer_memory_used_bytes',
            'GPU memory a consumer (vGPU instance, MPS client) uses.',
            CONSUMER_LABELS)
        self.consumer_limit = gauge(
            'cyborg_consumer_memory_limit_bytes',
            'GPU memory a consumer may use (vGPU type framebuffer, MPS '
            'share).', CONSUMER_LABELS)
        self.consumer_sm = gauge(
            'cyborg_consumer_sm_utilization_ratio',
            'Share of the last sample period a consumer kept the SMs busy '
            '(0-1).', CONSUMER_LABELS)
        self.consumer_mem_util = gauge(
            'cyborg_consumer_memory_utilization_ratio',
            'Share of the last sample period a consumer read or wrote GPU '
            'memory (0-1).', CONSUMER_LABELS)

        def dcgm(name, doc):
            return core.GaugeMetricFamily(name, doc, labels=DCGM_LABELS)
        self.dcgm = {
            'utilization_gpu': dcgm('DCGM_FI_DEV_GPU_UTIL',
                                    'GPU utilization (in %).'),
            'utilization_memory': dcgm('DCGM_FI_DEV_MEM_COPY_UTIL',
                                       'Memory utilization (in %).'),
            'fb_used': dcgm('DCGM_FI_DEV_FB_USED',
                            'Framebuffer memory used (in MiB).'),
            'fb_free': dcgm('DCGM_FI_DEV_FB_FREE',
                            'Framebuffer memory free (in MiB).'),
            'temperature_c': dcgm('DCGM_FI_DEV_GPU_TEMP',
                                  'GPU temperature (in C).'),
            'power_w': dcgm('DCGM_FI_DEV_POWER_USAGE',
                            'Power draw (in W).')}
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
                self.xid, self.mig, self.mig_memory, self.consumer_used,
                self.consumer_limit, self.consumer_sm,
                self.consumer_mem_util, self.phase, self.state,
                self.condition] + list(self.dcgm.values())


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
        self._dcgm(f, host, address, uuid, device, data)
        self._consumers(f, labels, data, in_use)
        owners = _arq_by_instance(in_use.get(address))
        for mi in instances:
            owner = owners.get(mi.get('mig_uuid')) or owners.get(
                (mi['profile'], mi.get('start')), ('', ''))
            _put(f.mig_memory,
                 labels + [str(mi.get('mig_uuid') or ''), mi['profile'],
                           str(mi.get('start')), owner[0], owner[1]],
                 mi.get('memory_used'))

    @staticmethod
    def _dcgm(f, host, address, uuid, device, data):
        minor = data.get('minor')
        domain, _, rest = address.partition(':')
        labels = ['' if minor is None else str(minor), uuid,
                  ('%08x:%s' % (int(domain, 16), rest.upper())
                   if rest else address),
                  '' if minor is None else 'nvidia%d' % minor,
                  str(device.model or ''), host]
        used, total = data.get('memory_used'), data.get('memory_total')
        free = data.get('memory_free')
        if free is None and used is not None and total is not None:
            free = total - used
        values = {'utilization_gpu': data.get('utilization_gpu'),
                  'utilization_memory': data.get('utilization_memory'),
                  'fb_used': None if used is None else used // MIB,
                  'fb_free': None if free is None else free // MIB,
                  'temperature_c': data.get('temperature_c'),
                  'power_w': (None if data.get('power_mw') is None
                              else data['power_mw'] / 1000.0)}
        for key, family in f.dcgm.items():
            _put(family, labels, values[key])

    @staticmethod
    def _consumers(f, labels, data, in_use):
        by_handle, by_instance = {}, {}
        for handles in in_use.values():
            for handle in handles or ():
                owner = (handle.get('arq_uuid') or '',
                         handle.get('instance_uuid') or '', handle)
                if handle.get('uuid'):
                    by_handle[handle['uuid']] = owner
                if handle.get('instance_uuid'):
                    by_instance[handle['instance_uuid']] = owner
        for vgpu in data.get('vgpus') or ():
            owner = by_handle.get(vgpu.get('mdev_uuid')) or by_instance.get(
                vgpu.get('vm_id')) or ('', '', None)
            series = labels + [
                'mig-vgpu' if vgpu.get('gi') is not None else 'vgpu',
                str(vgpu.get('uuid') or vgpu.get('instance')), owner[0],
                vgpu.get('vm_id') or owner[1]]
            _put(f.consumer_used, series, vgpu.get('fb_used'))
            _put(f.consumer_limit, series, vgpu.get('fb_total'))
            _put(f.consumer_sm, series, vgpu.get('sm_util'), 0.01)
            _put(f.consumer_mem_util, series, vgpu.get('mem_util'), 0.01)
        for client in data.get('mps_clients') or ():
            arq, instance, handle = by_handle.get(
                client.get('share_handle'), ('', '', None))
            series = labels + ['mps', str(client['pid']), arq, instance]
            _put(f.consumer_used, series, client.get('memory_used'))
            limit = _attach_info(handle).get('share_memory_mb')
            _put(f.consumer_limit, series,
                 None if limit is None else int(limit) * MIB)
            _put(f.consumer_sm, series, client.get('sm_util'), 0.01)
            _put(f.consumer_mem_util, series, client.get('mem_util'), 0.01)


def _attach_info(handle):
    info = (handle or {}).get('attach_info') or {}
    if isinstance(info, str):
        try:
            info = json.loads(info)
        except ValueError:
            return {}
    return info if isinstance(info, dict) else {}


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
