# SPDX-License-Identifier: Apache-2.0
"""GPU health over the real pynvml and the fake NVML: XID classes, ECC,
lost GPUs, recovery without an agent restart, and the event thread."""

import logging
import threading
import time

import pynvml as N
import pytest

from cyborg.conf import CONF
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import health
from cyborg_emulators.nvidia import fake_sysfs

GPU1 = '0000:1b:00.0'
GPU2 = '0000:43:00.0'
SPEC = {'nvidia': {'iommu': True, 'gpus': [
    {'model': 'h200', 'pci_address': GPU1, 'numa_node': 0,
     'driver': 'nvidia', 'mig_mode': 0},
    {'model': 'h200', 'pci_address': GPU2, 'numa_node': 1,
     'driver': 'nvidia', 'mig_mode': 1}]}}


class Clock:

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def host(tmp_path):
    host = fake_sysfs.FakeGpuHost(SPEC, root=str(tmp_path / 'sys'))
    host.install()
    yield host
    host.uninstall()


@pytest.fixture
def uuids(host):
    return [g['uuid'] for g in host.nvml.gpu_info()]


@pytest.fixture
def backend(host):
    backend = nvml.PynvmlBackend(retry_delay=0)
    backend.open()
    yield backend
    backend.close()


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def monitor(backend, uuids, clock):
    monitor = health.HealthMonitor(backend, clock=clock, wait_ms=50,
                                   recovery_after=300, backoff=(0.01, 0.05))
    monitor.watch(uuids)
    yield monitor
    monitor.stop()


def drain(monitor):
    """Record every queued event; the events."""
    events = []
    while True:
        event = monitor.poll_once(0)
        if event is None:
            return events
        events.append(event)


def probe(monitor, uuid):
    monitor.observe(uuid, monitor.backend.health_probe(uuid))
    return monitor.verdict(uuid)


