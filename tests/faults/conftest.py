# SPDX-License-Identifier: Apache-2.0
"""The fault suite: collected when named on the command line (`python -m
pytest tests/faults`, `tox -e faults`) or with CYBORG_TEST_FAULTS=1, not
by a plain `python -m pytest tests`: it restarts servers and takes minutes.

Session fixtures start the private MariaDB and RabbitMQ once
(cyborg_harness.servers); each check gets its own database, virtual host,
Placement and cyborg processes.
"""

import os
import pathlib

import pytest

from cyborg_harness import servers
from tests import dbs
from tests.faults import deployment as fault_deployment

HERE = pathlib.Path(__file__).resolve().parent


def _requested(config):
    if os.environ.get('CYBORG_TEST_FAULTS') == '1':
        return True
    for arg in config.args:
        path = pathlib.Path(str(arg).split('::')[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    if HERE in pathlib.Path(collection_path).resolve().parents and \
            not _requested(config):
        return True
    return None


@pytest.fixture(scope='session')
def mariadb(tmp_path_factory):
    if not servers.MariaDB.installed():
        dbs.unavailable('mariadbd / mariadb-install-db not installed')
    server = servers.MariaDB(str(tmp_path_factory.mktemp('infra')))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope='session')
def rabbitmq(tmp_path_factory):
    if not servers.RabbitMQ.installed():
        dbs.unavailable('rabbitmq-server not installed')
    server = servers.RabbitMQ(str(tmp_path_factory.mktemp('infra')))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def deployment(tmp_path, mariadb, rabbitmq):
    d = fault_deployment.Deployment(tmp_path, mariadb, rabbitmq)
    try:
        d.start()
        yield d
    finally:
        d.close()
        # A check that failed half-way may leave a server down.
        if not mariadb.answers():
            mariadb.stop()
            mariadb.start()
        if not rabbitmq.reachable():
            rabbitmq.start()
