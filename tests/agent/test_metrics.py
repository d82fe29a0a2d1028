# SPDX-License-Identifier: Apache-2.0
"""The agent's Prometheus metrics over the fake NVML: what a scrape of
/metrics says matches the fake GPUs' state, MIG instances included, with a
process's memory attributed to the ARQ that holds its MIG instance."""

import json
import logging
import os
import re
import types
import urllib.error
import urllib.request
from wsgiref import util as wsgi_util

from prometheus_client import parser
import pytest

from cyborg.agent import metrics
from cyborg.conf import CONF
from cyborg import data
from cyborg.drivers import base
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import driver as nvidia
from cyborg.drivers.nvidia import privileged
from cyborg.drivers.nvidia import telemetry
from cyborg.objects import device as records
from cyborg_emulators.nvidia import fake_consumer_telemetry as consumers
from cyborg_emulators.nvidia import fake_sysfs

GPU1 = '0000:1b:00.0'      # MIG off
GPU2 = '0000:43:00.0'      # MIG on
ARQ = 'a0000000-0000-4000-8000-000000000001'
SERVER = '50000000-0000-4000-8000-000000000001'
GIB = 1 << 30
FIXTURE = os.path.join(os.path.dirname(__file__), os.pardir, 'fixtures',
                       'nvml', 'h200-real-580.159.04.json')


def _group(name):
    return data.profile(name)[0]['groups'][0]


def _handle(address, profile):
    return {'uuid': 'h-' + profile, 'attach_type': 'MDEV',
            'attach_info': json.dumps(dict(records.pci_info(address),
                                           mig_slot='0')),
            'request_group': _group(profile)}


@pytest.fixture
def host(tmp_path):
    host = fake_sysfs.FakeGpuHost({'nvidia': {'iommu': True, 'gpus': [
        {'model': 'h200', 'pci_address': GPU1, 'numa_node': 0,
         'driver': 'nvidia', 'mig_mode': 0},
        {'model': 'h200', 'pci_address': GPU2, 'numa_node': 1,
         'driver': 'nvidia', 'mig_mode': 1}]}}, root=str(tmp_path / 'sys'))
    host.install()
    CONF.set_override('sysfs_root', host.root, group='nvidia')
    yield host
    host.uninstall()


def _uuid(host, address):
    return next(g['uuid'] for g in host.nvml.gpu_info()
                if g['pci_address'] == address)


def _driver(host):
    return nvidia.NvidiaDriver(backend=nvml.PynvmlBackend(retry_delay=0),
                               sysfs=host.sysfs)


def _scrape(app, path='/metrics'):
    environ = {'PATH_INFO': path, 'REQUEST_METHOD': 'GET'}
    wsgi_util.setup_testing_defaults(environ)
    environ['PATH_INFO'] = path
    answer = {}

    def start_response(status, headers, exc_info=None):
        answer['status'] = status
        answer['headers'] = dict(headers)
    body = b''.join(app(environ, start_response))
    return answer['status'], answer['headers'], body.decode()


def _samples(text):
    """{metric family name: [(sample name, labels, value)]}."""
    return {f.name: [(s.name, s.labels, s.value) for s in f.samples]
            for f in parser.text_string_to_metric_families(text)}


def _value(families, name, **labels):
    found = [v for n, lab, v in families.get(name, [])
             if all(lab.get(k) == v2 for k, v2 in labels.items())]
    assert len(found) == 1, (name, labels, families.get(name))
    return found[0]


def _agent(drv, devices, in_use=None):
    return types.SimpleNamespace(host='compute-1', drivers=[drv],
                                 last_devices=devices,
                                 last_in_use=in_use or {})


def test_backend_telemetry_reads_what_the_real_h200_reported(tmp_path):
    with open(FIXTURE) as f:
        real = json.load(f)['devices'][0]
    host = fake_sysfs.FakeGpuHost({'nvidia': {'gpus': [{
        'model': 'h200', 'uuid': real['uuid'],
        'pci_address': real['pci']['busIdLegacy']}]}},
        root=str(tmp_path / 'sys'))
    host.install()
    try:
        backend = nvml.PynvmlBackend()
        backend.open()
        data = backend.telemetry(real['uuid'])
    finally:
        host.uninstall()
    assert data == {
        'memory_used': real['memory_v2']['used'],
        'memory_total': real['memory_v2']['total'],
        'memory_free': real['memory_v2']['free'],
        'minor': real['minor'],
        'utilization_gpu': real['utilization']['gpu'],
        'utilization_memory': real['utilization']['memory'],
        'temperature_c': real['temperature'],
        'power_mw': real['power_mw'],
        'ecc_volatile_corrected': real['ecc_volatile_corrected'],
        'ecc_volatile_uncorrected': real['ecc_volatile_uncorrected'],
        'processes': []}


