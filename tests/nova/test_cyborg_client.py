# SPDX-License-Identifier: Apache-2.0
"""The accelerator client against our real API (cheroot, SQLite) and, for
answers the real one never gives, a stub server."""

import json
import logging
import uuid

import pytest
import requests

from nova_cyborg_client import context as nova_context
from nova_cyborg_client import cyborg
from nova_cyborg_client import exception
from nova_cyborg_client import scheduler

CTX = nova_context.RequestContext()


def _profile(api, name, groups):
    resp = requests.post(api + '/device_profiles', timeout=10,
                         json=[{'name': name, 'groups': groups}])
    assert resp.status_code == 201, resp.text


def _client():
    return cyborg.get_client(CTX)


def test_profile_groups_and_request_groups(cyborg_api):
    groups = [{'resources:PGPU': '1', 'trait:CUSTOM_GPU': 'required'},
              {'resources:FPGA': '2', 'accel:function_id': 'x'}]
    _profile(cyborg_api, 'two-groups', groups)
    assert _client().get_device_profile_groups('two-groups') == groups
    request_groups = cyborg.get_device_profile_request_groups(CTX,
                                                              'two-groups')
    assert [(g.requester_id, g.resources, g.required_traits)
            for g in request_groups] == [
        ('device_profile_0', {'PGPU': 1}, {'CUSTOM_GPU'}),
        ('device_profile_1', {'FPGA': 2}, set())]


def test_unknown_profile(cyborg_api):
    with pytest.raises(exception.DeviceProfileError) as e:
        _client().get_device_profile_groups('nope')
    assert str(e.value) == (
        'Device profile name nope: expected one device profile of that '
        'name, the accelerator service has 0')
    with pytest.raises(exception.AcceleratorRequestOpFailed) as e:
        _client().create_arqs('nope')
    assert str(e.value) == (
        'Failed to create accelerator requests: POST /accelerator_requests: '
        'HTTP 404: Device Profile not found with name=nope (device '
        'profile nope)')


def test_create_and_match_multi_group(cyborg_api):
    _profile(cyborg_api, 'gpu-fpga', [{'resources:PGPU': '1'},
                                      {'resources:FPGA': '2'}])
    gpu_rp, fpga_rp = str(uuid.uuid4()), str(uuid.uuid4())
    arqs = _client().create_arqs_and_match_resource_providers(
        'gpu-fpga', {'device_profile_0': [gpu_rp],
                     'device_profile_1': [fpga_rp]})
    assert [(a['device_profile_group_id'], a['device_rp_uuid'], a['state'])
            for a in arqs] == [(0, gpu_rp, 'Initial'), (1, fpga_rp, 'Initial'),
                               (1, fpga_rp, 'Initial')]
    with pytest.raises(KeyError):
        _client().create_arqs_and_match_resource_providers(
            'gpu-fpga', {'device_profile_0': [gpu_rp]})


def test_bind_get_and_delete_by_instance(cyborg_api):
    _profile(cyborg_api, 'gpu', [{'resources:PGPU': '2'}])
    client = _client()
    arqs = client.create_arqs('gpu')
    instance = str(uuid.uuid4())
    rp = str(uuid.uuid4())
    client.bind_arqs({a['uuid']: {'hostname': 'node1', 'device_rp_uuid': rp,
                                  'instance_uuid': instance} for a in arqs})
    found = client.get_arqs_for_instance(instance)
    assert sorted(a['uuid'] for a in found) == sorted(a['uuid'] for a in arqs)
    assert {(a['hostname'], a['device_rp_uuid']) for a in found} == {
        ('node1', rp)}
    # A second bind for the same instance is refused by the service.
    more = client.create_arqs('gpu')
    with pytest.raises(exception.AcceleratorRequestBindingFailed) as e:
        client.bind_arqs({a['uuid']: {'hostname': 'node1',
                                      'device_rp_uuid': rp,
                                      'instance_uuid': instance}
                          for a in more})
    assert e.value.arqs == [a['uuid'] for a in more]
    assert str(e.value) == (
        'Failed to bind accelerator requests: PATCH /accelerator_requests: '
        "HTTP 400: Couldn't apply patch. Reason: Instance %s already has "
        'accelerator requests. Cannot bind additional ARQs. (ARQs %s)'
        % (instance, ','.join(a['uuid'] for a in more)))
    client.delete_arqs_for_instance(instance)
    client.delete_arqs_for_instance(instance)  # idempotent
    with pytest.raises(exception.AcceleratorRequestOpFailed) as e:
        client.get_arqs_for_instance(instance)
    assert str(e.value) == ('Failed to get accelerator requests: the '
                            'accelerator service has none for instance %s'
                            % instance)


