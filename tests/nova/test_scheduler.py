# SPDX-License-Identifier: Apache-2.0
"""Device profile groups → request groups → the candidates query."""

import logging
from urllib import parse

import pytest

from nova_cyborg_client import cyborg
from nova_cyborg_client import exception
from nova_cyborg_client import scheduler

FLAVOR = dict(vcpus=2, memory_mb=2048, root_gb=20)


def _groups(dp_groups, owner=None):
    client = cyborg._CyborgClient.__new__(cyborg._CyborgClient)
    return client.get_device_request_groups(dp_groups, owner)


def _query(dp_groups, extra_specs=None, conf=None):
    specs = {'accel:device_profile': 'dp'}
    specs.update(extra_specs or {})
    flavor = scheduler.Flavor(extra_specs=specs, **FLAVOR)
    request = scheduler.ResourceRequest.from_flavor(flavor,
                                                    _groups(dp_groups))
    return request


def test_one_group_renders_as_nova_does():
    request = _query([{'resources:FPGA': '1',
                       'trait:CUSTOM_FAKE_DEVICE': 'required'}])
    assert request.to_queryparams() == [
        ('limit', 1000),
        ('requireddevice_profile_0', 'CUSTOM_FAKE_DEVICE'),
        ('resources', 'DISK_GB:20,MEMORY_MB:2048,VCPU:2'),
        ('resourcesdevice_profile_0', 'FPGA:1'),
        ('root_required', 'COMPUTE_ACCELERATORS'),
    ]
    # urlencoded and sorted, like Nova's to_querystring().
    assert request.to_querystring() == (
        'limit=1000&requireddevice_profile_0=CUSTOM_FAKE_DEVICE&'
        'resources=DISK_GB%3A20%2CMEMORY_MB%3A2048%2CVCPU%3A2&'
        'resourcesdevice_profile_0=FPGA%3A1&'
        'root_required=COMPUTE_ACCELERATORS')


def test_two_groups_default_group_policy_none(caplog):
    caplog.set_level(logging.INFO)
    request = _query([{'resources:PGPU': '1'}, {'resources:FPGA': '2'}])
    params = dict(request.to_queryparams())
    assert params['group_policy'] == 'none'
    assert params['resourcesdevice_profile_0'] == 'PGPU:1'
    assert params['resourcesdevice_profile_1'] == 'FPGA:2'
    assert 'more than one numbered request group' in caplog.text


def test_flavor_group_policy_wins():
    request = _query([{'resources:PGPU': '1'}, {'resources:FPGA': '2'}],
                     {'group_policy': 'isolate'})
    assert dict(request.to_queryparams())['group_policy'] == 'isolate'


def test_one_group_has_no_group_policy():
    request = _query([{'resources:PGPU': '1'}])
    assert 'group_policy' not in dict(request.to_queryparams())


def test_flavor_with_two_numbered_groups_gets_no_default():
    # Nova only defaults the policy when at most one numbered group comes
    # from the flavor itself; Placement then asks for one (400).
    request = _query([{'resources:PGPU': '1'}],
                     {'resources1:VGPU': '1', 'resources2:VGPU': '1'})
    params = dict(request.to_queryparams())
    assert 'group_policy' not in params
    assert params['resources1'] == 'VGPU:1'
    assert params['resources2'] == 'VGPU:1'


def test_forbidden_traits_are_negated_after_required():
    request = _query([{'resources:PGPU': '1',
                       'trait:CUSTOM_B': 'required',
                       'trait:CUSTOM_A': 'required',
                       'trait:CUSTOM_Z': 'forbidden',
                       'trait:CUSTOM_Y': 'forbidden'}])
    assert dict(request.to_queryparams())['requireddevice_profile_0'] == \
        'CUSTOM_A,CUSTOM_B,!CUSTOM_Y,!CUSTOM_Z'
    query = parse.parse_qs(request.to_querystring())
    assert query['requireddevice_profile_0'] == [
        'CUSTOM_A,CUSTOM_B,!CUSTOM_Y,!CUSTOM_Z']


