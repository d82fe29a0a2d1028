# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the DB layer's tests on one server backend."""

import pymysql.connections
import pytest


@pytest.fixture
def mariadb(database):
    if database.backend != 'mysql':
        pytest.skip('MariaDB only')
    return database


@pytest.fixture
def postgresql(database):
    if database.backend != 'postgresql':
        pytest.skip('PostgreSQL only')
    return database


@pytest.fixture
def sent(monkeypatch):
    """The commands PyMySQL sends from now on: (command, SQL) each, as
    they pass its one door for commands, Connection._execute_command (a
    query, a COMMIT, a ROLLBACK, a ping and a SET AUTOCOMMIT all do).
    """
    commands = []
    real = pymysql.connections.Connection._execute_command

    def counted(self, command, sql):
        if isinstance(sql, bytes):
            sql = sql.decode()
        commands.append((command, sql))
        return real(self, command, sql)
    monkeypatch.setattr(pymysql.connections.Connection, '_execute_command',
                        counted)
    return commands