def test_delete_by_uuid_only_logs(cyborg_api, caplog):
    _profile(cyborg_api, 'fpga', [{'resources:FPGA': '1'}])
    client = _client()
    arq = client.create_arqs('fpga')[0]
    assert client.get_arq_by_uuid(arq['uuid'])['uuid'] == arq['uuid']
    client.delete_arqs_by_uuid([arq['uuid']])
    with caplog.at_level(logging.ERROR):
        client.delete_arqs_by_uuid([arq['uuid']])  # 404: logged only
    assert 'Failed to delete ARQs %s' % arq['uuid'] in caplog.text
    with pytest.raises(exception.AcceleratorRequestOpFailed) as e:
        client.get_arq_by_uuid(arq['uuid'])
    assert str(e.value) == (
        'Failed to get accelerator requests: GET /accelerator_requests/%s: '
        'HTTP 404: ExtArq not found with uuid=%s' % (arq['uuid'],
                                                     arq['uuid']))


def test_unreachable(conf, caplog):
    conf.set_override('endpoint_override', 'http://127.0.0.1:9/v2',
                      group='cyborg')
    with pytest.raises(exception.DeviceProfileError) as e:
        _client().get_device_profile_groups('x')
    assert str(e.value).startswith(
        'Device profile name x: GET /device_profiles: could not reach the '
        'accelerator service (Unable to establish connection to '
        'http://127.0.0.1:9/v2/device_profiles')
    with pytest.raises(exception.AcceleratorRequestOpFailed) as e:
        _client().delete_arqs_for_instance('i')
    assert str(e.value).startswith(
        'Failed to delete accelerator requests: DELETE '
        '/accelerator_requests: could not reach the accelerator service (')
    assert str(e.value).endswith(' (instance i)')


# -- against the stub ---------------------------------------------------------

def _arq(state, n=0, **kw):
    arq = {'uuid': 'a%07d-0000-4000-8000-000000000000' % n, 'state': state,
           'device_profile_name': 'dp', 'device_profile_group_id': 0,
           'instance_uuid': 'i', 'attach_handle_type': '',
           'attach_handle_info': {}}
    arq.update(kw)
    return arq


def test_bind_patch_body_and_headers(stub):
    stub.routes[('PATCH', '/accelerator_requests')] = (202, None)
    bindings = {'u1': {'hostname': 'node1', 'device_rp_uuid': 'rp1',
                       'instance_uuid': 'inst'},
                'u2': {'hostname': 'node1', 'device_rp_uuid': 'rp2',
                       'instance_uuid': 'inst'}}
    _client().bind_arqs(bindings)
    request = stub.requests[-1]
    body = json.loads(request['raw'], object_pairs_hook=list)
    assert body == [
        ('u1', [[('path', '/hostname'), ('op', 'add'), ('value', 'node1')],
                [('path', '/device_rp_uuid'), ('op', 'add'),
                 ('value', 'rp1')],
                [('path', '/instance_uuid'), ('op', 'add'),
                 ('value', 'inst')]]),
        ('u2', [[('path', '/hostname'), ('op', 'add'), ('value', 'node1')],
                [('path', '/device_rp_uuid'), ('op', 'add'),
                 ('value', 'rp2')],
                [('path', '/instance_uuid'), ('op', 'add'),
                 ('value', 'inst')]])]
    assert request['path'] == '/v2/accelerator_requests'
    assert request['headers']['X-Auth-Token'] == 'admin'
    # Nova never asks Cyborg for a microversion.
    assert not any('Version' in h for h in request['headers'])


