# SPDX-License-Identifier: Apache-2.0
"""cyborg-aio as a user runs it: one process, API + real Placement, ready
line, clean stop on SIGTERM/SIGINT, state kept across restarts, the real
clients, and --keystone. Its demo: test_aio_demo.py, test_aio_h200.py.
"""

import json
import os
import signal
import subprocess
import sys

import pytest
import requests

from cyborg_harness import aio as harness_aio
from tests.functional import aio_common


def test_aio_serves_stops_and_keeps_state(aio):
    first = aio()
    api, placement = first.api, first.placement
    root = api[:-len('/v2')]

    resp = requests.get(root + '/', timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.json()['default_version']['id'] == 'v2'
    resp = requests.get(api, timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.json()['id'] == 'v2.0'

    resp = requests.post(api + '/device_profiles', timeout=10, json=[
        {'name': 'aio-gpu', 'groups': [{'resources:PGPU': '1'}]}])
    assert resp.status_code == 201, resp.text
    profile_uuid = resp.json()['uuid']
    resp = requests.post(api + '/accelerator_requests', timeout=10,
                         json={'device_profile_name': 'aio-gpu'})
    assert resp.status_code == 201, resp.text
    arqs = resp.json()['arqs']
    assert [a['state'] for a in arqs] == ['Initial']
    resp = requests.get(api + '/accelerator_requests', timeout=10)
    assert resp.status_code == 200, resp.text
    assert [a['uuid'] for a in resp.json()['arqs']] == [arqs[0]['uuid']]

    # The real Placement, with the compute node nova-compute would make.
    node = aio_common.compute_node(placement)
    resp = requests.get(
        '%s/resource_providers/%s/inventories' % (placement, node['uuid']),
        headers={'X-Auth-Token': 'admin'}, timeout=10)
    assert set(resp.json()['inventories']) == {'VCPU', 'MEMORY_MB',
                                               'DISK_GB'}
    assert requests.get(placement + '/resource_providers',
                        timeout=10).status_code == 401  # noauth2: a token

    assert first.stop(signal.SIGTERM) == 0, first.logs()
    assert [line for line in first.stdout if 'ready' in line] == [
        'cyborg-aio ready: api=%s placement=%s log=%s\n'
        % (api, placement, os.path.join(aio.state_dir, 'cyborg-aio.log'))]
    assert {'cyborg.sqlite', 'placement.sqlite'} <= set(
        os.listdir(aio.state_dir))

    second = aio()
    resp = requests.get(second.api + '/device_profiles', timeout=10)
    assert resp.status_code == 200, resp.text
    assert [p['uuid'] for p in resp.json()['device_profiles']] == [
        profile_uuid]
    resp = requests.get(second.api + '/accelerator_requests', timeout=10)
    assert [a['uuid'] for a in resp.json()['arqs']] == [arqs[0]['uuid']]
    assert aio_common.compute_node(second.placement)['uuid'] == node['uuid']
    assert second.stop(signal.SIGINT) == 0, second.logs()


def test_aio_help_documents_the_defaults():
    result = subprocess.run(
        [sys.executable, '-m', 'cyborg_aio', '--help'],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    text = ''.join(result.stdout.split())  # however argparse wrapped it
    for expected in ('--state-dir', '~/.local/share/cyborg-aio', '--port',
                     '6666', '--placement-port', '8778', '--host-spec',
                     '--config-file', 'cyborg-aioready:api=', '--nova-port',
                     '8774', '--nova-endpoint', '--no-demo', 'demo-gpu-fpga',
                     'gpu-host', 'cyborg-aio.log'):
        assert expected in text


def _openstack(*args):
    """The real OpenStack CLI (python-openstackclient with the
    python-cyborgclient and osc-placement plugins) of this virtualenv.
    """
    exe = os.path.join(os.path.dirname(sys.executable), 'openstack')
    result = subprocess.run([exe] + list(args) + ['-f', 'json'],
                            capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, OS_CLOUD=''))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_aio_reports_the_fake_host_to_placement(aio):
    """Right after `ready`, the agent's report is in the API and in
    Placement, and the real clients see it.
    """
    started = aio()
    devices = requests.get(started.api + '/devices', timeout=10).json()
    assert sorted(d['type'] for d in devices['devices']) == \
        ['FPGA', 'GPU', 'GPU']
    deployables = requests.get(started.api + '/deployables',
                               timeout=10).json()['deployables']
    node = aio_common.compute_node(started.placement)
    providers = requests.get(
        started.placement + '/resource_providers',
        params={'in_tree': node['uuid'], 'required': 'OWNER_CYBORG'},
        headers={'X-Auth-Token': 'admin',
                 'OpenStack-API-Version': 'placement 1.18'},
        timeout=10).json()['resource_providers']
    assert {p['uuid'] for p in providers} == \
        {d['rp_uuid'] for d in deployables}
    assert {p['name'] for p in providers} == {
        '%s_%s' % (aio_common.NODE, a)
        for a in ('0000:1b:00.0', '0000:43:00.0', '0000:0c:00.0')}

    listed = _openstack('--os-auth-type', 'admin_token', '--os-token',
                        'admin', '--os-endpoint', started.placement,
                        'resource', 'provider', 'list')
    assert {p['uuid'] for p in providers} < {p['uuid'] for p in listed}
    listed = _openstack('--os-auth-type', 'none', '--os-endpoint',
                        started.api, 'accelerator', 'device', 'list')
    assert sorted(d['type'] for d in listed) == ['FPGA', 'GPU', 'GPU']
    assert started.stop(signal.SIGTERM) == 0, started.logs()


def test_aio_keystone_writes_a_clouds_yaml_the_clients_use(tmp_path):
    """`cyborg-aio --keystone`: a real Keystone of its own, the services in
    its catalog, a clouds.yaml the real client finds them with (as the
    README shows).
    """
    from cyborg_harness import keystone
    if not keystone.available():
        pytest.skip('the keystone package is not installed')
    config_file = tmp_path / 'cyborg.conf'
    config_file.write_text('[DEFAULT]\nhost = %s\n' % aio_common.NODE)
    state = tmp_path / 'state'
    # Keystone starts first: db_sync, keys, bootstrap (a minute or more
    # on a loaded machine).
    aio = harness_aio.Aio(tmp_path, state_dir=state, config_file=config_file,
                          extra_args=['--keystone', '--keystone-port', '0'],
                          timeout=300)
    try:
        line = aio.read_until(r'^cyborg-aio keystone: ')
        clouds = state / 'clouds.yaml'
        assert str(clouds) in line
        assert oct(clouds.stat().st_mode & 0o777) == '0o600'
        env = dict(os.environ, OS_CLOUD='',
                   OS_CLIENT_CONFIG_FILE=str(clouds))
        exe = os.path.join(os.path.dirname(sys.executable), 'openstack')

        def openstack(*args):
            return subprocess.run([exe] + list(args), capture_output=True,
                                  text=True, timeout=120, env=env)

        listed = openstack('--os-cloud', 'cyborg-aio', 'accelerator',
                           'device', 'list', '-f', 'json')
        assert listed.returncode == 0, listed.stderr[-3000:]
        assert len(json.loads(listed.stdout)) >= 1
        # A project member may not see the hardware.
        refused = openstack('--os-cloud', 'cyborg-aio-member_a',
                            'accelerator', 'device', 'list')
        assert refused.returncode != 0
        assert '403' in refused.stderr or 'orbidden' in refused.stderr, \
            refused.stderr[-3000:]
        # Without a token: 401, the API is behind Keystone now.
        assert requests.get(aio.api + '/devices',
                            timeout=10).status_code == 401
        assert aio.stop() == 0
    finally:
        aio.kill()
