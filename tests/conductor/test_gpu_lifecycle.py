# SPDX-License-Identifier: Apache-2.0
"""Device lifecycle through the agent, conductor and API with the real
nvidia driver over the fake NVML and sysfs: phases, management states and
their fencing in Placement, the 2-minute orphan wait (injected clock),
exclusion, and the gated, fail-closed admin reclaim and reset."""

import datetime
import time
import uuid

import pytest
import sqlalchemy as sa

from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import devices as db_devices
from cyborg.db import models
from cyborg_emulators.nvidia import fake_sysfs
from tests.conductor import test_binding
from tests.conductor import test_gpu_binding

nova_server = test_binding.nova_server
COMPUTE = '0000:1b:00.0'
PASSTHROUGH = '0000:43:00.0'
V24 = dict(test_binding.NOVA_HEADERS, **{
    'OpenStack-API-Version': 'accelerator 2.4', 'X-Roles': 'admin'})
V26 = dict(V24, **{'OpenStack-API-Version': 'accelerator 2.6'})


class Clock:
    """The agent's clock, moved by hand (starts at the real monotonic
    time).
    """

    def __init__(self):
        self.now = time.monotonic()

    def __call__(self):
        return self.now


@pytest.fixture
def host(tmp_path):
    spec = {'iommu': True, 'gpus': [
        {'model': 'h200', 'pci_address': COMPUTE, 'mig_mode': 1},
        {'model': 'h200', 'pci_address': PASSTHROUGH, 'driver': 'vfio-pci'}]}
    with fake_sysfs.FakeGpuHost(spec, root=str(tmp_path / 'sys')) as h:
        CONF.set_override('sysfs_root', h.root, group='nvidia')
        CONF.set_override('proc_root', h.proc_root, group='nvidia')
        yield h


@pytest.fixture
def stack(sqlite_database, placement_service, nova_server, host):
    s = test_binding.Stack(placement_service, nova_server,
                           test_gpu_binding.new_driver())
    s.gpu_host = host
    # A fresh agent on the hand-moved clock from its first report on (the
    # stack's own first report ran on the real one, however long ago).
    s.stop_agent()
    s.agent = s.new_agent()
    s.clock = s.agent.clock = Clock()
    s.start_agent()
    s.agent.report_once(full=True)
    yield s
    s.stop()


def device(stack, address):
    """The device (API view at 2.4) whose deployable is `address`."""
    deps = stack.api('GET', '/v2/deployables').json['deployables']
    device_id = next(d['device_id'] for d in deps if d['name'] == address)
    table = models.Device.__table__
    with db_api.reader() as session:
        device_uuid = session.execute(sa.select(table.c.uuid).where(
            table.c.id == device_id)).scalar()
    return stack.api('GET', '/v2/devices/%s' % device_uuid,
                     headers=V24).json


def reserved(stack, address):
    _, inventories = stack.placement.inventories(stack.rp(address))
    return {rc: (inv['reserved'], inv['total'])
            for rc, inv in inventories.items()}


def fenced(stack, address):
    """Nothing free: each class reserves what its allocations leave."""
    usages = stack.placement.usages(stack.rp(address))
    return all(r + usages.get(rc, 0) == t
               for rc, (r, t) in reserved(stack, address).items())


def reason(dev, type_):
    return next((c['reason'] for c in dev['conditions']
                 if c['type'] == type_), None)


def pass_after(stack, seconds):
    # A hair past `seconds`: (t + 120) - t can come out just below 120 in
    # floating point, and a timer started at t would not have run out.
    stack.clock.now += seconds + 1e-6
    stack.agent.report_once(full=True)


def test_phases_states_and_fencing_after_first_report(stack):
    compute = device(stack, COMPUTE)
    assert (compute['phase'], compute['management_state']) == (
        'Ready', 'Unclaimed')
    assert (compute['driver'], compute['mode']) == ('nvidia', 'Compute')
    assert not fenced(stack, COMPUTE)
    # On vfio-pci with no claim: someone else's until proven otherwise.
    # NVML cannot see it; its geometry is the shipped H200 capture's.
    # Phase Passthrough: on a VFIO driver it is no CUDA device, claimed or
    # not (the GPU glossary).
    vfio = device(stack, PASSTHROUGH)
    assert (vfio['phase'], vfio['mode']) == ('Passthrough', 'Passthrough')
    assert vfio['management_state'] == 'Unknown'
    assert reason(vfio, 'Ownership') == 'OrphanPending'
    assert reserved(stack, PASSTHROUGH)['CUSTOM_GPU_MEM_SLICE'] == (8, 8)


