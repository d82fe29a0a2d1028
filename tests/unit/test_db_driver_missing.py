# SPDX-License-Identifier: Apache-2.0
"""A [database] connection whose Python driver is not installed is one
line on stderr and a non-zero exit, not a traceback, for every command
that opens the database.

The missing driver is simulated: the child process puts None in
sys.modules for the driver's module, which makes importing it fail as if
the package were not installed.
"""

import os
import subprocess
import sys

import pytest

from cyborg.db import api as db_api

# (command module, arguments after --config-file, exit status)
COMMANDS = [
    ('api', [], 1),
    ('conductor', [], 1),
    ('manage', ['db', 'version'], 1),
    ('manage', ['db', 'sync'], 1),
    ('status', ['upgrade', 'check'], 2),
]

CHILD = '''
import sys
sys.modules[%(module)r] = None
from cyborg.cmd import %(command)s as command
sys.exit(command.main(sys.argv[1:]))
'''


def _run(command, module, connection, args, tmp_path):
    conf = tmp_path / 'cyborg.conf'
    conf.write_text('[database]\nconnection = %s\n' % connection)
    return subprocess.run(
        [sys.executable, '-c', CHILD % {'module': module,
                                        'command': command},
         '--config-file', str(conf)] + args,
        capture_output=True, text=True, timeout=120, cwd=tmp_path)


def _error_lines(stderr):
    # Python's own deprecation warnings from imported libraries aside.
    return [line for line in stderr.splitlines()
            if line.startswith('cyborg-')]


@pytest.mark.parametrize('command,args,status', COMMANDS)
def test_missing_pymysql(command, args, status, tmp_path):
    result = _run(command, 'pymysql',
                  'mysql+pymysql://cyborg:s3cret@127.0.0.1/cyborg', args,
                  tmp_path)
    assert result.returncode == status, result.stderr
    assert 'Traceback' not in result.stderr
    [line] = _error_lines(result.stderr)
    assert line.startswith('cyborg-%s: [database] connection uses '
                           'mysql+pymysql' % command)
    assert 'module pymysql' in line
    assert 'pip install "cyborg-gpu[mysql]"' in line
    assert 's3cret' not in result.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / 'cyborg.conf']


WSGI_CHILD = '''
import sys
sys.modules[%(module)r] = None
import cyborg.wsgi.api
'''


def test_wsgi_application_missing_pymysql(tmp_path):
    """cyborg.wsgi.api:application as uWSGI or gunicorn loads it."""
    conf = tmp_path / 'cyborg.conf'
    conf.write_text('[database]\nconnection = '
                    'mysql+pymysql://cyborg:s3cret@127.0.0.1/cyborg\n')
    result = subprocess.run(
        [sys.executable, '-c', WSGI_CHILD % {'module': 'pymysql'}],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env=dict(os.environ, CYBORG_CONFIG_FILE=str(conf)))
    assert result.returncode == 1, result.stderr
    assert 'Traceback' not in result.stderr
    [line] = [line for line in result.stderr.splitlines()
              if line.startswith('cyborg.wsgi.api: ')]
    assert 'pip install "cyborg-gpu[mysql]"' in line
    assert 's3cret' not in result.stderr
    assert list(tmp_path.iterdir()) == [conf]


def test_missing_psycopg2(tmp_path):
    result = _run('manage', 'psycopg2',
                  'postgresql+psycopg2://cyborg@127.0.0.1/cyborg',
                  ['db', 'version'], tmp_path)
    assert result.returncode == 1, result.stderr
    assert 'Traceback' not in result.stderr
    [line] = _error_lines(result.stderr)
    assert 'pip install "cyborg-gpu[postgresql]"' in line


def test_driver_check_messages(monkeypatch):
    monkeypatch.setitem(sys.modules, 'pymysql', None)
    with pytest.raises(db_api.MissingDriver) as e:
        db_api.check_driver('mysql+pymysql://u:secret@h/c')
    assert 'secret' not in str(e.value)
    # Plain mysql:// means MySQLdb, which we do not ship: say which URL
    # the extra serves.
    with pytest.raises(db_api.MissingDriver) as e:
        db_api.check_driver('mysql://u@h/c')
    assert 'use mysql+pymysql://' in str(e.value)
    with pytest.raises(db_api.MissingDriver):
        db_api.configure('mysql+pymysql://u@h/c')
    with pytest.raises(db_api.NotConfigured, match='not a database URL'):
        db_api.check_driver('not a url')
    with pytest.raises(db_api.NotConfigured, match='does not know'):
        db_api.check_driver('nosuchdb://h/c')
    # An installed driver passes.
    db_api.check_driver('sqlite:///x.sqlite')
