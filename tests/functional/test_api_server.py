"""cyborg-api as operators run it: gunicorn, [api] api_workers workers on
[api] host_ip:port, a database synced by cyborg-manage."""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import requests

START_TIMEOUT = 120


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _logs(path):
    with open(path, errors='replace') as f:
        return f.read()[-4000:]


@pytest.fixture
def api_server(tmp_path):
    port = _free_port()
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

    log_path = tmp_path / 'api.log'
    with open(log_path, 'wb') as log:
        proc = subprocess.Popen(
            [sys.executable, '-m', 'cyborg.cmd.api', '--config-file',
             str(conf)], stdout=log, stderr=subprocess.STDOUT)
    url = 'http://127.0.0.1:%d' % port
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail('cyborg-api exited %s:\n%s'
                            % (proc.returncode, _logs(log_path)))
            try:
                requests.get(url + '/', timeout=5)
                break
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    pytest.fail('cyborg-api not answering:\n%s'
                                % _logs(log_path))
                time.sleep(0.2)
        yield url, proc, log_path
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_api_server_round_trip(api_server):
    url, proc, log_path = api_server
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
                             _logs(log_path)))
    assert len(workers) == 2, _logs(log_path)

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, _logs(log_path)