def test_compute_mode_without_claim_never_becomes_orphaned(stack):
    pass_after(stack, 3600)
    assert device(stack, COMPUTE)['management_state'] == 'Unclaimed'


def test_passthrough_without_claim_is_orphaned_after_two_minutes(stack):
    pass_after(stack, 119)
    assert device(stack, PASSTHROUGH)['management_state'] == 'Unknown'
    pass_after(stack, 1)
    dev = device(stack, PASSTHROUGH)
    assert dev['management_state'] == 'Orphaned'
    assert fenced(stack, PASSTHROUGH)


def test_adopted_passthrough_is_offered(stack):
    CONF.set_override('adopt_passthrough', True, group='nvidia')
    stack.agent.report_once(full=True)
    dev = device(stack, PASSTHROUGH)
    assert (dev['phase'], dev['management_state']) == ('Passthrough',
                                                       'Unclaimed')
    assert not fenced(stack, PASSTHROUGH)


def test_claimed_whole_gpu_is_managed_passthrough(stack):
    CONF.set_override('adopt_passthrough', True, group='nvidia')
    stack.agent.report_once(full=True)
    test_gpu_binding.load_profiles(stack, 'h200-whole')
    arqs = stack.create_arqs('h200-whole')
    instance = str(uuid.uuid4())
    stack.bind(arqs, instance, [stack.rp(PASSTHROUGH)])
    [bound] = stack.wait_resolved(instance)
    assert bound['state'] == 'Bound'
    stack.agent.report_once(full=True)
    dev = device(stack, PASSTHROUGH)
    assert (dev['phase'], dev['management_state']) == (
        'Passthrough', 'Managed')


def test_exclude_fences_and_include_restores(stack):
    uuid_ = device(stack, COMPUTE)['uuid']
    r = stack.api('POST', '/v2/devices/%s/exclude' % uuid_, headers=V24)
    assert r.status_int == 200
    stack.agent.report_once()
    assert device(stack, COMPUTE)['management_state'] == 'Excluded'
    assert fenced(stack, COMPUTE)
    stack.api('POST', '/v2/devices/%s/include' % uuid_, headers=V24)
    stack.agent.report_once()
    assert device(stack, COMPUTE)['management_state'] == 'Unclaimed'
    assert not fenced(stack, COMPUTE)


def test_reclaim_refused_names_the_state(stack):
    uuid_ = device(stack, COMPUTE)['uuid']
    r = stack.api('POST', '/v2/devices/%s/reclaim' % uuid_, headers=V24)
    assert r.status_int == 409
    assert 'is Unclaimed; only an Orphaned device' in r.text


def test_reclaim_during_orphan_wait_is_held_then_done(stack):
    uuid_ = device(stack, PASSTHROUGH)['uuid']
    r = stack.api('POST', '/v2/devices/%s/reclaim' % uuid_, headers=V24)
    assert r.status_int == 202
    stack.agent.report_once()
    dev = device(stack, PASSTHROUGH)
    assert reason(dev, 'Reclaim') == 'Held'
    assert stack.gpu_host.sysfs.driver(PASSTHROUGH) == 'vfio-pci'
    pass_after(stack, 120)
    dev = device(stack, PASSTHROUGH)
    assert reason(dev, 'Reclaim') == 'Succeeded'
    assert stack.gpu_host.sysfs.driver(PASSTHROUGH) == 'nvidia'
    assert (dev['mode'], dev['management_state']) == ('Compute',
                                                      'Unclaimed')
    assert not fenced(stack, PASSTHROUGH)
    with db_api.reader() as session:
        table = models.Device.__table__
        assert session.execute(sa.select(
            table.c.reclaim_requested_at).where(
                table.c.uuid == uuid_)).scalar() is None


def test_reclaim_is_fail_closed_on_allocations(stack):
    """Orphaned, yet Placement holds an allocation on it (a claim whose ARQ
    is not bound yet): the reclaim is refused and nothing is touched.
    """
    rp = stack.rp(COMPUTE)
    r = stack.placement.adapter.put(
        '/allocations/%s' % uuid.uuid4(), microversion='1.28', json={
            'allocations': {rp: {'resources': {
                'CUSTOM_GPU_MEM_SLICE': 1, 'CUSTOM_GPU_COMPUTE_SLICE': 1}}},
            'project_id': 'p', 'user_id': 'u',
            'consumer_generation': None}, raise_exc=False)
    assert r.status_code == 204, r.text
    uuid1 = stack.gpu_host.nvml.gpu_info()[0]['uuid']
    stack.gpu_host.nvml.create_gi(uuid1, 9, 4)      # nobody's 3g
    pass_after(stack, 0)
    pass_after(stack, 120)
    dev = device(stack, COMPUTE)
    assert dev['management_state'] == 'Orphaned', str(dev['conditions'])
    assert stack.api('POST', '/v2/devices/%s/reclaim' % dev['uuid'],
                     headers=V24).status_int == 202
    stack.agent.report_once()
    dev = device(stack, COMPUTE)
    assert reason(dev, 'Reclaim') == 'Refused'
    assert test_gpu_binding.layout(stack) == [(9, 4)]


