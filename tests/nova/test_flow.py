# SPDX-License-Identifier: Apache-2.0
"""Boots and deletes as Nova does them, against the whole stack: our API,
the real Placement, the conductor and an agent with the fake driver (two
H200s, one PCI attach handle each; an FPGA with four functions), in a
cyborg-aio process that notifies this process's events API.

After every failure nothing may remain: no ARQ for the instance, no
allocation for it.
"""

import subprocess
import sys
import time
import uuid

import pytest
import requests

from cyborg_harness import net
from nova_cyborg_client import cyborg
from nova_cyborg_client import events
from nova_cyborg_client import exception
from nova_cyborg_client import flow
from nova_cyborg_client import scheduler
from tests.nova import conftest

GPU = ('nova-gpu', [{'resources:PGPU': '1',
                     'trait:CUSTOM_NVIDIA_2335': 'required'}])
GPU_FPGA = ('nova-gpu-fpga', [{'resources:PGPU': '1',
                               'trait:CUSTOM_GPU_NVIDIA': 'required'},
                              {'resources:FPGA': '2',
                               'trait:CUSTOM_FAKE_DEVICE': 'required'}])
THREE_GPUS = ('nova-3-gpus', [{'resources:PGPU': '3'}])
ADMIN = {'X-Auth-Token': 'admin', 'OpenStack-API-Version': 'placement 1.36'}


def _profile(stack, profile):
    name, groups = profile
    resp = requests.get(stack.api + '/device_profiles', params={'name': name},
                        timeout=10)
    if not resp.json()['device_profiles']:
        resp = requests.post(stack.api + '/device_profiles', timeout=10,
                             json=[{'name': name, 'groups': groups}])
        assert resp.status_code == 201, resp.text
    return name


def _flavor(name, **specs):
    return scheduler.Flavor(vcpus=2, memory_mb=2048, root_gb=20,
                            extra_specs=dict(
                                {'accel:device_profile': name}, **specs))


