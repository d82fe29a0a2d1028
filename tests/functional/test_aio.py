# SPDX-License-Identifier: Apache-2.0
"""cyborg-aio as a user runs it: one process, API + real Placement, ready
line, clean stop on SIGTERM/SIGINT, state kept across restarts."""

import json
import os
import signal
import subprocess
import sys

import pytest
import requests
import yaml

from cyborg_harness import aio as harness_aio

FAKE_HOSTS = harness_aio.FAKE_HOSTS
HOST_SPEC = harness_aio.HOST_SPEC
NODE = 'aio-test-node'


@pytest.fixture
def aio(tmp_path):
    state_dir = tmp_path / 'state'
    config_file = tmp_path / 'cyborg.conf'
    config_file.write_text('[DEFAULT]\nhost = %s\n' % NODE)
    started = []

    def start(demo=False, host_spec=HOST_SPEC):
        # cyborg-aio as a user runs it (the harness's aio mode): stdout is
        # only the ready line (and the demo's), logs go to stderr.
        started.append(harness_aio.Aio(
            tmp_path, state_dir=state_dir, config_file=config_file,
            demo=demo, host_spec=host_spec, name='aio-%d' % len(started)))
        return started[-1]

    start.state_dir = state_dir
    yield start
    for process in started:
        process.kill()


def _compute_node(placement):
    resp = requests.get(placement + '/resource_providers',
                        params={'name': NODE},
                        headers={'X-Auth-Token': 'admin'}, timeout=10)
    assert resp.status_code == 200, resp.text
    providers = resp.json()['resource_providers']
    assert len(providers) == 1, providers
    return providers[0]


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
    node = _compute_node(placement)
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
    assert _compute_node(second.placement)['uuid'] == node['uuid']
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