def test_orphan_mig_instances_are_reclaimed(stack):
    uuid1 = stack.gpu_host.nvml.gpu_info()[0]['uuid']
    stack.gpu_host.nvml.create_gi(uuid1, 9, 4)      # nobody's 3g
    pass_after(stack, 0)
    dev = device(stack, COMPUTE)
    assert reason(dev, 'Ownership') == 'OrphanPending'
    pass_after(stack, 120)
    dev = device(stack, COMPUTE)
    assert dev['management_state'] == 'Orphaned'
    stack.api('POST', '/v2/devices/%s/reclaim' % dev['uuid'], headers=V24)
    stack.agent.report_once()
    dev = device(stack, COMPUTE)
    assert reason(dev, 'Reclaim') == 'Succeeded'
    assert dev['management_state'] == 'Unclaimed'
    assert test_gpu_binding.layout(stack) == []


def health_pass(stack):
    """Deliver pending NVML events (the agent's thread does this), then a
    report pass.
    """
    while stack.driver.health.poll_once(0) is not None:
        pass
    stack.agent.report_once(full=True)


def test_fatal_xid_fails_and_fences_then_recovers(stack):
    stack.driver.health.clock = stack.clock
    uuid1 = stack.gpu_host.nvml.gpu_info()[0]['uuid']
    stack.gpu_host.nvml.inject_xid(uuid1, 13)        # an application's
    health_pass(stack)
    assert device(stack, COMPUTE)['phase'] == 'Ready'
    stack.gpu_host.nvml.inject_xid(uuid1, 999)       # nobody classified it
    health_pass(stack)
    dev = device(stack, COMPUTE)
    assert dev['phase'] == 'Failed'
    assert reason(dev, 'Healthy') == 'Xid999'
    assert fenced(stack, COMPUTE)
    # No restart: healthy probes for the recovery time bring it back (a
    # second more: (t + 300) - t need not be 300 in floating point).
    stack.clock.now += CONF.nvidia.health_recovery_after + 1
    health_pass(stack)
    dev = device(stack, COMPUTE)
    assert (dev['phase'], reason(dev, 'Healthy')) == ('Ready', 'Healthy')
    assert not fenced(stack, COMPUTE)


def test_gpu_off_the_bus_is_lost_until_it_returns(stack):
    uuid1 = stack.gpu_host.nvml.gpu_info()[0]['uuid']
    stack.gpu_host.nvml.fall_off_bus(uuid1)
    health_pass(stack)
    dev = device(stack, COMPUTE)
    assert dev['phase'] == 'Lost'
    assert fenced(stack, COMPUTE)
    stack.gpu_host.nvml.recover(uuid1)
    health_pass(stack)
    assert device(stack, COMPUTE)['phase'] == 'Ready'
    assert not fenced(stack, COMPUTE)


def requested(stack, uuid_, action):
    table = models.Device.__table__
    with db_api.reader() as session:
        return session.execute(sa.select(
            table.c[action + '_requested_at']).where(
                table.c.uuid == uuid_)).scalar()


def test_reclaim_is_refused_while_a_vm_holds_the_vfio_group(stack):
    """An orphaned passthrough GPU that QEMU still holds open
    (/dev/vfio/<group> in its /proc/<pid>/fd): nothing is touched.
    """
    host = stack.gpu_host
    group = host.sysfs.iommu_group(PASSTHROUGH)
    host.hold_vfio_group(4242, group)
    pass_after(stack, 120)
    dev = device(stack, PASSTHROUGH)
    assert dev['management_state'] == 'Orphaned'
    assert stack.api('POST', '/v2/devices/%s/reclaim' % dev['uuid'],
                     headers=V24).status_int == 202
    stack.agent.report_once()
    dev = device(stack, PASSTHROUGH)
    condition = next(c for c in dev['conditions'] if c['type'] == 'Reclaim')
    assert condition['reason'] == 'Refused'
    assert '4242 hold /dev/vfio/%d' % group in condition['message']
    assert host.sysfs.driver(PASSTHROUGH) == 'vfio-pci'
    assert host.sysfs.resets == []
    assert requested(stack, dev['uuid'], 'reclaim') is None   # answered
    # The VM is gone: asked again, the reclaim resets the GPU (FLR on
    # vfio-pci) and hands it back to nvidia.
    host.release_vfio_group(4242)
    # (A request is known by its time, to the second: this one is later.)
    db_devices.request_reclaim(dev['uuid'], now=datetime.datetime.now(
        datetime.timezone.utc).replace(tzinfo=None) + datetime.timedelta(
            seconds=5))
    stack.agent.report_once()
    dev = device(stack, PASSTHROUGH)
    assert reason(dev, 'Reclaim') == 'Succeeded'
    assert host.sysfs.resets == [PASSTHROUGH]
    assert host.sysfs.driver(PASSTHROUGH) == 'nvidia'


