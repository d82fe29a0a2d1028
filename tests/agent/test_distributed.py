"""Distributed mode: cyborg-api (gunicorn), cyborg-conductor and
cyborg-agent as separate processes over RabbitMQ and MariaDB, with
Placement as its own process. The agent's report lands in the DB (seen
through the API) and in Placement, and a device disabled through the API
is fenced by its agent."""

import sys
import textwrap
import time
import uuid

import pytest
import requests

from tests import dbs
from tests import processes

RABBIT = ('127.0.0.1', 5672)


@pytest.fixture
def deployment(tmp_path):
    if not processes.reachable(*RABBIT):
        if dbs.required():
            pytest.fail('RabbitMQ is not reachable at %s:%d' % RABBIT)
        pytest.skip('RabbitMQ is not reachable')
    try:
        database = dbs.TestDatabase('mysql')
    except dbs.Unavailable as e:
        if dbs.required():
            pytest.fail(str(e))
        pytest.skip(str(e))
    database.migrate()
    started = []
    try:
        yield _start(tmp_path, database, started)
    finally:
        processes.stop_all(started)
        database.drop()


def _start(tmp_path, database, started):

    placement_port = processes.free_port()
    placement = processes.Process(
        'placement', [sys.executable, '-m', 'tests.placement_process',
                      '--state-dir', str(tmp_path), '--port',
                      str(placement_port)], str(tmp_path))
    started.append(placement)
    placement_url = 'http://127.0.0.1:%d' % placement_port
    placement.wait_for(lambda: 'placement ready' in placement.logs(),
                       'ready line')
    host = 'dist-%s' % uuid.uuid4().hex[:8]
    headers = {'X-Auth-Token': 'admin',
               'OpenStack-API-Version': 'placement 1.26'}
    # What nova-compute does on its host: register the compute node.
    r = requests.post(placement_url + '/resource_providers',
                      json={'name': host}, headers=headers)
    assert r.status_code == 200, r.text
    api_port = processes.free_port()
    conf = tmp_path / 'cyborg.conf'
    conf.write_text(textwrap.dedent('''\
        [DEFAULT]
        host = %(host)s
        transport_url = rabbit://guest:guest@127.0.0.1:5672/
        control_exchange = cyborg-test-%(tag)s
        [database]
        connection = %(db)s
        [api]
        auth_strategy = noauth
        host_ip = 127.0.0.1
        port = %(api_port)d
        api_workers = 2
        [agent]
        enabled_drivers = fake
        report_interval = 2
        [placement]
        auth_type = none
        endpoint_override = %(placement)s
        ''') % {'host': host, 'tag': uuid.uuid4().hex[:8],
                'db': database.url, 'api_port': api_port,
                'placement': placement_url})
    args = ['--config-file', str(conf)]
    for name in ('cyborg-conductor', 'cyborg-agent', 'cyborg-api'):
        proc = processes.Process(name, [processes.script(name)] + args,
                                 str(tmp_path))
        started.append(proc)
        if name == 'cyborg-conductor':
            # Its queue must exist before the agent's first report: a
            # message sent to a topic nobody consumes yet is dropped, and
            # the agent would only retry after the RPC timeout.
            proc.wait_for(lambda: 'cyborg-conductor started' in proc.logs(),
                          'conductor start')
    api_url = 'http://127.0.0.1:%d/v2' % api_port
    started[-1].wait_for(lambda: _answers(api_url), 'API answer')
    return {'api': api_url, 'placement': placement_url, 'host': host,
            'headers': headers, 'procs': started}


def _answers(url):
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


def _eventually(fn, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError('timed out waiting for %s' % what)


def test_report_lands_in_db_and_placement(deployment):
    api, headers = deployment['api'], deployment['headers']
    version = {'OpenStack-API-Version': 'accelerator 2.3'}
    devices = _eventually(lambda: requests.get(
        api + '/devices', params={'hostname': deployment['host']},
        headers=version).json()['devices'], 'devices in the API')
    assert sorted(d['type'] for d in devices) == ['FPGA', 'GPU', 'GPU']
    root = requests.get(deployment['placement'] + '/resource_providers',
                        params={'name': deployment['host']},
                        headers=headers).json()['resource_providers'][0]

    def children():
        rps = requests.get(deployment['placement'] + '/resource_providers',
                           params={'in_tree': root['uuid']},
                           headers=headers).json()['resource_providers']
        return [rp for rp in rps if rp['uuid'] != root['uuid']]

    rps = _eventually(lambda: len(children()) == 3 and children(),
                      'providers in Placement')
    deployables = requests.get(api + '/deployables').json()['deployables']
    assert {d['rp_uuid'] for d in deployables} == {rp['uuid'] for rp in rps}

    fpga = next(d for d in devices if d['type'] == 'FPGA')
    fpga_rp = next(rp for rp in rps if rp['name'].endswith('0000:0c:00.0'))

    def reserved():
        # The agent creates a provider, then sets its inventory: a look
        # in between finds none yet.
        inventories = requests.get(
            '%s/resource_providers/%s/inventories' % (
                deployment['placement'], fpga_rp['uuid']),
            headers=headers).json()['inventories']
        return inventories.get('FPGA', {}).get('reserved')

    r = requests.post('%s/devices/%s/disable' % (api, fpga['uuid']))
    assert r.status_code == 200
    _eventually(lambda: reserved() == 4, 'fenced FPGA provider')
    r = requests.get('%s/devices/%s' % (api, fpga['uuid']), headers=version)
    assert r.json()['status'] == 'maintaining'
    r = requests.post('%s/devices/%s/enable' % (api, fpga['uuid']))
    assert r.status_code == 200
    _eventually(lambda: reserved() == 0, 'unfenced FPGA provider')
    for proc in deployment['procs']:
        assert proc.proc.poll() is None, proc.logs()[-3000:]
