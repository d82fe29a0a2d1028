# SPDX-License-Identifier: Apache-2.0
"""The real OpenStack clients, unchanged, against one cyborg-aio: once
without authentication (`--os-auth-type none --os-endpoint`), once behind
the session's real Keystone (`cyborg-aio --auth-strategy keystone`), the
clients authenticating with a password from a clouds.yaml and finding the
accelerator and placement endpoints in Keystone's catalog.

`openstack accelerator ...` in this virtualenv is python-openstackclient's
built-in accelerator commands (they shadow python-cyborgclient's entry points
of the same names); python-cyborgclient's own command classes are driven
in-process through cliff's parser + take_action with the SDK proxy as their
client.  openstacksdk's `conn.accelerator` proxy and osc-placement are used
as a user would.  Known client bugs are strict xfails with the reason.
"""

import http.server
import json
import os
import subprocess
import sys
import threading
import types
import uuid

import pytest
import requests

from cyborg_harness import aio as harness_aio

NODE = 'clients-node'
INSTANCE = '6f1b2c1e-1d5c-4a55-9d0e-0c7a1ee0c001'
GPU_ADDR = '0000:1b:00.0'
EXE = os.path.join(os.path.dirname(sys.executable), 'openstack')


class _FakeCompute(http.server.BaseHTTPRequestHandler):
    """Answers `GET /servers/<uuid>` — all `openstack accelerator arq bind`
    asks Nova (it resolves <server> with compute find_server).
    """

    def do_GET(self):
        parts = self.path.split('?')[0].strip('/').split('/')
        base = 'http://%s:%d/v2.1' % self.server.server_address[:2]
        if parts in ([''], ['v2.1']):  # keystoneauth version discovery
            body = json.dumps({'version': {
                'id': 'v2.1', 'status': 'CURRENT', 'version': '2.95',
                'min_version': '2.1',
                'links': [{'rel': 'self', 'href': base + '/'}]}})
            self.send_response(200)
        elif len(parts) == 3 and parts[1] == 'servers' \
                and parts[2] != 'detail':
            body = json.dumps({'server': {'id': parts[2], 'name': 'vm'}})
            self.send_response(200)
        else:
            body = json.dumps({'itemNotFound': {'code': 404}})
            self.send_response(404)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


# The persona the clients run as behind Keystone: an admin who also has
# the service role (binding ARQs is Nova's, through the service role).
PERSONA = 'operator'


@pytest.fixture(scope='module', params=['noauth', 'keystone'])
def stack(request, tmp_path_factory):
    mode = request.param
    tmp = tmp_path_factory.mktemp('clients-' + mode)
    config_file = tmp / 'cyborg.conf'
    config = '[DEFAULT]\nhost = %s\n' % NODE
    keystone = None
    if mode == 'keystone':
        keystone = request.getfixturevalue('real_keystone')
        config += keystone.cyborg_config()
    config_file.write_text(config)
    aio = harness_aio.Aio(tmp, state_dir=tmp / 'state',
                          config_file=config_file,
                          extra_args=['--auth-strategy', mode])
    compute = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _FakeCompute)
    threading.Thread(target=compute.serve_forever, daemon=True).start()
    aio.compute = 'http://127.0.0.1:%d/v2.1' % compute.server_port
    aio.http = requests.Session()
    aio.env = {}
    if keystone is None:
        aio.osc_auth = ['--os-auth-type', 'none', '--os-endpoint', aio.api]
        aio.placement_auth = ['--os-auth-type', 'admin_token', '--os-token',
                              'admin', '--os-endpoint', aio.placement]
    else:
        # Only the catalog says where the services are.
        keystone.set_endpoint('accelerator', aio.api)
        keystone.set_endpoint('placement', aio.placement)
        # `arq bind` looks the server up in Nova (_FakeCompute).
        keystone.set_endpoint('compute', aio.compute)
        aio.clouds_yaml = str(keystone.clouds_yaml(tmp / 'clouds.yaml'))
        aio.env = {'OS_CLIENT_CONFIG_FILE': aio.clouds_yaml}
        aio.osc_auth = aio.placement_auth = ['--os-cloud', PERSONA]
        aio.http.headers['X-Auth-Token'] = keystone.token(PERSONA)
    yield aio
    compute.shutdown()
    aio.kill()


def _run(args, env=None):
    return subprocess.run([EXE] + list(args), capture_output=True, text=True,
                          timeout=120,
                          env=dict(os.environ, OS_CLOUD='', **(env or {})))


def osc(stack, *args, fmt=True, version=None, env=None):
    """`openstack <auth> ...`: `--os-auth-type none --os-endpoint <api>`,
    or `--os-cloud operator` behind Keystone.
    """
    pre = list(stack.osc_auth)
    if version:
        pre += ['--os-accelerator-api-version', version]
    result = _run(pre + list(args) + (['-f', 'json'] if fmt else []),
                  dict(stack.env, **(env or {})))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout) if fmt else result.stdout