def test_backend_telemetry_not_supported_is_none(host):
    uuid = _uuid(host, GPU1)
    host.nvml.fail('nvmlDeviceGetPowerUsage', uuid=uuid)
    host.nvml.fail('nvmlDeviceGetTemperature', uuid=uuid)
    host.nvml.fail('nvmlDeviceGetTotalEccErrors', uuid=uuid)
    backend = nvml.PynvmlBackend()
    backend.open()
    data = backend.telemetry(uuid)
    assert data['power_mw'] is None and data['temperature_c'] is None
    assert data['ecc_volatile_corrected'] is None
    assert data['ecc_volatile_uncorrected'] is None
    assert data['memory_total'] > 0


def test_scrape_matches_the_fake_gpus(host):
    drv = _driver(host)
    drv.discover()
    uuid1, uuid2 = _uuid(host, GPU1), _uuid(host, GPU2)
    # GPU 1 (whole): one process, an ECC error, a warm and busy GPU.
    host.nvml.add_process(uuid1, 1000, 5 * GIB)
    host.nvml.ecc_error(uuid1, uncorrected=False)
    # The fake's readings come from the real capture; vary two of them.
    host.nvml._gpu(uuid1).values['temperature'] = 51
    host.nvml._gpu(uuid1).values['utilization'] = {'gpu': 37, 'memory': 12}
    # GPU 2 (MIG): an ARQ's 1g.18gb with two processes, and a 2g.35gb that
    # no ARQ holds, with one process.
    arq_info = drv.prepare(GPU2, _handle(GPU2, 'h200-mig-1g-18gb'))
    other = drv.prepare(GPU2, _handle(GPU2, 'h200-mig-2g-35gb'))
    host.nvml.add_process(arq_info['mig_uuid'], 2001, 3 * GIB)
    host.nvml.add_process(arq_info['mig_uuid'], 2002, 1 * GIB)
    host.nvml.add_process(other['mig_uuid'], 2003, 2 * GIB)
    devices = drv.discover()
    for device in devices:
        device.phase, device.management_state = 'Ready', 'Unclaimed'
        device.conditions = [{'type': 'DriverReady', 'status': 'True',
                              'reason': 'Nvml', 'message': ''}]
    gpu2 = next(d for d in devices if d.deployables[0].name == GPU2)
    gpu2.management_state = 'Managed'
    in_use = {GPU2: [{
        'uuid': 'h-1', 'arq_uuid': ARQ, 'instance_uuid': SERVER,
        'attach_info': json.dumps(dict(records.pci_info(GPU2), mig_slot='0',
                                       **arq_info))}]}
    stats = metrics.ReportStats()
    stats.observe(0.2, when=1700000000.0)
    stats.observe(0.7, ok=False)
    app = metrics.make_app(_agent(drv, devices, in_use), reports=stats)

    status, headers, text = _scrape(app)
    assert status.startswith('200')
    assert headers['Content-Type'].startswith('text/plain')
    f = _samples(text)
    one = dict(host='compute-1', device=GPU1, uuid=uuid1, model='NVIDIA H200')
    two = dict(one, device=GPU2, uuid=uuid2)
    total = 150754820096        # the real H200's memory (v2)
    assert _value(f, 'cyborg_gpu_memory_total_bytes', **one) == total
    assert _value(f, 'cyborg_gpu_memory_used_bytes', **one) == 5 * GIB
    assert _value(f, 'cyborg_gpu_memory_used_bytes', **two) == 6 * GIB
    assert _value(f, 'cyborg_gpu_utilization_ratio', **one) == 0.37
    assert _value(f, 'cyborg_gpu_memory_utilization_ratio', **one) == 0.12
    assert _value(f, 'cyborg_gpu_temperature_celsius', **one) == 51
    assert _value(f, 'cyborg_gpu_temperature_celsius', **two) == 35
    assert _value(f, 'cyborg_gpu_power_watts', **one) == 98.059
    assert _value(f, 'cyborg_gpu_ecc_errors', type='corrected',
                  **one) == 1
    assert _value(f, 'cyborg_gpu_ecc_errors', type='uncorrected',
                  **one) == 0
    # State sets: one 1 per device, every other value 0.
    phases = [(lab['phase'], v) for _, lab, v in f['cyborg_device_phase']
              if lab['device'] == GPU1]
    assert sorted(phases) == sorted((p, int(p == 'Ready'))
                                    for p in metrics.PHASES)
    assert _value(f, 'cyborg_device_management_state', state='Managed',
                  **two) == 1
    assert _value(f, 'cyborg_device_management_state', state='Unclaimed',
                  **two) == 0
    assert _value(f, 'cyborg_device_management_state', state='Unclaimed',
                  **one) == 1
    assert _value(f, 'cyborg_device_condition', type='DriverReady',
                  status='True', **one) == 1
    # MIG: counts by profile, per-instance memory with its ARQ.
    assert _value(f, 'cyborg_gpu_mig_instances', profile='1g.18gb',
                  **two) == 1
    assert _value(f, 'cyborg_gpu_mig_instances', profile='2g.35gb',
                  **two) == 1
    assert not [s for s in f['cyborg_gpu_mig_instances']
                if s[1]['device'] == GPU1]
    assert _value(f, 'cyborg_mig_instance_memory_used_bytes',
                  mig_uuid=arq_info['mig_uuid'], profile='1g.18gb',
                  start=str(arq_info['mig_start']), arq=ARQ,
                  server=SERVER, **two) == 4 * GIB
    assert _value(f, 'cyborg_mig_instance_memory_used_bytes',
                  mig_uuid=other['mig_uuid'], arq='', server='',
                  **two) == 2 * GIB
    # The report passes.
    assert _value(f, 'cyborg_agent_devices', host='compute-1') == 2
    hist = {n: v for n, lab, v in f['cyborg_agent_report_seconds']
            if n != 'cyborg_agent_report_seconds_bucket'}
    assert hist['cyborg_agent_report_seconds_count'] == 2
    assert hist['cyborg_agent_report_seconds_sum'] == pytest.approx(0.9)
    assert _value(f, 'cyborg_agent_report_failures') == 1
    assert _value(f, 'cyborg_agent_last_report_timestamp_seconds') == \
        1700000000.0


