# SPDX-License-Identifier: Apache-2.0
"""cyborg.data: shipped host specs and profiles by name or path, and
`python -m cyborg.data`.
"""

import json
import os

import pytest

from cyborg import data
from cyborg.data import __main__ as cli


def test_names_and_paths():
    hosts = data.names(data.FAKE_HOSTS)
    assert 'gpu-host' in hosts
    assert 'h200-whole' in data.names(data.DEVICE_PROFILES)
    path = data.fake_host('gpu-host')
    assert os.path.isfile(path) and path.endswith('gpu-host.yaml')
    assert data.fake_host('gpu-host.yaml') == path
    assert data.fake_host(path) == path     # a path is taken as is
    [profile] = data.profile('h200-whole')
    assert profile['name'] == 'h200-whole' and profile['groups']


def test_unknown_name_lists_the_shipped_ones(tmp_path):
    with pytest.raises(data.NotFound) as e:
        data.fake_host('nope')
    assert str(e.value) == 'nope is not a shipped fake host (shipped: %s) ' \
        'nor a file' % ', '.join(data.names(data.FAKE_HOSTS))
    with pytest.raises(data.NotFound, match='no such file'):
        data.fake_host(str(tmp_path / 'missing.yaml'))


def test_module_lists_and_prints(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert 'fake-hosts: ' in out and 'device-profiles: ' in out
    assert cli.main(['device-profiles']) == 0
    assert 'h200-whole' in capsys.readouterr().out.split()
    assert cli.main(['device-profiles', 'h200-whole']) == 0
    assert json.loads(capsys.readouterr().out) == data.profile('h200-whole')
    assert cli.main(['--path', 'fake-hosts', 'gpu-host']) == 0
    assert capsys.readouterr().out.strip() == data.fake_host('gpu-host')
    assert cli.main(['fake-hosts', 'nope']) == 1
    assert 'not a shipped fake host' in capsys.readouterr().err