def test_profile_count_and_missing_key(stub):
    stub.routes[('GET', '/device_profiles')] = (
        200, {'device_profiles': [{'groups': []}, {'groups': []}]})
    with pytest.raises(exception.DeviceProfileError,
                       match='^Device profile name dp: expected one device '
                             'profile of that name, the accelerator service '
                             'has 2$'):
        _client().get_device_profile_groups('dp')
    assert stub.requests[-1]['query'] == 'name=dp'
    stub.routes[('GET', '/device_profiles')] = (200, {})
    with pytest.raises(exception.DeviceProfileError, match='service has 0'):
        _client().get_device_profile_groups('dp')


def test_create_answering_no_arqs(stub):
    stub.routes[('POST', '/accelerator_requests')] = (201, {'arqs': []})
    with pytest.raises(exception.AcceleratorRequestOpFailed) as e:
        _client().create_arqs('dp')
    assert str(e.value) == ('Failed to create accelerator requests: the '
                            'accelerator service made none for device '
                            'profile dp')
    assert stub.requests[-1]['json'] == {'device_profile_name': 'dp'}


def test_only_resolved_filters_client_side(stub):
    arqs = [_arq('Bound', 1), _arq('BindStarted', 2), _arq('BindFailed', 3),
            _arq('Deleting', 4), _arq('Initial', 5)]
    stub.routes[('GET', '/accelerator_requests')] = (200, {'arqs': arqs})
    client = _client()
    assert [a['state'] for a in client.get_arqs_for_instance(
        'i', only_resolved=True)] == ['Bound', 'BindFailed', 'Deleting']
    assert stub.requests[-1]['query'] == 'instance=i'  # never bind_state
    assert len(client.get_arqs_for_instance('i')) == 5

    class Instance:
        uuid = 'i'
    assert client.get_arq_uuids_for_instance(Instance()) == [
        a['uuid'] for a in arqs]
    stub.routes[('GET', '/accelerator_requests')] = (500, {})
    with pytest.raises(exception.AcceleratorRequestOpFailed) as e:
        client.get_arqs_for_instance('i')
    assert str(e.value) == ('Failed to get accelerator requests: GET '
                            '/accelerator_requests: HTTP 500: {} (instance '
                            'i)')


def test_delete_queries(stub):
    stub.routes[('DELETE', '/accelerator_requests')] = (204, None)
    _client().delete_arqs_by_uuid(['u1', 'u2'])
    assert stub.requests[-1]['query'] == 'arqs=u1%2Cu2'
    _client().delete_arqs_for_instance('inst')
    assert stub.requests[-1]['query'] == 'instance=inst'


def test_helpers():
    assert cyborg.get_device_amount_of_dp_groups([
        {'resources:FPGA': '2', 'trait:CUSTOM_X': 'required',
         'accel:bitstream_id': 'b'},
        {'resources1:PGPU': '1'}]) == 3
    arq = _arq('Bound', attach_handle_info={
        'domain': '0000', 'bus': '0c', 'device': '0', 'function': '1',
        'physical_network': 'PHYNET1'})
    assert cyborg.get_arq_pci_device_profile(arq) == {
        'physical_network': 'PHYNET1', 'pci_slot': '0000:0c:0.1',
        'arq_uuid': arq['uuid']}
    assert cyborg.get_device_profile_group_requester_id(1) == \
        'device_profile_1'
    assert isinstance(cyborg.get_client(CTX), cyborg._CyborgClient)
    assert scheduler.XS_KEYPAT.match('accel:x') is None


def test_endpoint_from_the_callers_catalog(stub, conf):
    conf.clear_override('endpoint_override', group='cyborg')
    stub.routes[('GET', '/device_profiles')] = (
        200, {'device_profiles': [{'groups': [{'resources:PGPU': '1'}]}]})
    context = nova_context.RequestContext(
        auth_token='user-token', service_catalog=[
            {'type': 'compute', 'endpoints': [
                {'interface': 'internal', 'url': 'http://nova.invalid'}]},
            {'type': 'accelerator', 'endpoints': [
                {'interface': 'admin', 'url': 'http://admin.invalid'},
                {'interface': 'public', 'url': stub.url}]}])
    assert cyborg.get_client(context).get_device_profile_groups('dp') == [
        {'resources:PGPU': '1'}]
    assert stub.requests[-1]['headers']['X-Auth-Token'] == 'user-token'
