# SPDX-License-Identifier: Apache-2.0
"""The flow's last step, as Nova 2026.2's libvirt driver takes it: every
bound ARQ wired or the boot refused, the mdevs of MDEV handles created
before the guest starts and removed when it is deleted.

The accelerator service and Placement are a scripted stub here (the
whole-stack boots are in test_flow.py); `_boot` is cut after the binding
so that the ARQs a vGPU host binds can be given as they are.
"""

import uuid

import pytest

from nova_cyborg_client import events as nova_events
from nova_cyborg_client import exception
from nova_cyborg_client import flow
from nova_cyborg_client import mdev
from nova_cyborg_client import scheduler
from tests.nova import conftest

FLAVOR = scheduler.Flavor(extra_specs={'accel:device_profile': 'vgpu'})


class KernelMdevs(mdev.MdevCreator):
    """The mdevs a host has, as the kernel keeps them: create refuses a
    type the parent does not offer (EINVAL) and a uuid in use (EEXIST);
    remove of an absent mdev is nothing to do.
    """

    def __init__(self, offered):
        self.offered = offered      # {parent: {mdev type}}
        self.mdevs = {}             # uuid → Mdev
        self.removed = []

    def create(self, m):
        if m.mdev_type not in self.offered.get(m.parent, ()):
            raise exception.MdevCreationFailed(
                uuid=m.uuid, mdev_type=m.mdev_type, parent=m.parent,
                reason='the device offers no such mdev type')
        if m.uuid in self.mdevs:
            raise exception.MdevCreationFailed(
                uuid=m.uuid, mdev_type=m.mdev_type, parent=m.parent,
                reason='File exists')
        self.mdevs[m.uuid] = m

    def remove(self, m):
        self.removed.append(m.uuid)
        return self.mdevs.pop(m.uuid, None) is not None


def _mdev_arq(function, asked_type='nvidia-1061'):
    return {'uuid': str(uuid.uuid4()), 'state': 'Bound',
            'device_profile_name': 'vgpu', 'device_profile_group_id': 0,
            'hostname': 'node1', 'device_rp_uuid': str(uuid.uuid4()),
            'instance_uuid': None, 'attach_handle_type': 'MDEV',
            'attach_handle_uuid': str(uuid.uuid4()),
            'attach_handle_info': {'domain': '0000', 'bus': '1b',
                                   'device': '00', 'function': function,
                                   'asked_type': asked_type}}


@pytest.fixture
def nova(stub, conf, monkeypatch):
    """A runner whose boot ends with the ARQs in stub.bound, bound; the
    stub answers for them, for their deletion and for Placement's.
    """
    conftest.point_at(conf, placement=stub.url[:-len('/v2')])
    stub.bound = []
    stub.routes[('GET', '/accelerator_requests')] = lambda r: (
        200, {'arqs': stub.bound})
    stub.routes[('DELETE', '/accelerator_requests')] = (204, None)

    def after_bind(self, instance):
        for arq in stub.bound:
            arq['instance_uuid'] = instance.uuid
        stub.routes[('DELETE', '/allocations/%s' % instance.uuid)] = (
            204, None)
        return flow.BootResult(instance, stub.bound, {},
                               self._spawn(instance, stub.bound))

    monkeypatch.setattr(flow.FlowRunner, '_boot', after_bind)
    kernel = KernelMdevs({'0000:1b:00.4': {'nvidia-1061'},
                          '0000:1b:00.5': {'nvidia-1061'}})
    runner = flow.FlowRunner(nova_events.Receiver(), mdev_creator=kernel)
    return runner, kernel


def _requests(stub, method, path):
    return [r for r in stub.requests
            if r['method'] == method and r['path'].endswith(path)]


def test_mdevs_created_then_removed_at_delete(stub, nova):
    runner, kernel = nova
    stub.bound = [_mdev_arq('4'), _mdev_arq('5')]
    result = runner.boot(FLAVOR)
    handles = [a['attach_handle_uuid'] for a in stub.bound]
    assert sorted(kernel.mdevs) == sorted(handles)
    assert [(m.parent, m.mdev_type) for m in result.mdevs] == [
        ('0000:1b:00.4', 'nvidia-1061'), ('0000:1b:00.5', 'nvidia-1061')]
    assert [d.find('source/address').get('uuid')
            for d in result.hostdevs] == handles
    assert 'type="mdev" managed="no" model="vfio-pci"' in result.devices_xml
    table = flow.arq_table(result.arqs)
    assert 'MDEV nvidia-1061 on 0000:1b:00.4, mdev %s' % handles[0] in table

    runner.delete(result.instance.uuid, FLAVOR)
    assert kernel.mdevs == {} and kernel.removed == handles
    # The mdevs go before the ARQs that named them.
    methods = [r['method'] for r in stub.requests
               if r['path'].endswith('/accelerator_requests')]
    assert methods == ['GET', 'DELETE']


def test_unwirable_handle_fails_the_boot_and_creates_nothing(stub, nova):
    runner, kernel = nova
    mig = dict(_mdev_arq('6'), attach_handle_type='MIG')
    stub.bound = [_mdev_arq('4'), mig]
    with pytest.raises(flow.FlowError) as e:
        runner.boot(FLAVOR)
    assert isinstance(e.value.cause, exception.AttachHandleNotWirable)
    assert str(e.value).startswith(
        'Cannot give the guest its accelerators: ARQ %s (attach handle type '
        'MIG): a MIG instance of a data-center-driver host is for host '
        'processes and containers' % mig['uuid'])
    assert kernel.mdevs == {}
    # ... and the instance is gone: ARQs and allocations deleted.
    assert _requests(stub, 'DELETE', '/accelerator_requests')
    assert _requests(stub, 'DELETE', '/allocations/%s'
                     % e.value.instance_uuid)
    assert not runner.receiver.instances.lookup(e.value.instance_uuid)[0]


def test_mdev_creation_failure_removes_those_created(stub, nova):
    runner, kernel = nova
    first, bad = _mdev_arq('4'), _mdev_arq('5', asked_type='nvidia-9')
    stub.bound = [first, bad]
    with pytest.raises(flow.FlowError) as e:
        runner.boot(FLAVOR)
    assert isinstance(e.value.cause, exception.MdevCreationFailed)
    assert str(e.value) == (
        'Cannot create mdev %s of type nvidia-9 on 0000:1b:00.5: the device '
        'offers no such mdev type' % bad['attach_handle_uuid'])
    assert kernel.mdevs == {}
    assert kernel.removed == [first['attach_handle_uuid'],
                              bad['attach_handle_uuid']]
    assert _requests(stub, 'DELETE', '/accelerator_requests')


def test_delete_without_arqs_removes_nothing(stub, nova):
    runner, kernel = nova
    instance = str(uuid.uuid4())
    stub.routes[('DELETE', '/allocations/%s' % instance)] = (404, {})
    runner.delete(instance, FLAVOR)
    assert kernel.removed == []
    assert _requests(stub, 'DELETE', '/accelerator_requests')