def test_reclaim_fails_closed_when_procfs_is_unreadable(stack, tmp_path):
    CONF.set_override('proc_root', str(tmp_path / 'missing'),
                      group='nvidia')
    pass_after(stack, 120)
    dev = device(stack, PASSTHROUGH)
    stack.api('POST', '/v2/devices/%s/reclaim' % dev['uuid'], headers=V24)
    stack.agent.report_once()
    dev = device(stack, PASSTHROUGH)
    assert reason(dev, 'Reclaim') == 'OccupancyUnknown'
    assert stack.gpu_host.sysfs.driver(PASSTHROUGH) == 'vfio-pci'


def test_reset_class_xid_stays_failed_until_an_admin_resets_it(stack):
    stack.driver.health.clock = stack.clock
    host = stack.gpu_host
    uuid1 = host.nvml.gpu_info()[0]['uuid']
    host.nvml.create_gi(uuid1, 9, 4)                 # an instance to wipe
    host.nvml.inject_xid(uuid1, 48)                  # double-bit ECC
    health_pass(stack)
    dev = device(stack, COMPUTE)
    assert (dev['phase'], reason(dev, 'Healthy')) == ('Failed', 'Xid48')
    stack.clock.now += 3600                          # waiting does not help
    health_pass(stack)
    dev = device(stack, COMPUTE)
    assert dev['phase'] == 'Failed'
    assert fenced(stack, COMPUTE)
    assert stack.api('POST', '/v2/devices/%s/reset' % dev['uuid'],
                     headers=V24).status_int == 404   # 2.6 only
    assert stack.api('POST', '/v2/devices/%s/reset' % dev['uuid'],
                     headers=V26).status_int == 202
    stack.agent.report_once(full=True)
    dev = device(stack, COMPUTE)
    condition = next(c for c in dev['conditions'] if c['type'] == 'Reset')
    assert condition['reason'] == 'Succeeded', condition
    assert 'destroyed GPU instance' in condition['message']
    assert 'PCI reset (flr bus)' in condition['message']
    assert (dev['phase'], dev['mode']) == ('Ready', 'Compute')
    assert not fenced(stack, COMPUTE)
    assert host.sysfs.resets == [COMPUTE]
    assert host.sysfs.driver(COMPUTE) == 'nvidia'
    assert test_gpu_binding.layout(stack) == []
    assert requested(stack, dev['uuid'], 'reset') is None
    # Persistence mode was turned off for the unbind and is on again.
    assert stack.driver.backend.persistence_mode(uuid1) is True


def test_reset_is_refused_while_a_process_runs(stack):
    stack.driver.health.clock = stack.clock
    host = stack.gpu_host
    uuid1 = host.nvml.gpu_info()[0]['uuid']
    host.nvml.inject_xid(uuid1, 62)
    _, mig_uuid = host.nvml.create_gi(uuid1, 9, 4)
    host.nvml.add_process(mig_uuid, 777, 1 << 30)
    health_pass(stack)
    dev = device(stack, COMPUTE)
    assert dev['phase'] == 'Failed'
    assert stack.api('POST', '/v2/devices/%s/reset' % dev['uuid'],
                     headers=V26).status_int == 202
    stack.agent.report_once()
    dev = device(stack, COMPUTE)
    condition = next(c for c in dev['conditions'] if c['type'] == 'Reset')
    assert condition['reason'] == 'Refused'
    assert 'pids 777' in condition['message']
    assert host.sysfs.resets == []
    assert host.sysfs.driver(COMPUTE) == 'nvidia'
    assert dev['phase'] == 'Failed'


def test_reset_of_a_ready_device_is_409_with_its_phase(stack):
    dev = device(stack, COMPUTE)
    r = stack.api('POST', '/v2/devices/%s/reset' % dev['uuid'],
                  headers=V26)
    assert r.status_int == 409
    assert 'is Ready; only a Failed or Lost device' in r.text