def test_mig_instance_maps_to_its_arq_by_placement(host):
    """A MIG UUID the DB does not know yet (re-created after a reboot)
    still maps to the ARQ through its recorded profile and placement.
    """
    drv = _driver(host)
    drv.discover()
    info = drv.prepare(GPU2, _handle(GPU2, 'h200-mig-3g-71gb'))
    host.nvml.add_process(info['mig_uuid'], 3001, 7 * GIB)
    recorded = dict(info, mig_uuid='MIG-stale')
    in_use = {GPU2: [{'uuid': 'h-1', 'arq_uuid': ARQ, 'instance_uuid': None,
                      'attach_info': json.dumps(recorded)}]}
    _, _, text = _scrape(metrics.make_app(_agent(drv, drv.discover(),
                                                 in_use)))
    f = _samples(text)
    assert _value(f, 'cyborg_mig_instance_memory_used_bytes',
                  mig_uuid=info['mig_uuid'], arq=ARQ, server='') == 7 * GIB


def test_gpu_invisible_to_nvml_has_no_telemetry(host):
    drv = _driver(host)
    devices = drv.discover()
    # As the driver moves a GPU: persistence off, NVML let go meanwhile.
    host.nvml.set_persistence_mode(host.nvml.gpu_info()[0]['uuid'], False)
    with drv.backend.released():
        host.sysfs.rebind(GPU1, 'vfio-pci')
    assert drv.telemetry(GPU1) is None
    assert drv.telemetry('0000:99:00.0') is None
    for device in devices:
        device.phase = 'Ready'
    _, _, text = _scrape(metrics.make_app(_agent(drv, devices)))
    f = _samples(text)
    assert [lab['device'] for _, lab, _ in
            f['cyborg_gpu_memory_total_bytes']] == [GPU2]
    # What the report said is still there.
    assert _value(f, 'cyborg_device_phase', device=GPU1, phase='Ready') == 1