def until(predicate, timeout=2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


# Classification ---------------------------------------------------------

def test_classes_follow_the_catalog():
    assert {x: health.classify_xid(x) for x in (13, 31, 43, 45, 68, 94,
                                                63, 92, 79, 48, 95, 109,
                                                119, 120, 64, 999)} == {
        13: 'application', 31: 'application', 43: 'application',
        45: 'application', 68: 'application', 94: 'application',
        63: 'informational', 92: 'informational', 79: 'lost',
        48: 'fatal', 95: 'fatal', 109: 'fatal', 119: 'fatal',
        120: 'fatal', 64: 'fatal', 999: 'fatal'}
    assert health.classify_xid(109, ignored={109}) == 'application'


@pytest.mark.parametrize('xid', [13, 31, 43, 45, 68, 94, 63, 92])
def test_application_xid_does_not_fail(monitor, host, uuids, xid):
    host.nvml.inject_xid(uuids[0], xid)
    [event] = drain(monitor)
    assert event['type'] == 'xid' and event['xid'] == xid
    assert probe(monitor, uuids[0]) == health.READY
    assert monitor.xid_counts()[uuids[0]] == {xid: 1}


def test_xid48_fails_with_reason_and_mig_instance(monitor, host, uuids):
    host.nvml.inject_xid(uuids[1], 48, gi_id=2, ci_id=0)
    [event] = drain(monitor)
    assert (event['uuid'], event['gi_id'], event['ci_id']) == (
        uuids[1], 2, 0)
    phase, reason, message = probe(monitor, uuids[1])
    assert (phase, reason) == ('Failed', 'Xid48')
    assert 'double-bit ECC error' in message
    assert 'MIG GPU instance 2, compute instance 0' in message
    assert 'whole GPU' in message
    assert monitor.verdict(uuids[0]) == health.READY


def test_unknown_xid_is_fatal_unless_ignored(backend, host, uuids, clock):
    monitor = health.HealthMonitor(backend, clock=clock, ignored_xids={999})
    monitor.watch(uuids)
    host.nvml.inject_xid(uuids[0], 999)
    host.nvml.inject_xid(uuids[1], 109)
    drain(monitor)
    assert monitor.verdict(uuids[0]) == health.READY
    phase, reason, message = monitor.verdict(uuids[1])
    assert (phase, reason) == ('Failed', 'Xid109')
    assert 'context switch timeout' in message


# Lost GPUs ----------------------------------------------------------------

def test_fall_off_bus_is_lost_until_a_probe_succeeds(monitor, host, uuids):
    host.nvml.fall_off_bus(uuids[0])
    [event] = drain(monitor)
    assert event['xid'] == 79 and event['uuid'] == uuids[0]
    assert monitor.verdict(uuids[0])[:2] == ('Lost', 'Xid79')
    lost = monitor.backend.health_probe(uuids[0])
    assert lost['lost'] and 'GpuIsLost' in lost['error']
    assert probe(monitor, uuids[0])[:2] == ('Lost', 'Xid79')
    # The set holding the lost GPU answers GpuIsLost: a new set without
    # it keeps the other GPU watched.
    assert monitor.poll_once(0) is None
    host.nvml.inject_xid(uuids[1], 48)
    assert [e['uuid'] for e in drain(monitor)] == [uuids[1]]

    host.nvml.recover(uuids[0])
    assert probe(monitor, uuids[0]) == health.READY
    host.nvml.inject_xid(uuids[0], 62)          # registered again
    drain(monitor)
    assert monitor.verdict(uuids[0])[:2] == ('Failed', 'Xid62')


def test_gpu_is_lost_probe_alone_means_lost(monitor, host, uuids):
    host.nvml.fail('nvmlDeviceGetHandleByUUID', N.NVML_ERROR_GPU_IS_LOST)
    phase, reason, _ = probe(monitor, uuids[0])
    assert (phase, reason) == ('Lost', 'GpuIsLost')
    host.nvml.clear_failures()
    assert probe(monitor, uuids[0]) == health.READY


# Recovery -----------------------------------------------------------------

def test_failed_recovers_after_quiet_period(monitor, host, uuids, clock):
    host.nvml.inject_xid(uuids[0], 95)
    drain(monitor)
    assert probe(monitor, uuids[0])[:2] == ('Failed', 'Xid95')
    clock.now += 299
    assert probe(monitor, uuids[0])[:2] == ('Failed', 'Xid95')
    host.nvml.inject_xid(uuids[0], 95)          # a new one restarts it
    drain(monitor)
    clock.now += 2
    assert probe(monitor, uuids[0])[:2] == ('Failed', 'Xid95')
    clock.now += 300
    assert probe(monitor, uuids[0]) == health.READY
    assert monitor.xid_counts()[uuids[0]] == {95: 2}


@pytest.mark.parametrize('xid', [48, 62, 64, 74, 95, 109, 119, 120])
def test_reset_class_xids_stay_failed_until_reset(backend, host, uuids,
                                                  clock, xid):
    """XIDs whose catalog action is a GPU reset (contract gpu-to-vm.md
    §5, [nvidia] reset_xids) never clear by time.
    """
    monitor = health.HealthMonitor(
        backend, clock=clock, recovery_after=300,
        reset_xids=[int(x) for x in CONF.nvidia.reset_xids])
    monitor.watch(uuids)
    host.nvml.inject_xid(uuids[0], xid)
    drain(monitor)
    phase, reason, message = probe(monitor, uuids[0])
    assert (phase, reason) == ('Failed', 'Xid%d' % xid)
    assert 'stays Failed until an admin resets it' in message
    clock.now += 3600
    assert probe(monitor, uuids[0])[:2] == ('Failed', 'Xid%d' % xid)
    host.nvml.inject_xid(uuids[0], 999)         # a lesser one after it
    drain(monitor)
    clock.now += 3600
    assert probe(monitor, uuids[0])[:2] == ('Failed', 'Xid%d' % xid)
    monitor.reset(uuids[0])
    assert probe(monitor, uuids[0]) == health.READY


def test_other_fatal_xids_recover_by_time(backend, host, uuids, clock):
    monitor = health.HealthMonitor(
        backend, clock=clock, recovery_after=300,
        reset_xids=[int(x) for x in CONF.nvidia.reset_xids])
    monitor.watch(uuids)
    host.nvml.inject_xid(uuids[0], 999)         # nobody classified it
    drain(monitor)
    phase, reason, message = probe(monitor, uuids[0])
    assert (phase, reason) == ('Failed', 'Xid999')
    assert 'until an admin resets it' not in message
    clock.now += 301
    assert probe(monitor, uuids[0]) == health.READY


def test_failed_needs_a_healthy_probe(monitor, host, uuids, clock):
    host.nvml.inject_xid(uuids[0], 48)
    drain(monitor)
    clock.now += 301
    assert monitor.verdict(uuids[0])[:2] == ('Failed', 'Xid48')
    assert probe(monitor, uuids[0]) == health.READY


def test_reset_clears_at_once(monitor, host, uuids):
    host.nvml.inject_xid(uuids[0], 48)
    host.nvml.fall_off_bus(uuids[1])
    drain(monitor)
    assert monitor.verdict(uuids[1])[0] == 'Lost'
    host.nvml.reset_gpu(uuids[0])
    host.nvml.recover(uuids[1])
    for uuid in uuids:
        monitor.reset(uuid)
        assert monitor.verdict(uuid) == health.READY
    host.nvml.inject_xid(uuids[1], 74)
    drain(monitor)
    assert monitor.verdict(uuids[1])[:2] == ('Failed', 'Xid74')


# ECC and row remapping -------------------------------------------------

def test_double_bit_ecc_then_pending_remap(monitor, host, uuids, clock):
    host.nvml.ecc_error(uuids[0], uncorrected=False)
    host.nvml.ecc_error(uuids[0], uncorrected=True)
    assert [e['type'] for e in drain(monitor)] == ['ecc_sbe', 'ecc_dbe']
    assert probe(monitor, uuids[0])[:2] == ('Failed', 'DoubleBitEcc')
    # An uncorrectable error (XID 48's event) does not clear by waiting.
    clock.now += 301
    assert probe(monitor, uuids[0])[:2] == ('Failed', 'DoubleBitEcc')
    assert monitor.ecc_counts()[uuids[0]] == {
        'double_bit': 1, 'single_bit': 1, 'volatile_uncorrected': 1}
    host.nvml.reset_gpu(uuids[0])               # the remap takes effect
    monitor.reset(uuids[0])                     # what the driver's reset does
    assert probe(monitor, uuids[0]) == health.READY


def test_remap_failure_and_reset_required_fail(monitor, uuids):
    ok = monitor.backend.health_probe(uuids[0])
    assert ok == {'lost': False, 'remap_pending': False,
                  'remap_failure': False, 'ecc_volatile_uncorrected': 0,
                  'reset_required': False, 'error': None}
    monitor.observe(uuids[0], dict(ok, remap_failure=True))
    assert monitor.verdict(uuids[0])[:2] == ('Failed', 'RowRemapFailure')
    monitor.observe(uuids[0], dict(ok, reset_required=True, error='x'))
    assert monitor.verdict(uuids[0])[:2] == ('Failed', 'ResetRequired')
    monitor.observe(uuids[0], ok)
    assert monitor.verdict(uuids[0]) == health.READY


def test_probe_without_support_is_none_not_sick(monitor, host, uuids):
    host.nvml.fail('nvmlDeviceGetRemappedRows')
    host.nvml.fail('nvmlDeviceGetTotalEccErrors')
    result = monitor.backend.health_probe(uuids[0])
    assert result['remap_pending'] is None
    assert result['ecc_volatile_uncorrected'] is None
    assert not result['lost'] and result['error'] is None
    monitor.observe(uuids[0], result)
    assert monitor.verdict(uuids[0]) == health.READY


def test_only_supported_event_types_are_registered(backend, host, uuids,
                                                   clock):
    host.nvml._gpu(uuids[0]).events = N.nvmlEventTypeXidCriticalError
    backend.create_event_set()
    assert backend.register_events(uuids[0]) == \
        N.nvmlEventTypeXidCriticalError
    assert backend.register_events(uuids[1]) == 0xB
    monitor = health.HealthMonitor(backend, clock=clock)
    monitor.watch(uuids[:1])
    monitor.observe(uuids[0], backend.health_probe(uuids[0]))
    host.nvml.ecc_error(uuids[0])
    assert drain(monitor) == []                 # no ECC events here...
    phase, reason, _ = probe(monitor, uuids[0])  # ...the counter tells
    assert (phase, reason) == ('Failed', 'DoubleBitEcc')


# The thread -------------------------------------------------------------

def registered(backend):
    return {u for u, p in backend._event_uuids.items() if p is not None}


def health_threads():
    return [t for t in threading.enumerate() if t.name == 'nvidia-health']


def test_thread_starts_records_and_stops(monitor, host, uuids):
    monitor.start()
    monitor.start()                             # idempotent
    assert len(health_threads()) == 1
    host.nvml.inject_xid(uuids[0], 48)
    assert until(lambda: monitor.verdict(uuids[0])[0] == 'Failed')
    begin = time.monotonic()
    monitor.stop()
    assert time.monotonic() - begin < 2
    assert not monitor.running and health_threads() == []


def test_refresh_while_waiting_does_not_crash(monitor, host, uuids):
    monitor.start()
    assert until(lambda: registered(monitor.backend) == set(uuids))
    for _ in range(3):
        begin = time.monotonic()
        monitor.backend.refresh()
        assert time.monotonic() - begin < 1
    host.nvml.inject_xid(uuids[1], 119)
    assert until(lambda: monitor.verdict(uuids[1])[0] == 'Failed')
    assert monitor.running


def test_nvml_faults_are_logged_once_and_survived(monitor, host, uuids,
                                                  caplog):
    caplog.set_level(logging.WARNING, logger=health.__name__)
    host.nvml.fail('nvmlEventSetWait_v2', N.NVML_ERROR_UNKNOWN, times=5)
    monitor.start()
    assert until(lambda: not host.nvml._failures)
    host.nvml.inject_xid(uuids[0], 48)
    assert until(lambda: monitor.verdict(uuids[0])[0] == 'Failed')
    failed = [r for r in caplog.records if 'watch failed' in r.message]
    assert len(failed) == 1 and monitor.running


def test_watch_without_nvml_does_not_raise(host, uuids):
    backend = nvml.PynvmlBackend()
    monitor = health.HealthMonitor(backend, wait_ms=10,
                                   backoff=(0.01, 0.02))
    monitor.watch(uuids)
    with pytest.raises(nvml.NvmlError):
        monitor.poll_once(0)
    assert backend.health_probe(uuids[0])['error']
    monitor.start()
    backend.open()
    try:
        assert until(lambda: registered(backend) == set(uuids))
        host.nvml.inject_xid(uuids[0], 48)
        assert until(lambda: monitor.verdict(uuids[0])[0] == 'Failed')
    finally:
        monitor.stop()
        backend.close()