def _demo_arqs(api):
    resp = requests.get(api + '/accelerator_requests', timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()['arqs']


def test_aio_demo_boots_instances_and_reruns(aio):
    """The demo: profiles created once, two instances booted the way Nova
    boots them, their <hostdev>s and ARQs printed, one GPU left free; a
    restart on the same state replaces the instances instead of failing or
    piling up. Nothing on the terminal but the ready line and the demo.
    """
    from cyborg_aio import demo

    first = aio(demo=True)
    out = first.read_until(r'^demo: \d+ of \d+ instance\(s\) booted')
    assert 'demo: 2 of 2 instance(s) booted' in out, out + first.logs()
    assert 'created demo-fpga, demo-gpu-fpga' in out
    # demo-fpga: 2 FPGA functions; demo-gpu-fpga: 1 GPU + 1 function.
    assert out.count('<hostdev mode="subsystem" type="pci" managed="yes">') \
        == 4, out
    assert out.count('bus="0x0c"') == 3, out
    assert ('bus="0x1b"' in out) != ('bus="0x43"' in out), out
    assert out.count('  Bound  ') == 4, out
    arqs = _demo_arqs(first.api)
    expected = {demo.instance_uuid(name) for name, _ in demo.INSTANCES}
    assert {a['instance_uuid'] for a in arqs} == expected
    assert {a['state'] for a in arqs} == {'Bound'}
    # One H200 is left for the README's next steps.
    resp = requests.get(
        first.placement + '/allocation_candidates',
        params={'resources': 'PGPU:1'}, timeout=10,
        headers={'X-Auth-Token': 'admin',
                 'OpenStack-API-Version': 'placement 1.10'})
    assert len(resp.json()['allocation_requests']) == 1, resp.text
    assert first.stop() == 0, first.logs()
    # Quiet by default: the terminal (stderr) got no log record at all;
    # the INFO log is in the state directory.
    assert first.stderr_lines() == [], first.logs()
    assert 'listening on' in first.logs()

    second = aio(demo=True)
    out = second.read_until(r'^demo: \d+ of \d+ instance\(s\) booted')
    assert 'demo: 2 of 2 instance(s) booted' in out, out + second.logs()
    assert 'created' not in out
    again = _demo_arqs(second.api)
    assert len(again) == 4 and {a['state'] for a in again} == {'Bound'}
    assert not {a['uuid'] for a in again} & {a['uuid'] for a in arqs}
    for instance in expected:
        resp = requests.get('%s/allocations/%s' % (second.placement,
                                                   instance),
                            headers={'X-Auth-Token': 'admin'}, timeout=10)
        assert resp.json()['allocations'], instance
    resp = requests.get(second.api + '/device_profiles', timeout=10)
    assert sorted(p['name'] for p in resp.json()['device_profiles']) == [
        'demo-fpga', 'demo-gpu-fpga']
    assert second.stop() == 0, second.logs()
    assert second.stderr_lines() == [], second.logs()


def test_aio_h200_vgpu_demo_boots_vgpus_for_vms(aio):
    """Two fake H200s under the vGPU Manager through the real nvidia
    driver and the Nova flow: a time-sliced vGPU on one GPU, MIG-backed
    vGPUs of two sizes on the other, each on its own VF with its type
    written (vfio layout); a restart unbinds and binds them again.
    """
    spec = os.path.join(FAKE_HOSTS, 'h200-vgpu.yaml')
    for run in range(2):
        proc = aio(demo=True, host_spec=spec)
        out = proc.read_until(r'^demo: \d+ of \d+ instance\(s\) booted')
        assert 'demo: 4 of 4 instance(s) booted' in out, out + proc.logs()
        arqs = _demo_arqs(proc.api)
        assert len(arqs) == 4, arqs
        infos = {a['device_profile_name'] + '/' + a['uuid']:
                 a['attach_handle_info'] for a in arqs}
        assert {a['attach_handle_type'] for a in arqs} == {'PCI'}
        assert all(i['managed'] == 'no' and i['function'] != '0'
                   for i in infos.values()), infos
        vfs = {(i['bus'], i['device'], i['function'])
               for i in infos.values()}
        assert len(vfs) == 4, infos
        by_type = {i['vgpu_type']: i for i in infos.values()}
        assert set(by_type) == {'1427', '1418', '1414'}, infos
        # The time-sliced vGPU has a GPU of its own.
        sliced_bus = by_type['1427']['bus']
        assert {i['bus'] for i in infos.values()
                if i['vgpu_type'] != '1427'} == {
                    {'1b': '43', '43': '1b'}[sliced_bus]}
        state = json.loads((aio.state_dir / 'fake-nvml.json').read_text())
        layouts = sorted(sorted((gi['profile_id'], gi['compute_instances'])
                                for gi in gpu['gpu_instances'])
                         for gpu in state['gpus'].values())
        assert layouts == [[], [(9, []), (19, []), (19, [])]], layouts
        assert 'MIG instances nobody owns' not in proc.logs()
        assert proc.stop() == 0, proc.logs()
        # No warning on the terminal: not the demo's, nor Placement's
        # "over-capacity" for a fenced GPU that is in use.
        assert proc.stderr_lines() == [], proc.logs()


def test_aio_h200_vgpu_demo_mdev_layout_leaves_no_mdev(aio, tmp_path):
    """The same host with the vGPU types as mdev types on the VFs: the demo
    makes each MDEV handle's mdev on its VF (the fake applies the write at
    once, as the kernel does); a rerun deletes the previous instances
    first, and exactly the mdevs of the live ARQs remain.
    """
    with open(os.path.join(FAKE_HOSTS, 'h200-vgpu.yaml')) as f:
        spec = yaml.safe_load(f)
    for gpu in spec['nvidia']['gpus']:
        gpu['vgpu_manager']['layout'] = 'mdev'
    path = tmp_path / 'h200-vgpu-mdev.yaml'
    path.write_text(yaml.safe_dump(spec))
    devices = aio.state_dir / 'fake-sysfs' / 'bus' / 'pci' / 'devices'
    for run in range(2):
        proc = aio(demo=True, host_spec=str(path))
        out = proc.read_until(r'^demo: \d+ of \d+ instance\(s\) booted')
        assert 'demo: 4 of 4 instance(s) booted' in out, out + proc.logs()
        assert out.count("type='mdev'") + out.count('type="mdev"') == 4, out
        arqs = _demo_arqs(proc.api)
        assert {a['attach_handle_type'] for a in arqs} == {'MDEV'}, arqs
        wanted = {}
        for arq in arqs:
            i = arq['attach_handle_info']
            vf = '%s:%s:%s.%s' % (i['domain'], i['bus'], i['device'],
                                  i['function'])
            wanted[arq['attach_handle_uuid']] = (vf, i['asked_type'])
        assert len({vf for vf, _ in wanted.values()}) == 4, wanted
        mdevs = {}
        for link in devices.glob('*/*/mdev_type'):
            mdevs[link.parent.name] = (link.parent.parent.name,
                                       os.path.basename(os.readlink(link)))
        assert mdevs == wanted
        assert proc.stop() == 0, proc.logs()


def test_aio_h200_dc_demo_whole_gpu_and_no_vgpu(aio):
    """Two fake H200s on the data-center driver: a whole H200 boots for a
    VM; a vGPU profile gets no allocation candidate.
    """
    proc = aio(demo=True, host_spec=os.path.join(FAKE_HOSTS, 'h200-dc.yaml'))
    out = proc.read_until(r'^demo: \d+ of \d+ instance\(s\) booted')
    assert 'demo: 1 of 1 instance(s) booted' in out, out + proc.logs()
    assert 'with h200-vgpu-1g-18gb refused, as it must be' in out, out
    [arq] = _demo_arqs(proc.api)
    assert arq['device_profile_name'] == 'h200-whole'
    assert arq['attach_handle_type'] == 'PCI'
    assert arq['attach_handle_info']['function'] == '0'
    assert arq['attach_handle_info']['restore_driver'] == 'nvidia'
    assert proc.stop() == 0, proc.logs()
    # The passed-through H200 is fenced while its instance holds it,
    # without Placement logging it over capacity; the refused vGPU is the
    # demo's point, not a warning.
    assert proc.stderr_lines() == [], proc.logs()


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
    node = _compute_node(started.placement)
    providers = requests.get(
        started.placement + '/resource_providers',
        params={'in_tree': node['uuid'], 'required': 'OWNER_CYBORG'},
        headers={'X-Auth-Token': 'admin',
                 'OpenStack-API-Version': 'placement 1.18'},
        timeout=10).json()['resource_providers']
    assert {p['uuid'] for p in providers} == \
        {d['rp_uuid'] for d in deployables}
    assert {p['name'] for p in providers} == {
        '%s_%s' % (NODE, a)
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
    config_file.write_text('[DEFAULT]\nhost = %s\n' % NODE)
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
