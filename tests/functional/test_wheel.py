# SPDX-License-Identifier: Apache-2.0
"""The wheel a packager builds: it carries its data, and `cyborg-aio`
installed from it starts from any directory and runs its demo.

The wheel is built from this checkout and installed in a fresh virtualenv
(tests/installed.py); every command runs outside the checkout, so nothing
can be read from a source tree's etc/.
"""

import os
import subprocess
import zipfile

import requests

from cyborg import data
from cyborg_harness import aio as harness_aio


def test_wheel_carries_its_data(installed):
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
    for kind in (data.FAKE_HOSTS, data.DEVICE_PROFILES):
        suffix = '.yaml' if kind == data.FAKE_HOSTS else '.json'
        for name in data.names(kind):
            assert 'cyborg/data/%s/%s%s' % (kind, name, suffix) in names
    assert any(n.startswith('cyborg/drivers/nvidia/models/')
               and n.endswith('.json') for n in names)
    assert 'cyborg/db/migrations/versions/0001_initial.py' in names
    assert not [n for n in names if n.startswith(('tests/', 'tools/'))]


def _python(installed, code, cwd):
    return subprocess.run(
        [installed.python, '-c', code], capture_output=True, text=True,
        timeout=120, cwd=cwd, env=installed.env())


def test_installed_package_is_the_wheel(installed, tmp_path):
    """The modules, shipped data and entry points come from the
    virtualenv, not from the checkout.
    """
    result = _python(installed, (
        'import cyborg, cyborg_aio\n'
        'from cyborg import data\n'
        'print(cyborg.__file__)\n'
        'print(cyborg_aio.__file__)\n'
        'print(data.fake_host("gpu-host"))\n'
        'print(data.profile("h200-whole")[0]["name"])\n'), tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for line in lines[:3]:
        assert line.startswith(installed.site_packages + os.sep), lines
    assert lines[3] == 'h200-whole'
    # The profiles as files to POST, for shell users of the wheel.
    result = subprocess.run(
        [installed.python, '-m', 'cyborg.data', '--path', 'device-profiles',
         'h200-whole'], capture_output=True, text=True, timeout=120,
        cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(installed.site_packages + os.sep)


def test_cyborg_aio_from_the_wheel_runs_its_demo(installed, tmp_path):
    """The default host (no --host-spec) and the demo, started from a
    directory that is not the checkout.
    """
    workdir = tmp_path / 'elsewhere'
    workdir.mkdir()
    aio = harness_aio.Aio(workdir, host_spec=None, demo=True,
                          cmd=[installed.script('cyborg-aio')],
                          env={'PATH': installed.env()['PATH']})
    try:
        out = aio.read_until(r'^demo: \d+ of \d+ instance\(s\) booted')
        assert 'demo: 2 of 2 instance(s) booted' in out, out + aio.logs()
        assert aio.log_file.startswith(str(workdir))
    finally:
        assert aio.stop() == 0, aio.logs()
    assert aio.stderr_lines() == [], aio.logs()


def test_cyborg_aio_from_the_wheel_takes_shipped_host_names(installed,
                                                            tmp_path):
    """--host-spec NAME finds every shipped host in the installed package;
    an unknown name is refused with the list of names.
    """
    names = data.names(data.FAKE_HOSTS)
    nvidia = [n for n in names if n != 'gpu-host']
    assert nvidia, names
    aio = harness_aio.Aio(tmp_path, host_spec=nvidia[0],
                          cmd=[installed.script('cyborg-aio')])
    try:
        devices = requests.get(aio.api + '/devices', timeout=10).json()
        assert '10de' in {d['vendor'] for d in devices['devices']}, (
            devices, aio.logs())
    finally:
        assert aio.stop() == 0, aio.logs()
    result = subprocess.run(
        [installed.script('cyborg-aio'), '--host-spec', 'no-such-host'],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 2
    assert 'no-such-host is not a shipped fake host (shipped: %s)' % (
        ', '.join(names)) in result.stderr
