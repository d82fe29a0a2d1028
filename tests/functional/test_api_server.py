# SPDX-License-Identifier: Apache-2.0
"""cyborg-api as operators run it: gunicorn, [api] api_workers workers on
[api] host_ip:port, a database synced by cyborg-manage."""

import os
import re
import signal
import subprocess
import sys

import pytest
import requests

from cyborg_harness import net
from cyborg_harness import processes

START_TIMEOUT = 120


def _answers(url):
    try:
        requests.get(url + '/', timeout=5)
        return True
    except requests.ConnectionError:
        return False


@pytest.fixture
def api_server(tmp_path):
    port = net.free_port()
    conf = tmp_path / 'cyborg.conf'
    conf.write_text(
        '[api]\nhost_ip = 127.0.0.1\nport = %d\napi_workers = 2\n'
        'auth_strategy = noauth\n'
        '[database]\nconnection = sqlite:///%s\n'
        % (port, os.path.join(tmp_path, 'cyborg.sqlite')))
    sync = subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.manage', '--config-file',
         str(conf), 'db', 'sync'],
        capture_output=True, text=True, timeout=120)
    assert sync.returncode == 0, sync.stderr

    proc = processes.Process('api', [sys.executable, '-m', 'cyborg.cmd.api',
                                     '--config-file', str(conf)],
                             str(tmp_path))
    url = net.url(port)
    try:
        proc.wait_for(lambda: _answers(url), 'an answer', START_TIMEOUT)
        yield url, proc
    finally:
        proc.kill()


def test_api_server_round_trip(api_server):
    url, proc = api_server
    resp = requests.get(url + '/', timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.json()['default_version']['id'] == 'v2'

    resp = requests.post(url + '/v2/device_profiles', timeout=10, json=[
        {'name': 'server-gpu', 'groups': [{'resources:PGPU': '1'}]}])
    assert resp.status_code == 201, resp.text
    profile = resp.json()
    # Several requests, so both workers serve some against the one DB.
    for _ in range(6):
        resp = requests.get(url + '/v2/device_profiles', timeout=10)
        assert resp.status_code == 200, resp.text
        assert [p['uuid'] for p in resp.json()['device_profiles']] == [
            profile['uuid']]
    workers = set(re.findall(r'Booting worker with pid: (\d+)',
                             proc.logs()))
    assert len(workers) == 2, proc.log_tail()

    proc.signal(signal.SIGTERM)
    assert proc.proc.wait(30) == 0, proc.log_tail()
