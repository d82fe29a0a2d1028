# SPDX-License-Identifier: Apache-2.0
"""cyborg-status upgrade check."""

import os
import subprocess
import sys

from oslo_upgradecheck import upgradecheck
import pytest

from cyborg.cmd import status
from cyborg.conf import CONF
from cyborg.db import api as db_api
from tests import dbs


def test_migrated_database_passes(sqlite_database):
    checks = status.Checks()
    assert checks._check_schema().code == upgradecheck.Code.SUCCESS
    assert checks._check_stuck_arqs().code == upgradecheck.Code.SUCCESS


def test_unsynced_database_fails_with_the_fix(tmp_path):
    db = dbs.new('sqlite')
    try:
        CONF.set_override('connection', db.url, group='database')
        db_api.dispose()
        result = status.Checks()._check_schema()
        stuck = status.Checks()._check_stuck_arqs()
    finally:
        db_api.dispose()
        db.drop()
    assert result.code == upgradecheck.Code.FAILURE
    assert 'cyborg-manage db sync' in result.details
    assert stuck.code == upgradecheck.Code.SUCCESS
    assert 'not synced' in stuck.details


def _status(cwd, *args):
    """`cyborg-status ... upgrade check` in `cwd`, with a home of its own
    (oslo.config looks for cyborg.conf under ~ too).
    """
    return subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.status'] + list(args)
        + ['upgrade', 'check'], cwd=cwd, capture_output=True, text=True,
        timeout=120, env=dict(os.environ, HOME=str(cwd)))


@pytest.mark.skipif(
    any(os.path.exists(p) for p in ('/etc/cyborg/cyborg.conf',
                                    '/etc/cyborg.conf')),
    reason='this machine has a cyborg.conf where oslo.config looks')
def test_without_a_config_it_says_what_is_missing(tmp_path):
    result = _status(tmp_path)
    assert result.returncode == upgradecheck.Code.FAILURE
    assert result.stdout == ''
    assert result.stderr == (
        'cyborg-status: [database] connection is not set: no configuration '
        'file was read (pass --config-file /etc/cyborg/cyborg.conf)\n')
    assert list(tmp_path.iterdir()) == []


def test_a_config_without_a_database_is_named(tmp_path):
    conf = tmp_path / 'cyborg.conf'
    conf.write_text('[DEFAULT]\nhost = h1\n')
    result = _status(tmp_path, '--config-file', str(conf))
    assert result.returncode == upgradecheck.Code.FAILURE
    assert result.stderr == (
        'cyborg-status: [database] connection is not set in %s\n' % conf)
    assert list(tmp_path.iterdir()) == [conf]


def test_a_missing_sqlite_file_is_not_created(tmp_path):
    conf = tmp_path / 'cyborg.conf'
    conf.write_text('[database]\nconnection = sqlite:///gone.sqlite\n')
    result = _status(tmp_path, '--config-file', str(conf))
    assert result.returncode == upgradecheck.Code.FAILURE
    assert result.stderr == (
        'cyborg-status: [database] connection names the SQLite file %s, '
        'which does not exist (create it with "cyborg-manage db sync")\n'
        % (tmp_path / 'gone.sqlite'))
    assert list(tmp_path.iterdir()) == [conf]


def test_no_default_database_connection():
    """What made `cyborg-status` create ./cyborg.sqlite: a default."""
    assert CONF.database.connection is None
    with pytest.raises(db_api.NotConfigured):
        db_api.configure()
