# SPDX-License-Identifier: Apache-2.0
"""The parts of tools/nova_functional that need no Nova: what it feeds our
service is what our API and database accept (the harness itself runs in
a separate virtualenv; docs/nova-functional-tests.md).
"""

import json

import webob

from cyborg.api import app as api_app
from cyborg.conf import CONF
from cyborg.db import host_inventory
from tools.nova_functional import run
from tools.nova_functional import seeding
from tools.nova_functional import service

TRAIT = 'CUSTOM_FAKE_DEVICE'
HOST_RP = '5b0d1a4e-8f0e-4f0c-9d55-6f3c1c9f2a01'
DEV_RPS = ['5b0d1a4e-8f0e-4f0c-9d55-6f3c1c9f2a1%d' % i for i in range(2)]


def _placement_get(path):
    """Placement's answers for one host with two test-created devices."""
    if path.startswith('/resource_providers?'):
        return {'resource_providers': [
            {'uuid': rp, 'name': 'FakeDevice%d' % i,
             'root_provider_uuid': HOST_RP}
            for i, rp in enumerate(DEV_RPS)]}
    if path == '/resource_providers/%s' % HOST_RP:
        return {'name': 'accel_host0'}
    return {'inventories': {'FPGA': {'total': 2}}}


def test_seeded_devices_are_grouped_by_compute_node():
    hosts = seeding.seeded_devices(_placement_get, TRAIT)
    assert list(hosts) == ['accel_host0']
    assert [d['rp_uuid'] for d in hosts['accel_host0']] == DEV_RPS
    assert hosts['accel_host0'][0] == {
        'name': 'FakeDevice0', 'rp_uuid': DEV_RPS[0],
        'resource_class': 'FPGA', 'total': 2, 'traits': [TRAIT]}


def test_reported_devices_land_on_the_test_providers(sqlite_database):
    specs = seeding.seeded_devices(_placement_get, TRAIT)['accel_host0']
    devices = [service._device('accel_host0', i, spec)
               for i, spec in enumerate(specs)]
    host_inventory.apply_report('accel_host0', devices)
    rows = host_inventory.host_devices('accel_host0')
    assert len(rows) == 2
    app = api_app.setup_app(CONF)
    found = webob.Request.blank('/v2/deployables').get_response(app)
    deployables = found.json_body['deployables']
    assert sorted(d['rp_uuid'] for d in deployables) == DEV_RPS
    assert {d['num_accelerators'] for d in deployables} == {2}


def test_device_profiles_are_accepted_by_our_api(sqlite_database):
    app = api_app.setup_app(CONF)
    for profile in seeding.device_profiles(TRAIT):
        request = webob.Request.blank('/v2/device_profiles', method='POST')
        request.body = json.dumps([profile]).encode()
        request.content_type = 'application/json'
        response = request.get_response(app)
        assert response.status_int == 201, response.text
    listed = webob.Request.blank(
        '/v2/device_profiles?name=fakedev-dp').get_response(app)
    groups = listed.json_body['device_profiles'][0]['groups']
    assert groups == [{'resources:FPGA': '1', 'trait:' + TRAIT: 'required'}]


# -- the runner's bookkeeping (tools/nova_functional/run.py) ----------------

def _rows(*outcomes):
    return [{'test': 't%d' % i, 'outcome': o, 'seconds': 1.0, 'reason': ''}
            for i, o in enumerate(outcomes)]


def test_summary_line_counts_each_outcome():
    summary = run.summarize(_rows('pass', 'pass', 'error', 'fail'),
                            baseline=False, seconds=12.4)
    assert (summary['passed'], summary['total']) == (2, 4)
    assert summary['line'] == ('summary: 2/4 pass (error 1, fail 1) with '
                               'our service in 12 s')
    summary = run.summarize(_rows('pass'), baseline=True, seconds=3)
    assert summary['line'] == ("summary: 1/1 pass with Nova's "
                               "CyborgFixture in 3 s")


def test_summary_counts_tests_without_a_result_as_not_passed():
    # A worker that died leaves its tests without rows.
    summary = run.summarize(_rows('pass', 'pass'), baseline=False,
                            seconds=1, expected=5)
    assert (summary['passed'], summary['total']) == (2, 5)
    assert summary['line'] == ('summary: 2/5 pass (no result 3) with our '
                               'service in 1 s')


def test_summary_says_what_passed_only_when_run_again():
    rows = _rows('pass', 'pass', 'error')
    rows[1]['first_outcome'] = 'fail'
    rows[2]['first_outcome'] = 'error'
    summary = run.summarize(rows, baseline=False, seconds=1)
    assert summary['line'] == ('summary: 2/3 pass (error 1, 2 rerun, 1 of '
                               'them passed) with our service in 1 s')


def test_shards_cover_every_test_once():
    ids = ['c.%02d' % i for i in range(56)]
    shards = [run.shard_of(ids, i, 3) for i in range(3)]
    assert sorted(sum(shards, [])) == sorted(ids)
    assert [len(shard) for shard in shards] == [19, 19, 18]


def test_pinned_requirements_hold_nova_and_no_package_of_ours():
    with open(run.REQUIREMENTS) as f:
        pins = [line.strip() for line in f if line.strip()]
    assert 'nova==34.0.0' in pins
    assert all('==' in pin for pin in pins), pins
    assert not [pin for pin in pins if pin.startswith(('cyborg', '-e'))]
