# SPDX-License-Identifier: Apache-2.0
"""cyborg-manage db sync / db version, on every backend."""

import os
import subprocess
import sys

import pytest

from cyborg.cmd import manage
from cyborg.conf import CONF
from cyborg.db import api as db_api
from tests import dbs


@pytest.fixture(params=dbs.BACKENDS)
def empty_database(request):
    """A brand-new, never-migrated database; [database] points at it."""
    db = dbs.new(request.param)
    CONF.set_override('connection', db.url, group='database')
    db_api.configure()
    try:
        yield db
    finally:
        db.drop()


def test_sync_then_version(empty_database):
    assert manage.db_version() is None
    head = manage.db_sync()
    assert head is not None
    assert manage.db_version() == head
    # A second sync at head is a no-op.
    assert manage.db_sync() == head


def test_global_options_may_follow_the_sub_command():
    assert manage._globals_first(
        ['db', 'sync', '--config-file', 'a.conf', '--config-dir=d']) == [
        '--config-file', 'a.conf', '--config-dir=d', 'db', 'sync']
    assert manage._globals_first(['--config-file', 'a', 'db', 'version']) \
        == ['--config-file', 'a', 'db', 'version']


def _manage(*args):
    return subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.manage'] + list(args),
        capture_output=True, text=True, timeout=120)


def test_command_line(tmp_path):
    conf = tmp_path / 'cyborg.conf'
    conf.write_text('[database]\nconnection = sqlite:///%s\n'
                    % os.path.join(tmp_path, 'c.sqlite'))
    # An empty file is an empty SQLite database (a missing one is refused,
    # see test_only_db_sync_creates_a_sqlite_file).
    (tmp_path / 'c.sqlite').touch()
    result = _manage('--config-file', str(conf), 'db', 'version')
    assert result.returncode == 0, result.stderr
    assert result.stdout == 'None\n'  # logs go to stderr

    result = _manage('db', 'sync', '--config-file', str(conf))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('Database at revision ')
    head = result.stdout.split()[-1]

    result = _manage('--config-file', str(conf), 'db', 'version')
    assert result.returncode == 0, result.stderr
    assert result.stdout == head + '\n'


def test_arq_list_stuck(sqlite_database):
    """Only ARQs in BindStarted for longer than asked are listed."""
    import datetime

    from cyborg.db import models
    from tests.db import seed
    arqs = models.ExtendedAcceleratorRequest.__table__
    old = datetime.datetime.now() - datetime.timedelta(hours=1)
    stuck, fresh, bound = seed.arq_requests(3)
    for arq, state, instance in ((stuck, 'BindStarted', 'i-1'),
                                 (fresh, 'BindStarted', 'i-2'),
                                 (bound, 'Bound', 'i-3')):
        with db_api.writer() as session:
            session.execute(arqs.update().where(
                arqs.c.uuid == arq['uuid']).values(
                state=state, instance_uuid=instance))
    with db_api.writer() as session:
        session.execute(arqs.update().where(
            arqs.c.uuid.in_([stuck['uuid'], bound['uuid']])).values(
            updated_at=old))
    assert manage.stuck_arqs(older_than=600) == {'i-1': [stuck['uuid']]}
    assert manage.stuck_arqs(older_than=0) == {'i-1': [stuck['uuid']],
                                               'i-2': [fresh['uuid']]}
    # By default, at the age the conductors' sweep re-drives a bind.
    from cyborg.conf import CONF
    CONF.set_override('bind_stale_after', 600, group='conductor')
    try:
        assert manage.stuck_arqs() == {'i-1': [stuck['uuid']]}
    finally:
        CONF.clear_override('bind_stale_after', group='conductor')
    assert manage.stuck_arqs() == {'i-1': [stuck['uuid']]}


def _manage_in(cwd, *args):
    return subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.manage'] + list(args), cwd=cwd,
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, HOME=str(cwd)))


@pytest.mark.skipif(
    any(os.path.exists(p) for p in ('/etc/cyborg/cyborg.conf',
                                    '/etc/cyborg.conf')),
    reason='this machine has a cyborg.conf where oslo.config looks')
@pytest.mark.parametrize('command', [['db', 'sync'], ['db', 'version'],
                                     ['arq', 'list-stuck']])
def test_without_a_config_it_says_what_is_missing(tmp_path, command):
    result = _manage_in(tmp_path, *command)
    assert result.returncode == 1
    assert result.stdout == ''
    assert result.stderr == (
        'cyborg-manage: [database] connection is not set: no configuration '
        'file was read (pass --config-file /etc/cyborg/cyborg.conf)\n')
    assert list(tmp_path.iterdir()) == []


def test_only_db_sync_creates_a_sqlite_file(tmp_path):
    conf = tmp_path / 'cyborg.conf'
    conf.write_text('[database]\nconnection = sqlite:///new.sqlite\n')
    result = _manage_in(tmp_path, '--config-file', str(conf), 'db',
                        'version')
    assert result.returncode == 1
    assert result.stderr == (
        'cyborg-manage: [database] connection names the SQLite file %s, '
        'which does not exist (create it with "cyborg-manage db sync")\n'
        % (tmp_path / 'new.sqlite'))
    assert list(tmp_path.iterdir()) == [conf]
    result = _manage_in(tmp_path, '--config-file', str(conf), 'db', 'sync')
    assert result.returncode == 0, result.stderr
    assert (tmp_path / 'new.sqlite').exists()
