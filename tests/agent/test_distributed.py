# SPDX-License-Identifier: Apache-2.0
"""Distributed mode: cyborg-api (gunicorn), cyborg-conductor and
cyborg-agent as separate processes over RabbitMQ and MariaDB, with
Placement as its own process. The agent's report lands in the DB (seen
through the API) and in Placement, and a device disabled through the API
is fenced by its agent."""

import pytest
import requests

from cyborg_harness import distributed
from cyborg_harness import placement
from cyborg_harness import rabbit
from cyborg_harness import waiting
from tests import dbs


@pytest.fixture
def deployment(tmp_path):
    """The harness's distributed deployment on a throw-away MariaDB
    database and a RabbitMQ virtual host of its own.
    """
    broker = rabbit.Broker()
    if not broker.reachable():
        dbs.unavailable('RabbitMQ is not reachable at %s:%d'
                        % (broker.host, broker.port))
    database = dbs.new('mysql').migrate()
    try:
        d = distributed.Distributed(
            tmp_path, database=database, broker=broker,
            options={'agent': {'report_interval': 2}})
    except BaseException:
        database.drop()
        raise
    try:
        yield d
    finally:
        d.close()
        database.drop()


def test_report_lands_in_db_and_placement(deployment):
    api, headers = deployment.api_url, placement.HEADERS
    version = {'OpenStack-API-Version': 'accelerator 2.3'}
    devices = waiting.eventually(lambda: requests.get(
        api + '/devices', params={'hostname': deployment.host},
        headers=version).json()['devices'], 'devices in the API')
    assert sorted(d['type'] for d in devices) == ['FPGA', 'GPU', 'GPU']
    root = requests.get(deployment.placement_url + '/resource_providers',
                        params={'name': deployment.host},
                        headers=headers).json()['resource_providers'][0]

    def children():
        rps = requests.get(deployment.placement_url + '/resource_providers',
                           params={'in_tree': root['uuid']},
                           headers=headers).json()['resource_providers']
        return [rp for rp in rps if rp['uuid'] != root['uuid']]

    rps = waiting.eventually(lambda: len(children()) == 3 and children(),
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
                deployment.placement_url, fpga_rp['uuid']),
            headers=headers).json()['inventories']
        return inventories.get('FPGA', {}).get('reserved')

    r = requests.post('%s/devices/%s/disable' % (api, fpga['uuid']))
    assert r.status_code == 200
    waiting.eventually(lambda: reserved() == 4, 'fenced FPGA provider')
    r = requests.get('%s/devices/%s' % (api, fpga['uuid']), headers=version)
    assert r.json()['status'] == 'maintaining'
    r = requests.post('%s/devices/%s/enable' % (api, fpga['uuid']))
    assert r.status_code == 200
    waiting.eventually(lambda: reserved() == 0, 'unfenced FPGA provider')
    for proc in deployment.procs.values():
        assert proc.alive(), proc.log_tail()
