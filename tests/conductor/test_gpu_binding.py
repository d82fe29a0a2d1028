# SPDX-License-Identifier: Apache-2.0
"""Binding GPU profiles through the API, conductor and agent with the real
nvidia driver over the fake NVML: MIG instances made at bind and destroyed
at unbind, Placement told what still fits, failures as BindFailed with the
reason and a `failed` event, ownership kept across an agent restart."""

import uuid

import pytest

from cyborg.conf import CONF
from cyborg import data
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import driver as nvidia
from cyborg_emulators.nvidia import fake_sysfs
from tests.conductor import test_binding

GPU = '0000:1b:00.0'
nova_server = test_binding.nova_server


@pytest.fixture
def gpu_host(tmp_path):
    host = fake_sysfs.FakeGpuHost({'iommu': True, 'gpus': [{
        'model': 'h200', 'pci_address': GPU, 'mig_mode': 1}]},
        root=str(tmp_path / 'sys'))
    with host:
        CONF.set_override('sysfs_root', host.root, group='nvidia')
        CONF.set_override('proc_root', host.proc_root, group='nvidia')
        yield host


def new_driver():
    return nvidia.NvidiaDriver(backend=nvml.PynvmlBackend(retry_delay=0))


@pytest.fixture
def stack(sqlite_database, placement_service, nova_server, gpu_host):
    s = test_binding.Stack(placement_service, nova_server, new_driver())
    s.gpu_host = gpu_host
    load_profiles(s, 'h200-mig-3g-71gb', 'h200-mig-1g-18gb', 'h200-whole')
    yield s
    s.stop()


def load_profiles(stack, *names):
    for name in names:
        stack.profile(name, data.profile(name)[0]['groups'])


def boot(stack, profile):
    arqs = stack.create_arqs(profile)
    instance = str(uuid.uuid4())
    assert stack.bind(arqs, instance, [stack.rp(GPU)] * len(arqs)) \
        .status_int == 202
    return arqs, instance, stack.wait_resolved(instance)


def layout(stack, index=0):
    state = stack.gpu_host.to_state()
    gpu = list(state['gpus'].values())[index]
    return sorted((gi['profile_id'], gi['start'])
                  for gi in gpu['gpu_instances'])


def provider(stack):
    rp = stack.rp(GPU)
    _, traits = stack.placement.traits(rp)
    _, inventories = stack.placement.inventories(rp)
    return traits, inventories


def test_mig_profiles_bind_as_one_arq_each_and_pack(stack):
    arqs, _, [bound] = boot(stack, 'h200-mig-3g-71gb')
    assert len(arqs) == 1          # slices and engines: one accelerator
    assert bound['state'] == 'Bound'
    assert bound['attach_handle_type'] == 'MIG'     # not for VMs
    info = bound['attach_handle_info']
    assert (info['mig_profile'], info['mig_start']) == ('3g.71gb', 4)
    assert info['mig_uuid'].startswith('MIG-')
    assert layout(stack) == [(9, 4)]
    # Placement heard what still fits before the bind completed.
    traits, inventories = provider(stack)
    assert 'CUSTOM_MIG_FIT_4G_71GB' in traits
    assert 'CUSTOM_MIG_FIT_7G_141GB' not in traits
    assert inventories['CUSTOM_GPU_MEM_SLICE']['max_unit'] == 4


def test_unplaceable_claim_fails_with_reason_and_event(stack):
    """Two 3g fill the memory slices; a 1g that a stale Placement view
    granted cannot be placed: BindFailed, a failed event, no overlap.
    """
    boot(stack, 'h200-mig-3g-71gb')
    boot(stack, 'h200-mig-3g-71gb')
    _, instance, [failed] = boot(stack, 'h200-mig-1g-18gb')
    assert failed['state'] == 'BindFailed'
    assert failed['attach_handle_type'] == ''
    assert layout(stack) == [(9, 0), (9, 4)]
    events = stack.wait_events(3)
    assert {'server_uuid': instance, 'status': 'failed'}.items() <= \
        events[-1].items()
    with test_binding.db_api.reader() as session:
        row = session.execute(test_binding.sa.select(
            test_binding.models.ExtendedAcceleratorRequest.__table__
            .c.bind_failure).where(
                test_binding.models.ExtendedAcceleratorRequest.__table__
                .c.uuid == failed['uuid'])).scalar()
    assert row == ('Preparing the device failed: No free placement for MIG '
                   '1g.18gb on GPU 0000:1b:00.0 (taken: 3g.71gb@0,'
                   '3g.71gb@4)')


def test_whole_gpu_refused_without_rebind_reports_reason(stack):
    _, _, [failed] = boot(stack, 'h200-whole')
    assert failed['state'] == 'BindFailed'
    assert stack.gpu_host.sysfs.driver(GPU) == 'nvidia'


def test_unbind_destroys_the_instance_and_republishes(stack):
    arqs, instance, _ = boot(stack, 'h200-mig-3g-71gb')
    r = stack.api('DELETE', '/v2/accelerator_requests?instance=%s'
                  % instance, headers=test_binding.NOVA_HEADERS)
    assert r.status_int == 204
    # Released after the 204: the agent destroys, then republishes.
    deadline = test_binding.time.time() + 10
    while test_binding.time.time() < deadline:
        traits, inventories = provider(stack)
        if 'CUSTOM_MIG_FIT_7G_141GB' in traits and \
                inventories['CUSTOM_GPU_MEM_SLICE']['max_unit'] == 8:
            break
        test_binding.time.sleep(0.05)
    assert layout(stack) == []
    assert 'CUSTOM_MIG_FIT_7G_141GB' in traits
    assert inventories['CUSTOM_GPU_MEM_SLICE']['max_unit'] == 8


def test_agent_restart_keeps_ownership(stack):
    boot(stack, 'h200-mig-3g-71gb')
    stack.stop_agent()
    stack.driver = new_driver()      # nothing in memory: DB + NVML only
    stack.agent = stack.new_agent()
    stack.start_agent()
    stack.agent.report_once(full=True)
    _, inventories = provider(stack)
    assert inventories['CUSTOM_GPU_MEM_SLICE']['reserved'] == 0
    deps = stack.api('GET', '/v2/deployables').json['deployables']
    assert [d['name'] for d in deps] == [GPU]
    attrs = stack.api('GET', '/v2/attributes').json['attributes']
    assert 'mig_orphans' not in {a['key'] for a in attrs}
    # The next claim packs around the instance the DB says is owned.
    _, _, [bound] = boot(stack, 'h200-mig-3g-71gb')
    assert bound['attach_handle_info']['mig_start'] == 0