def test_accel_keys_ignored_and_key_suffix_dropped():
    groups = _groups([{'resources1:FPGA': '1', 'trait2:CUSTOM_X': 'required',
                       'accel:bitstream_id': 'abc',
                       'accel:function_id': 'def'}])
    assert len(groups) == 1
    group = groups[0]
    assert group.requester_id == 'device_profile_0'
    assert group.resources == {'FPGA': 1}
    assert group.required_traits == {'CUSTOM_X'}
    assert group.forbidden_traits == set()


def test_invalid_values_skipped_with_a_warning(caplog):
    caplog.set_level(logging.WARNING)
    groups = _groups([{'resources:PGPU': '1', 'resources:NOT_A_CLASS': '1',
                       'resources:CUSTOM_OK': '3',
                       'resources:FPGA': 'two', 'resources:VGPU': '-1',
                       'trait:CUSTOM_T': 'preferred'}])
    group = groups[0]
    assert group.resources == {'PGPU': 1, 'CUSTOM_OK': 3}
    assert group.required_traits == set() == group.forbidden_traits
    assert "invalid ResourceClass 'NOT_A_CLASS'" in caplog.text
    assert "Received 'two' for key resourcesdevice_profile_0" in caplog.text
    assert "Received '-1'" in caplog.text
    assert "Received 'preferred'" in caplog.text


def test_requester_ids_follow_group_order_and_owner():
    groups = _groups([{'resources:PGPU': '1'}, {'resources:FPGA': '1'},
                      {'resources:VGPU': '1'}])
    assert [g.requester_id for g in groups] == [
        'device_profile_0', 'device_profile_1', 'device_profile_2']
    port = '7970ec1f-7ce0-4293-a2a3-92cbce8048b4'
    assert _groups([{'resources:FPGA': '1'}], owner=port)[0].requester_id == \
        'device_profile_07970ec1f-7ce0-4293-a2a3-92cbce8048b4'


def test_without_profile_no_root_required_and_limit_from_conf(conf):
    conf.set_override('max_placement_results', 7, group='scheduler')
    flavor = scheduler.Flavor(**FLAVOR)
    params = dict(scheduler.ResourceRequest.from_flavor(
        flavor, conf=conf).to_queryparams())
    assert params == {'limit': 7,
                      'resources': 'DISK_GB:20,MEMORY_MB:2048,VCPU:2'}


def test_flavor_extra_specs_and_zero_amounts():
    flavor = scheduler.Flavor(vcpus=2, memory_mb=1024, root_gb=10,
                              ephemeral_gb=5, swap=1500, extra_specs={
                                  'resources:VCPU': '0',
                                  'trait:HW_CPU_X86_AVX2': 'required',
                                  'hw:cpu_policy': 'dedicated'})
    params = dict(scheduler.ResourceRequest.from_flavor(
        flavor).to_queryparams())
    # DISK_GB = root + ephemeral + ceil(swap MiB / 1024).
    assert params['resources'] == 'DISK_GB:17,MEMORY_MB:1024'
    assert params['required'] == 'HW_CPU_X86_AVX2'


def test_group_checks():
    request = scheduler.ResourceRequest()
    with pytest.raises(ValueError, match='Missing requester_id'):
        request.add_request_group(scheduler.RequestGroup())
    with pytest.raises(ValueError, match='no-op RequestGroup'):
        request.add_request_group(scheduler.RequestGroup('device_profile_0'))
    group = scheduler.RequestGroup('device_profile_0')
    group.add_resource('PGPU', 1)
    request.add_request_group(group)
    with pytest.raises(exception.RequestGroupSuffixConflict,
                       match='Duplicate request group suffix '
                             'device_profile_0.'):
        request.add_request_group(group)


def test_provider_mapping_from_the_allocation_request():
    groups = _groups([{'resources:PGPU': '1'}, {'resources:FPGA': '1'}])
    scheduler.fill_provider_mapping(groups, {
        'allocations': {},
        'mappings': {'device_profile_0': ['gpu-rp'],
                     'device_profile_1': ['fpga-rp'],
                     '': ['compute-rp']}})
    assert scheduler.get_request_group_mapping(groups) == {
        'device_profile_0': ['gpu-rp'], 'device_profile_1': ['fpga-rp']}