def placement_cli(stack, *args):
    result = _run(stack.placement_auth + list(args) + ['-f', 'json'],
                  stack.env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def _get(stack, path, **params):
    resp = stack.http.get(stack.api + path, params=params, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _gpu_deployable(stack):
    return [d for d in _get(stack, '/deployables')['deployables']
            if d['name'] == GPU_ADDR][0]


@pytest.fixture(scope='module')
def conn(stack):
    import openstack
    from openstack import config as os_config
    if not stack.env:
        return openstack.connection.Connection(
            auth_type='none', auth={'endpoint': stack.api},
            accelerator_endpoint_override=stack.api)
    region = os_config.OpenStackConfig(
        config_files=[stack.clouds_yaml]).get_one(cloud=PERSONA)
    return openstack.connection.Connection(config=region)


# -- python-openstackclient `openstack accelerator ...` ---------------------

def test_osc_device_profile_lifecycle(stack):
    created = osc(stack, 'accelerator', 'device', 'profile', 'create',
                  'osc-dp', '--group', 'resources:PGPU=1',
                  '--group', 'resources:FPGA=1,trait:CUSTOM_X=required',
                  '--description', 'two groups')
    assert created['name'] == 'osc-dp'
    assert created['groups'] == [
        {'resources:PGPU': '1'},
        {'resources:FPGA': '1', 'trait:CUSTOM_X': 'required'}]
    assert created['description'] == 'two groups'
    listed = osc(stack, 'accelerator', 'device', 'profile', 'list')
    assert created['uuid'] in {p['uuid'] for p in listed}
    shown = osc(stack, 'accelerator', 'device', 'profile', 'show',
                created['uuid'])
    assert shown['name'] == 'osc-dp'
    shown = osc(stack, 'accelerator', 'device', 'profile', 'show', 'osc-dp',
                version='2.2')
    assert shown['uuid'] == created['uuid']
    osc(stack, 'accelerator', 'device', 'profile', 'delete', created['uuid'],
        fmt=False)
    assert 'osc-dp' not in {
        p['name'] for p in _get(stack, '/device_profiles')['device_profiles']}


def test_osc_device_profile_show_by_name_default_version(stack):
    # The client sends OpenStack-API-Version accelerator 2.0 unless
    # --os-accelerator-api-version >= 2.2 is given; Cyborg answers 406 to
    # a name below 2.2, we answer at any version.
    created = osc(stack, 'accelerator', 'device', 'profile', 'create',
                  'osc-dp-name', '--group', 'resources:PGPU=1')
    try:
        shown = osc(stack, 'accelerator', 'device', 'profile', 'show',
                    'osc-dp-name')
    finally:
        stack.http.delete(stack.api + '/device_profiles/osc-dp-name',
                          timeout=10)
    assert shown['uuid'] == created['uuid']
    assert shown['name'] == 'osc-dp-name'


def test_osc_arq_lifecycle_bind_unbind(stack):
    stack.http.post(stack.api + '/device_profiles', timeout=10, json=[
        {'name': 'osc-gpu', 'groups': [{'resources:PGPU': '1'}]}]
    ).raise_for_status()
    arq = osc(stack, 'accelerator', 'arq', 'create', 'osc-gpu')
    assert arq['state'] == 'Initial'
    assert arq['device_profile_name'] == 'osc-gpu'
    assert arq['uuid'] in {
        a['uuid'] for a in osc(stack, 'accelerator', 'arq', 'list', '--long')}
    assert osc(stack, 'accelerator', 'arq', 'show',
               arq['uuid'])['uuid'] == arq['uuid']

    rp = _gpu_deployable(stack)['rp_uuid']
    bound = osc(stack, 'accelerator', 'arq', 'bind', arq['uuid'], NODE,
                INSTANCE, rp,
                env={'OS_COMPUTE_ENDPOINT_OVERRIDE': stack.compute})
    assert bound['instance_uuid'] == INSTANCE
    assert bound['hostname'] == NODE
    assert bound['state'] in ('BindStarted', 'Bound')
    unbound = osc(stack, 'accelerator', 'arq', 'unbind', arq['uuid'])
    assert unbound['instance_uuid'] is None
    osc(stack, 'accelerator', 'arq', 'delete', arq['uuid'], fmt=False)
    assert arq['uuid'] not in {
        a['uuid'] for a in _get(stack, '/accelerator_requests')['arqs']}
    stack.http.delete(stack.api + '/device_profiles/osc-gpu', timeout=10)


def test_osc_devices_and_deployables(stack):
    devices = osc(stack, 'accelerator', 'device', 'list')
    assert sorted(d['type'] for d in devices) == ['FPGA', 'GPU', 'GPU']
    shown = osc(stack, 'accelerator', 'device', 'show', devices[0]['uuid'])
    assert shown['uuid'] == devices[0]['uuid']
    deployables = osc(stack, 'accelerator', 'deployable', 'list')
    assert sorted(d['name'] for d in deployables) == sorted(
        ['0000:1b:00.0', '0000:43:00.0', '0000:0c:00.0'])
    shown = osc(stack, 'accelerator', 'deployable', 'show',
                deployables[0]['uuid'])
    assert shown['name'] == deployables[0]['name']

    # openstacksdk >= 4 has enable_device/disable_device (contract 10.17's
    # AttributeError was python-cyborgclient on an older SDK).
    gpu = [d for d in devices if d['type'] == 'GPU'][0]['uuid']
    osc(stack, 'accelerator', 'device', 'disable', gpu, fmt=False)
    osc(stack, 'accelerator', 'device', 'enable', gpu, fmt=False)


def test_osc_attributes(stack):
    # The API shows deployables by uuid; attributes carry the integer id.
    deployable_id = _get(stack, '/attributes')['attributes'][0][
        'deployable_id']
    created = osc(stack, 'accelerator', 'device', 'attribute', 'create',
                  str(deployable_id), 'osc_key', 'osc_value')
    assert created['key'] == 'osc_key' and created['value'] == 'osc_value'
    assert created['deployable_id'] == deployable_id
    assert osc(stack, 'accelerator', 'device', 'attribute', 'show',
               created['uuid'])['key'] == 'osc_key'
    listed = osc(stack, 'accelerator', 'device', 'attribute', 'list')
    assert created['uuid'] in {a['uuid'] for a in listed}
    osc(stack, 'accelerator', 'device', 'attribute', 'delete',
        created['uuid'], fmt=False)
    assert created['uuid'] not in {
        a['uuid'] for a in _get(stack, '/attributes')['attributes']}


def test_osc_attribute_create_with_a_deployable_uuid(stack):
    # `deployable list`/`show` give uuids; Cyborg refuses them here
    # (`does not match '^[0-9]+$'`), we take either.
    deployable = _gpu_deployable(stack)
    created = osc(stack, 'accelerator', 'device', 'attribute', 'create',
                  deployable['uuid'], 'osc_uuid_key', 'v')
    try:
        # Listed with the deployable's own attributes (its rc, traits),
        # all carrying its integer id.
        listed = _get(stack, '/attributes',
                      deployable_id=deployable['uuid'])['attributes']
        assert created['uuid'] in {a['uuid'] for a in listed}
        assert 'rc' in {a['key'] for a in listed}
        assert {a['deployable_id'] for a in listed} == {
            created['deployable_id']}
    finally:
        stack.http.delete(stack.api + '/attributes/' + created['uuid'],
                          timeout=10)


# -- python-cyborgclient's own OSC command classes --------------------------

def cyborgclient_cmd(conn, cls, *argv):
    """Run one python-cyborgclient command the way cliff does (parse, then
    take_action) with the SDK proxy as client_manager.accelerator.
    """
    app = types.SimpleNamespace(client_manager=types.SimpleNamespace(
        accelerator=conn.accelerator))
    cmd = cls(app, None)
    return cmd.take_action(cmd.get_parser('openstack').parse_args(argv))


def test_cyborgclient_device_profile_positional_groups(stack, conn):
    from cyborgclient.osc.v2 import device_profile as dp
    cols, data = cyborgclient_cmd(
        conn, dp.CreateDeviceProfile, 'cc-dp',
        '[{"resources:PGPU": 1, "trait:CUSTOM_GPU_NVIDIA": "required"}]',
        '--description', 'positional')
    shown = dict(zip(cols, data))
    assert shown['name'] == 'cc-dp'
    assert shown['groups'] == [{'resources:PGPU': '1',
                                'trait:CUSTOM_GPU_NVIDIA': 'required'}]
    cols, rows = cyborgclient_cmd(conn, dp.ListDeviceProfile, '--long')
    assert shown['uuid'] in {dict(zip(cols, r))['uuid'] for r in rows}
    cyborgclient_cmd(conn, dp.DeleteDeviceProfile, shown['uuid'])
    assert 'cc-dp' not in {p.name for p in conn.accelerator.device_profiles()}


def test_cyborgclient_arq_bind_unbind(stack, conn):
    from cyborgclient.osc.v2 import accelerator_request as arqs
    conn.accelerator.create_device_profile(
        name='cc-gpu', groups=[{'resources:PGPU': '1'}])
    cols, data = cyborgclient_cmd(conn, arqs.CreateAcceleratorRequest,
                                  'cc-gpu')
    arq = dict(zip(cols, data))
    rp = _gpu_deployable(stack)['rp_uuid']
    project = uuid.uuid4().hex  # parsed, never sent (contract 9.1)
    cyborgclient_cmd(conn, arqs.BindAcceleratorRequest, arq['uuid'], NODE,
                     INSTANCE, rp, project)
    got = _get(stack, '/accelerator_requests/' + arq['uuid'])
    assert (got['hostname'], got['instance_uuid'], got['device_rp_uuid']) \
        == (NODE, INSTANCE, rp)
    cyborgclient_cmd(conn, arqs.UnbindAcceleratorRequest, arq['uuid'])
    got = _get(stack, '/accelerator_requests/' + arq['uuid'])
    assert got['instance_uuid'] is None and got['state'] == 'Unbound'
    cyborgclient_cmd(conn, arqs.DeleteAcceleratorRequest, arq['uuid'])
    conn.accelerator.delete_device_profile('cc-gpu', False)


# -- openstacksdk conn.accelerator ------------------------------------------

def test_sdk_device_profiles_and_arqs(stack, conn):
    acc = conn.accelerator
    dp = acc.create_device_profile(name='sdk-gpu',
                                   groups=[{'resources:PGPU': '1'}],
                                   description='sdk')
    assert dp.name == 'sdk-gpu' and dp.id
    assert dp.id in {p.id for p in acc.device_profiles()}
    assert acc.get_device_profile(dp.id).groups == [{'resources:PGPU': '1'}]

    arq = acc.create_accelerator_request(device_profile_name='sdk-gpu')
    assert arq.state == 'Initial' and arq.id
    assert arq.id in {a.id for a in acc.accelerator_requests()}
    assert acc.get_accelerator_request(arq.id).device_profile_name == \
        'sdk-gpu'
    rp = _gpu_deployable(stack)['rp_uuid']
    acc.update_accelerator_request(arq.id, [
        {'op': 'add', 'path': '/hostname', 'value': NODE},
        {'op': 'add', 'path': '/instance_uuid', 'value': INSTANCE},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp}])
    got = acc.get_accelerator_request(arq.id)
    assert got.instance_uuid == INSTANCE and got.device_rp_uuid == rp
    acc.update_accelerator_request(arq.id, [
        {'op': 'remove', 'path': '/hostname'},
        {'op': 'remove', 'path': '/instance_uuid'},
        {'op': 'remove', 'path': '/device_rp_uuid'}])
    assert acc.get_accelerator_request(arq.id).instance_uuid is None
    acc.delete_accelerator_request(arq.id, ignore_missing=False)
    assert arq.id not in {a.id for a in acc.accelerator_requests()}
    acc.delete_device_profile(dp.id, ignore_missing=False)
    assert dp.id not in {p.id for p in acc.device_profiles()}


def test_sdk_inventory_and_attributes(stack, conn):
    acc = conn.accelerator
    devices = list(acc.devices())
    assert sorted(d.type for d in devices) == ['FPGA', 'GPU', 'GPU']
    assert acc.get_device(devices[0].uuid).vendor == devices[0].vendor
    deployables = list(acc.deployables())
    assert len(deployables) == 3
    assert acc.get_deployable(deployables[0].id).name == deployables[0].name
    deployable_id = next(iter(acc.attributes())).deployable_id
    attr = acc.create_attribute(deployable_id=deployable_id, key='sdk_key',
                                value='sdk_value')  # body wrapped
    assert attr.key == 'sdk_key' and attr.uuid
    assert acc.get_attribute(attr.uuid).value == 'sdk_value'
    acc.delete_attribute(attr.uuid, ignore_missing=False)
    assert attr.uuid not in {a.uuid for a in acc.attributes()}


# -- osc-placement ----------------------------------------------------------

def test_osc_placement_sees_device_providers(stack):
    providers = placement_cli(stack, 'resource', 'provider', 'list')
    names = {p['name']: p['uuid'] for p in providers}
    gpu = _gpu_deployable(stack)['rp_uuid']
    assert names['%s_%s' % (NODE, GPU_ADDR)] == gpu
    shown = placement_cli(stack, 'resource', 'provider', 'show', gpu)
    assert shown['name'] == '%s_%s' % (NODE, GPU_ADDR)
    traits = {t['name'] for t in placement_cli(
        stack, '--os-placement-api-version', '1.6',
        'resource', 'provider', 'trait', 'list', gpu)}
    assert 'OWNER_CYBORG' in traits
    inventory = {i['resource_class']: i for i in placement_cli(
        stack, 'resource', 'provider', 'inventory', 'list', gpu)}
    assert inventory['PGPU']['total'] == 1