def test_xid_counts_from_the_driver_health_monitor():
    class Health:
        def xid_counts(self):       # {GPU uuid: {xid: count}}
            return {'GPU-stub': {79: 1, 48: 3}, 'GPU-other': {13: 9}}

    class Driver(base.Driver):
        name = 'stub'

        def discover(self):
            return []
        health = Health()

    device = records.Device(
        type='GPU', vendor='10de', model='Stub', deployables=[
            records.Deployable('0000:01:00.0', 1, 'PGPU', [], [],
                               driver_name='stub')],
        controlpath_id={'cpid_type': 'PCI',
                        'cpid_info': records.pci_info('0000:01:00.0')},
        vendor_board_info='GPU-stub')
    agent = types.SimpleNamespace(host='h', drivers=[Driver()],
                                  last_devices=[device])
    _, _, text = _scrape(metrics.make_app(agent))
    f = _samples(text)
    assert _value(f, 'cyborg_gpu_xid_errors', xid='48') == 3
    assert _value(f, 'cyborg_gpu_xid_errors', xid='79') == 1
    assert len(f['cyborg_gpu_xid_errors']) == 2     # not GPU-other's
    # Fields the lifecycle has not filled in yet (None) give no state sets.
    assert 'cyborg_device_phase' not in f or not f['cyborg_device_phase']


def test_empty_agent_scrapes():
    _, _, text = _scrape(metrics.make_app(types.SimpleNamespace()))
    assert _value(_samples(text), 'cyborg_agent_devices', host='') == 0


def test_serve_answers_metrics_only():
    agent = types.SimpleNamespace(host='h', drivers=[], last_devices=[])
    server = metrics.serve(agent, '127.0.0.1', 0)
    try:
        with urllib.request.urlopen(server.url + '/metrics') as r:
            assert r.status == 200
            assert 'cyborg_agent_devices{host="h"} 0.0' in r.read().decode()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(server.url + '/other')
        assert e.value.code == 404
    finally:
        server.stop()


def test_observe_report_hook():
    before = metrics.REPORTS.histogram.collect()[0].samples
    count = next(s.value for s in before if s.name.endswith('_count'))
    metrics.observe_report(0.05)
    after = metrics.REPORTS.histogram.collect()[0].samples
    assert next(s.value for s in after if s.name.endswith('_count')) == \
        count + 1
    assert metrics.REPORTS.last_timestamp is not None


def test_dashboard_uses_only_exported_metrics():
    """etc/grafana/cyborg-gpus.json names no metric we do not export."""
    class Health:
        def xid_counts(self):
            return {'0000:01:00.0': {79: 1}}

    class Driver(base.Driver):
        name = 'stub'

        def discover(self):
            return []
        health = Health()

        def telemetry(self, address):
            return {'memory_used': 1, 'memory_total': 2,
                    'utilization_gpu': 3, 'utilization_memory': 4,
                    'temperature_c': 5, 'power_mw': 6,
                    'ecc_volatile_corrected': 7,
                    'ecc_volatile_uncorrected': 8, 'processes': [],
                    'mig_instances': [{'profile': '1g.18gb', 'start': 0,
                                       'gi': 1, 'mig_uuid': 'MIG-1',
                                       'processes': [],
                                       'memory_used': 0}]}

    device = records.Device(
        type='GPU', vendor='10de', model='Stub', deployables=[
            records.Deployable('0000:01:00.0', 1, 'PGPU', [], [],
                               driver_name='stub')],
        controlpath_id={'cpid_type': 'PCI',
                        'cpid_info': records.pci_info('0000:01:00.0')},
        phase='Ready', management_state='Managed',
        conditions=[{'type': 'DriverReady', 'status': 'True'}])
    stats = metrics.ReportStats()
    stats.observe(1.0)
    agent = types.SimpleNamespace(host='h', drivers=[Driver()],
                                  last_devices=[device])
    _, _, text = _scrape(metrics.make_app(agent, reports=stats))
    exported = {s.name for f in parser.text_string_to_metric_families(text)
                for s in f.samples}
    exported |= {'cyborg_api_requests_total', 'cyborg_arqs',
                 'cyborg_api_request_duration_seconds_bucket',
                 'cyborg_api_database_up'}
    path = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                        'etc', 'grafana', 'cyborg-gpus.json')
    with open(path) as f:
        dashboard = json.load(f)
    exprs = [t['expr'] for p in dashboard['panels']
             for t in p.get('targets', [])]
    exprs += [v['definition'] for v in dashboard['templating']['list']
              if v.get('definition')]
    used = set(re.findall(r'cyborg_[a-z_]+', ' '.join(exprs)))
    assert used and used <= exported, used - exported
    # The families the issue asks for are on the dashboard.
    assert {'cyborg_gpu_xid_errors_total', 'cyborg_arqs',
            'cyborg_mig_instance_memory_used_bytes'} <= used


