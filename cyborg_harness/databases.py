# SPDX-License-Identifier: Apache-2.0
"""Throw-away databases on SQLite, MariaDB and PostgreSQL: created,
migrated to our schema, dropped.

MariaDB (root, no password) and PostgreSQL (trust auth) are expected on
127.0.0.1; CYBORG_TEST_MYSQL_URL / CYBORG_TEST_POSTGRESQL_URL override
their server URLs (without a database name), and so does `server_url`.
"""

import os
import shutil
import tempfile
import uuid

import sqlalchemy as sa

BACKENDS = ('sqlite', 'mysql', 'postgresql')

SERVER_URLS = {
    'mysql': os.environ.get('CYBORG_TEST_MYSQL_URL',
                            'mysql+pymysql://root@127.0.0.1:3306'),
    'postgresql': os.environ.get('CYBORG_TEST_POSTGRESQL_URL',
                                 'postgresql+psycopg2://postgres@'
                                 '127.0.0.1:5432'),
}


class Unavailable(Exception):
    """The database server cannot be reached."""


class Database:
    """One database, created here and dropped by drop(). SQLite: a file
    in `workdir` (a temporary directory of its own by default).
    """

    def __init__(self, backend, workdir=None, server_url=None,
                 prefix='cyborg_test'):
        if backend not in BACKENDS:
            raise ValueError('unknown database backend %r (one of %s)'
                             % (backend, ', '.join(BACKENDS)))
        self.backend = backend
        self.name = '%s_%s' % (prefix, uuid.uuid4().hex[:12])
        self._tmpdir = None
        self._admin = None
        self._active = False
        if backend == 'sqlite':
            if workdir is None:
                workdir = self._tmpdir = tempfile.mkdtemp(
                    prefix='cyborg-db-')
            self.url = 'sqlite:///%s' % os.path.join(workdir,
                                                     self.name + '.sqlite')
            return
        server = (server_url or SERVER_URLS[backend]).rstrip('/')
        admin_db = 'postgres' if backend == 'postgresql' else ''
        self._admin = sa.create_engine('%s/%s' % (server, admin_db),
                                       isolation_level='AUTOCOMMIT',
                                       pool_pre_ping=True)
        charset = ' CHARACTER SET utf8mb4' if backend == 'mysql' else ''
        try:
            with self._admin.connect() as conn:
                conn.execute(sa.text('CREATE DATABASE %s%s'
                                     % (self.name, charset)))
        except sa.exc.DBAPIError as e:
            self._admin.dispose()
            raise Unavailable('%s not reachable at %s: %s'
                              % (backend, server, e))
        suffix = '?charset=utf8mb4' if backend == 'mysql' else ''
        self.url = '%s/%s%s' % (server, self.name, suffix)

    def engine(self, **kwargs):
        return sa.create_engine(self.url, **kwargs)

    def migrate(self):
        """Our schema, at the newest revision."""
        from cyborg.db import migration

        engine = self.engine()
        try:
            migration.upgrade(engine=engine)
        finally:
            engine.dispose()
        return self

    def activate(self):
        """Point cyborg.db (this process) at this database."""
        from cyborg.db import api as db_api

        db_api.configure(self.url)
        self._active = True

    def truncate(self):
        """Empty every table of cyborg.db's current database."""
        from cyborg.db import api as db_api
        from cyborg.db import models

        with db_api.get_engine().begin() as conn:
            for table in reversed(models.Base.metadata.sorted_tables):
                conn.execute(table.delete())

    def server_version(self):
        engine = self.engine()
        try:
            with engine.connect() as conn:
                if self.backend == 'sqlite':
                    return 'SQLite ' + conn.execute(
                        sa.text('select sqlite_version()')).scalar()
                version = conn.execute(sa.text('select version()')).scalar()
                if self.backend == 'postgresql':
                    return version.split(' on ')[0]
                return 'MariaDB/MySQL ' + version
        finally:
            engine.dispose()

    def drop(self):
        """Drop it (cyborg.db's engine released first if activated)."""
        from cyborg.db import api as db_api

        if self._active:
            db_api.dispose()
            self._active = False
        if self._admin is None:
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
            return
        with self._admin.connect() as conn:
            if self.backend == 'postgresql':
                conn.execute(sa.text(
                    'SELECT pg_terminate_backend(pid) FROM pg_stat_activity '
                    'WHERE datname = :n AND pid <> pg_backend_pid()'),
                    {'n': self.name})
            conn.execute(sa.text('DROP DATABASE IF EXISTS %s' % self.name))
        self._admin.dispose()
        self._admin = None