def _arqs(stack, instance):
    resp = requests.get(stack.api + '/accelerator_requests',
                        params={'instance': instance}, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()['arqs']


def _allocations(stack, instance):
    resp = requests.get('%s/allocations/%s' % (stack.placement, instance),
                        headers=ADMIN, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()['allocations']


def _provider(stack, rp_uuid):
    return requests.get('%s/resource_providers/%s' % (stack.placement,
                                                      rp_uuid),
                        headers=ADMIN, timeout=10).json()


def _assert_gone(stack, instance):
    assert _arqs(stack, instance) == []
    assert _allocations(stack, instance) == {}
    assert stack.nova.receiver.instances.lookup(instance) == (False, None)


def _runner(stack, **kw):
    return flow.FlowRunner(stack.nova.receiver, **kw)


def _boot_failure(stack, runner, flavor):
    instance = str(uuid.uuid4())
    with pytest.raises(flow.FlowError) as e:
        runner.boot(flavor, instance_uuid=instance)
    assert e.value.instance_uuid == instance
    _assert_gone(stack, instance)
    return e.value


def test_boot_and_delete(stack):
    runner = _runner(stack)
    result = runner.boot(_flavor(_profile(stack, GPU)))
    instance = result.instance.uuid
    try:
        assert result.instance.host == stack.node
        gpu_rp = result.provider_mapping['device_profile_0'][0]
        assert _provider(stack, gpu_rp)['name'].startswith(stack.node)
        arqs = _arqs(stack, instance)
        assert [(a['state'], a['hostname'], a['device_rp_uuid'],
                 a['attach_handle_type']) for a in arqs] == [
            ('Bound', stack.node, gpu_rp, 'PCI')]
        assert [a['uuid'] for a in result.arqs] == [arqs[0]['uuid']]
        allocations = _allocations(stack, instance)
        assert allocations[gpu_rp]['resources'] == {'PGPU': 1}
        compute = [rp for rp in allocations if rp != gpu_rp]
        assert [allocations[rp]['resources'] for rp in compute] == [
            {'VCPU': 2, 'MEMORY_MB': 2048, 'DISK_GB': 20}]
        assert _provider(stack, compute[0])['name'] == stack.node
        info = arqs[0]['attach_handle_info']
        assert [(d.get('type'), d.find('source/address').get('bus'))
                for d in result.hostdevs] == [('pci', '0x' + info['bus'])]
        assert "<hostdev mode=\"subsystem\" type=\"pci\" managed=\"yes\">" \
            in result.devices_xml
    finally:
        runner.delete(instance)
    _assert_gone(stack, instance)


def test_two_instances_take_both_gpus_then_no_valid_host(stack):
    runner = _runner(stack)
    flavor = _flavor(_profile(stack, GPU))
    first = runner.boot(flavor)
    second = runner.boot(flavor)
    try:
        rps = {r.arqs[0]['device_rp_uuid'] for r in (first, second)}
        buses = {r.arqs[0]['attach_handle_info']['bus']
                 for r in (first, second)}
        assert len(rps) == 2 and buses == {'1b', '43'}
        error = _boot_failure(stack, runner, flavor)
        assert str(error).startswith('No valid host was found. Got no '
                                     'allocation candidates')
        assert isinstance(error.cause, exception.NoValidHost)
    finally:
        runner.delete(first.instance.uuid)
        runner.delete(second.instance.uuid)
    for result in (first, second):
        _assert_gone(stack, result.instance.uuid)


def test_multi_group_profile(stack):
    runner = _runner(stack)
    result = runner.boot(_flavor(_profile(stack, GPU_FPGA)))
    instance = result.instance.uuid
    try:
        mapping = result.provider_mapping
        assert set(mapping) == {'device_profile_0', 'device_profile_1'}
        allocations = _allocations(stack, instance)
        assert allocations[mapping['device_profile_0'][0]]['resources'] == \
            {'PGPU': 1}
        assert allocations[mapping['device_profile_1'][0]]['resources'] == \
            {'FPGA': 2}
        arqs = sorted(_arqs(stack, instance),
                      key=lambda a: a['device_profile_group_id'])
        assert [(a['device_profile_group_id'], a['device_rp_uuid'],
                 a['state']) for a in arqs] == [
            (0, mapping['device_profile_0'][0], 'Bound'),
            (1, mapping['device_profile_1'][0], 'Bound'),
            (1, mapping['device_profile_1'][0], 'Bound')]
        assert sorted(a['attach_handle_info']['bus'] for a in arqs)[:2] == [
            '0c', '0c']
        assert len(result.hostdevs) == 3
    finally:
        runner.delete(instance)
    _assert_gone(stack, instance)


def test_unknown_profile(stack):
    error = _boot_failure(stack, _runner(stack), _flavor('no-such-profile'))
    assert str(error) == ('Device profile name no-such-profile: expected '
                          'one device profile of that name, the accelerator '
                          'service has 0')


def test_no_candidate(stack):
    error = _boot_failure(stack, _runner(stack),
                          _flavor(_profile(stack, THREE_GPUS)))
    assert str(error).startswith('No valid host was found.')


class _NoHostYet(events.Instances):
    """Nova before instance_claim: events for the instance answer 422, and
    the service does not try again.
    """

    def set_host(self, instance_uuid, host):
        self.add(instance_uuid, None)


def _drop_events(stack):
    stack.nova.receiver.instances = _NoHostYet()
    stack.nova.receiver.app.instances = stack.nova.receiver.instances


def test_timeout(stack, monkeypatch):
    """Events lost, and the poll came before the binding finished."""
    _drop_events(stack)
    real = cyborg._CyborgClient.get_arqs_for_instance

    def poll_too_early(self, instance_uuid, only_resolved=False):
        if only_resolved:
            return []
        return real(self, instance_uuid)
    monkeypatch.setattr(cyborg._CyborgClient, 'get_arqs_for_instance',
                        poll_too_early)
    start = time.monotonic()
    error = _boot_failure(stack, _runner(stack, binding_timeout=1),
                          _flavor(_profile(stack, GPU)))
    assert time.monotonic() - start < 10
    assert str(error).startswith(
        'Build of instance %s aborted: Failure getting accelerator '
        'requests. (Timeout after 1s' % error.instance_uuid)
    assert isinstance(error.cause.__cause__,
                      exception.InstanceEventTimeout)


def test_early_poll_saves_lost_events(stack, monkeypatch):
    """Events lost, but the ARQs were resolved by the time of the poll."""
    _drop_events(stack)
    real = cyborg._CyborgClient.get_arqs_for_instance

    def poll_late(self, instance_uuid, only_resolved=False):
        if only_resolved:
            deadline = time.monotonic() + 30
            while (any(a['state'] == 'BindStarted'
                       for a in real(self, instance_uuid))
                   and time.monotonic() < deadline):
                time.sleep(0.05)
        return real(self, instance_uuid, only_resolved)
    monkeypatch.setattr(cyborg._CyborgClient, 'get_arqs_for_instance',
                        poll_late)
    runner = _runner(stack, binding_timeout=5)
    result = runner.boot(_flavor(_profile(stack, GPU)))
    try:
        assert [a['state'] for a in result.arqs] == ['Bound']
    finally:
        runner.delete(result.instance.uuid)
    _assert_gone(stack, result.instance.uuid)


def test_bind_fails_on_a_provider_without_device(stack, monkeypatch):
    monkeypatch.setattr(cyborg._CyborgClient, 'get_arq_device_rp_uuid',
                        lambda self, arq, rg_rp_map, owner: str(uuid.uuid4()))
    error = _boot_failure(stack, _runner(stack, binding_timeout=30),
                          _flavor(_profile(stack, GPU)))
    assert str(error).startswith(
        'Build of instance %s aborted: Failure getting accelerator requests.'
        % error.instance_uuid)
    # The failed event, or the poll found it BindFailed first.
    assert isinstance(error.cause.__cause__,
                      (exception.InstanceEventFailed,
                       exception.AcceleratorRequestBindingFailed))


def test_two_instances_racing_for_one_handle(stack, monkeypatch):
    """Placement gave the second instance the other GPU; bound to the
    first one's GPU instead, it finds its only handle taken.
    """
    runner = _runner(stack, binding_timeout=30)
    flavor = _flavor(_profile(stack, GPU))
    first = runner.boot(flavor)
    taken_rp = first.arqs[0]['device_rp_uuid']
    monkeypatch.setattr(cyborg._CyborgClient, 'get_arq_device_rp_uuid',
                        lambda self, arq, rg_rp_map, owner: taken_rp)
    try:
        error = _boot_failure(stack, runner, flavor)
        assert 'Failure getting accelerator requests.' in str(error)
        assert [a['state'] for a in _arqs(stack, first.instance.uuid)] == [
            'Bound']
        assert taken_rp in _allocations(stack, first.instance.uuid)
    finally:
        runner.delete(first.instance.uuid)
    _assert_gone(stack, first.instance.uuid)


def test_bind_refused(stack):
    """The instance already has ARQs: the PATCH answers 400, the new ARQs
    are deleted by uuid, then the instance is deleted.
    """
    name = _profile(stack, GPU)
    instance = str(uuid.uuid4())
    resp = requests.post(stack.api + '/accelerator_requests', timeout=10,
                         json={'device_profile_name': name})
    old = resp.json()['arqs'][0]['uuid']
    resp = requests.patch(stack.api + '/accelerator_requests', timeout=10,
                          json={old: [
                              {'op': 'add', 'path': '/hostname',
                               'value': 'elsewhere'},
                              {'op': 'add', 'path': '/device_rp_uuid',
                               'value': str(uuid.uuid4())},
                              {'op': 'add', 'path': '/instance_uuid',
                               'value': instance}]})
    assert resp.status_code == 202, resp.text
    with pytest.raises(flow.FlowError) as e:
        _runner(stack).boot(_flavor(name), instance_uuid=instance)
    assert str(e.value).startswith(
        'Failed to bind accelerator requests: PATCH /accelerator_requests: '
        "HTTP 400: Couldn't apply patch. Reason: Instance %s already has "
        'accelerator requests.' % instance)
    _assert_gone(stack, instance)
    resp = requests.get(stack.api + '/accelerator_requests/' + old,
                        timeout=10)
    assert resp.status_code == 404


# -- the CLI ------------------------------------------------------------------

def test_cli_boots_and_cleans_up(tmp_path, conf):
    port = net.free_port()
    stack = conftest.Stack(tmp_path, 'nova-cli-node',
                           nova_endpoint='http://127.0.0.1:%d' % port)
    try:
        _profile(stack, GPU)
        cli = [sys.executable, '-m', 'nova_cyborg_client.flow',
               '--api', stack.api, '--placement', stack.placement,
               '--listen', '127.0.0.1:%d' % port, '--timeout', '60']
        run = subprocess.run(cli + ['--profile', GPU[0], '--count', '3',
                                    '--cleanup'],
                             capture_output=True, text=True, timeout=180)
        out = run.stdout
        # Two GPUs: two instances boot, the third finds no host.
        assert run.returncode == 1, run.stderr
        assert out.count('<hostdev mode="subsystem" type="pci"') == 2, out
        assert out.count('Bound') == 2, out
        assert 'boot failed: No valid host was found.' in out
        resp = requests.get(stack.api + '/accelerator_requests', timeout=10)
        assert resp.json()['arqs'] == []  # --cleanup

        run = subprocess.run(cli + ['--profile', GPU[0]],
                             capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stdout + run.stderr
        instance = run.stdout.split('instance ')[1].split()[0]
        assert len(_arqs(stack, instance)) == 1
        run = subprocess.run(cli + ['--delete', instance],
                             capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stderr
        assert _arqs(stack, instance) == []
        assert _allocations(stack, instance) == {}
    finally:
        stack.stop()