def _scrape_families(drv, in_use):
    devices = drv.discover()
    _, _, text = _scrape(metrics.make_app(_agent(drv, devices, in_use)))
    return _samples(text)


def test_vgpu_instances_are_consumers_with_their_arq(host):
    """On a vGPU host (NVML host vGPU mode): a time-sliced vGPU whose mdev
    is an ARQ's attach handle, and a MIG-backed one NVML places on a GPU
    instance, each with framebuffer used/limit and utilisation.
    """
    drv = _driver(host)
    drv.discover()
    uuid1, uuid2 = _uuid(host, GPU1), _uuid(host, GPU2)
    for uuid in (uuid1, uuid2):
        consumers.host_vgpu_mode(host.nvml, uuid)
    mdev = 'd0000000-0000-4000-8000-0000000000aa'
    consumers.add_vgpu(host.nvml, uuid1, SERVER, 1101, 'GRID H200-18C',
                       18 * GIB, fb_used=5 * GIB, mdev_uuid=mdev,
                       sm_util=40, mem_util=10)
    gi, _ = host.nvml.create_gi(uuid2, 19, 6)       # a 1g.18gb at 6
    other = '50000000-0000-4000-8000-0000000000bb'
    consumers.add_vgpu(host.nvml, uuid2, other, 1180, 'GRID H200-1-18C',
                       17 * GIB, fb_used=GIB, gi_id=gi, sm_util=90,
                       mem_util=30)
    in_use = {'0000:1b:00.4': [{'uuid': mdev, 'arq_uuid': ARQ,
                                'instance_uuid': SERVER,
                                'attach_info': '{}'}]}
    f = _scrape_families(drv, in_use)
    one = dict(host='compute-1', device=GPU1, uuid=uuid1, kind='vgpu',
               arq=ARQ, instance=SERVER)
    assert _value(f, 'cyborg_consumer_memory_used_bytes', **one) == 5 * GIB
    assert _value(f, 'cyborg_consumer_memory_limit_bytes', **one) == \
        18 * GIB
    assert _value(f, 'cyborg_consumer_sm_utilization_ratio', **one) == 0.4
    assert _value(f, 'cyborg_consumer_memory_utilization_ratio',
                  **one) == 0.1
    # No ARQ holds the MIG-backed one: its VM is still named.
    two = dict(device=GPU2, kind='mig-vgpu', arq='', instance=other)
    assert _value(f, 'cyborg_consumer_memory_limit_bytes', **two) == \
        17 * GIB
    assert _value(f, 'cyborg_consumer_sm_utilization_ratio', **two) == 0.9


def test_mps_clients_are_consumers_with_their_share(host, tmp_path):
    """MPS clients NVML lists on a data-center-driver GPU, matched to the
    share each holds through CYBORG_SHARE_HANDLE in /proc/<pid>/environ;
    DCGM-exporter names beside ours, parsed as Prometheus text.
    """
    proc = tmp_path / 'proc'
    CONF.set_override('proc_root', str(proc), group='nvidia')
    drv = _driver(host)
    drv.discover()
    uuid1 = _uuid(host, GPU1)
    for pid, handle in ((4001, 'h-share'), (4002, None)):
        (proc / str(pid)).mkdir(parents=True)
        env = b'PATH=/usr/bin\0CUDA_MPS_PIPE_DIRECTORY=/x\0'
        if handle:
            env += b'CYBORG_SHARE_HANDLE=' + handle.encode() + b'\0'
        (proc / str(pid) / 'environ').write_bytes(env)
        consumers.add_mps_client(host.nvml, uuid1, pid, 3 * GIB)
        consumers.process_utilization(host.nvml, uuid1, pid, 25, 5)
    host.nvml._gpu(uuid1).values['utilization'] = {'gpu': 37, 'memory': 12}
    in_use = {GPU1 + '_share': [{
        'uuid': 'h-share', 'arq_uuid': ARQ, 'instance_uuid': SERVER,
        'attach_info': json.dumps({'share_mode': 'mps',
                                   'share_memory_mb': 16384,
                                   'share_percent': 25})}]}
    f = _scrape_families(drv, in_use)
    held = dict(device=GPU1, kind='mps', consumer='4001', arq=ARQ,
                instance=SERVER)
    assert _value(f, 'cyborg_consumer_memory_used_bytes', **held) == 3 * GIB
    assert _value(f, 'cyborg_consumer_memory_limit_bytes', **held) == \
        16384 << 20
    assert _value(f, 'cyborg_consumer_sm_utilization_ratio', **held) == 0.25
    stranger = dict(device=GPU1, kind='mps', consumer='4002', arq='')
    assert _value(f, 'cyborg_consumer_memory_used_bytes', **stranger) == \
        3 * GIB
    assert not [s for s in f['cyborg_consumer_memory_limit_bytes']
                if s[1]['consumer'] == '4002']
    # DCGM-exporter compatible: its names, labels and units.
    dcgm = dict(gpu='0', UUID=uuid1, pci_bus_id='00000000:1B:00.0',
                device='nvidia0', modelName='NVIDIA H200',
                Hostname='compute-1')
    assert _value(f, 'DCGM_FI_DEV_GPU_UTIL', **dcgm) == 37
    assert _value(f, 'DCGM_FI_DEV_MEM_COPY_UTIL', **dcgm) == 12
    assert _value(f, 'DCGM_FI_DEV_FB_USED', **dcgm) == 6 * 1024
    total = _value(f, 'cyborg_gpu_memory_total_bytes', device=GPU1)
    free = _value(f, 'DCGM_FI_DEV_FB_FREE', **dcgm)
    assert 0 < free < total / (1 << 20) - 6 * 1024
    assert _value(f, 'DCGM_FI_DEV_POWER_USAGE', **dcgm) == 98.059
    # Counters are counters: `_total` samples of a counter family.
    assert [n for n, _, _ in f['cyborg_gpu_ecc_errors']] == [
        'cyborg_gpu_ecc_errors_total'] * 4


def test_mps_client_share_handles_are_read_through_privsep(
        host, tmp_path, monkeypatch, caplog):
    """Another user's /proc/<pid>/environ needs privileges: the handles
    are read by the privsep entrypoint, once per scrape for all clients;
    when that fails the clients stay listed, unattributed, and the
    agent says why once.
    """
    proc = tmp_path / 'proc'
    CONF.set_override('proc_root', str(proc), group='nvidia')
    drv = _driver(host)
    drv.discover()
    uuid1 = _uuid(host, GPU1)
    for pid in (4001, 4002):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / 'environ').write_bytes(
            b'CYBORG_SHARE_HANDLE=h-%d\0' % pid)
        consumers.add_mps_client(host.nvml, uuid1, pid, GIB)
    calls = []
    real = privileged.share_handles
    assert privileged.context.is_entrypoint(real)

    def spy(proc_root, pids):
        calls.append(list(pids))
        return real(proc_root, pids)
    monkeypatch.setattr(privileged, 'share_handles', spy)
    clients = telemetry.telemetry(drv.state, GPU1)['mps_clients']
    assert [(c['pid'], c['share_handle']) for c in clients] == [
        (4001, 'h-4001'), (4002, 'h-4002')]
    assert calls == [[4001, 4002]]
    assert telemetry.telemetry(drv.state, GPU2)['mps_clients'] == []
    assert calls == [[4001, 4002]]         # no clients: no privsep call

    def refused(proc_root, pids):
        raise privileged.PrivilegedError('privsep helper not permitted')
    monkeypatch.setattr(privileged, 'share_handles', refused)
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        clients = telemetry.telemetry(drv.state, GPU1)['mps_clients']
        assert [(c['pid'], c['share_handle']) for c in clients] == [
            (4001, None), (4002, None)]
    said = [r.getMessage() for r in caplog.records
            if 'share handles' in r.getMessage()]
    assert said == ['Cannot read the share handles of MPS clients 4001, '
                    '4002: privsep helper not permitted']
    # A read that works again clears it: the next failure is told again.
    monkeypatch.setattr(privileged, 'share_handles', spy)
    telemetry.telemetry(drv.state, GPU1)
    assert drv.state.share_handles_failed is None
    monkeypatch.setattr(privileged, 'share_handles', refused)
    telemetry.telemetry(drv.state, GPU1)
    assert len([r for r in caplog.records
                if 'share handles' in r.getMessage()]) == 2
