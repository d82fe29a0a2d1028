"""Throw-away test databases on SQLite, MariaDB and PostgreSQL.

MariaDB (root, no password) and PostgreSQL (trust auth) are expected on
127.0.0.1 as on the dev/CI machine; URLs can be overridden with
CYBORG_TEST_MYSQL_URL / CYBORG_TEST_POSTGRESQL_URL (server URLs without a
database name). A backend that cannot be reached is skipped, unless
CYBORG_TEST_REQUIRE_DBS=1 (set by .ci/run), where it fails the run.
"""

import os
import tempfile
import uuid

import sqlalchemy as sa

from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db import models

BACKENDS = ('sqlite', 'mysql', 'postgresql')

_SERVER_URLS = {
    'mysql': os.environ.get('CYBORG_TEST_MYSQL_URL',
                            'mysql+pymysql://root@127.0.0.1:3306'),
    'postgresql': os.environ.get('CYBORG_TEST_POSTGRESQL_URL',
                                 'postgresql+psycopg2://postgres@'
                                 '127.0.0.1:5432'),
}


class Unavailable(Exception):
    pass


def required():
    return os.environ.get('CYBORG_TEST_REQUIRE_DBS') == '1'


class TestDatabase:
    """One database created for a test run and dropped at its end."""

    def __init__(self, backend):
        self.backend = backend
        self.name = 'cyborg_test_%s' % uuid.uuid4().hex[:12]
        self._tmpdir = None
        if backend == 'sqlite':
            self._tmpdir = tempfile.TemporaryDirectory(prefix='cyborg-test-')
            self.url = 'sqlite:///%s/%s.sqlite' % (self._tmpdir.name,
                                                   self.name)
            return
        server = _SERVER_URLS[backend]
        admin_db = 'postgres' if backend == 'postgresql' else ''
        self._admin = sa.create_engine('%s/%s' % (server, admin_db),
                                       isolation_level='AUTOCOMMIT',
                                       pool_pre_ping=True)
        try:
            with self._admin.connect() as conn:
                conn.execute(sa.text('CREATE DATABASE %s' % self.name))
        except Exception as e:
            self._admin.dispose()
            raise Unavailable('%s not reachable at %s: %s'
                              % (backend, server, e))
        suffix = '?charset=utf8mb4' if backend == 'mysql' else ''
        self.url = '%s/%s%s' % (server, self.name, suffix)

    def migrate(self):
        engine = sa.create_engine(self.url)
        try:
            migration.upgrade(engine=engine)
        finally:
            engine.dispose()

    def activate(self):
        """Point cyborg.db at this database."""
        db_api.configure(self.url)

    def truncate(self):
        engine = db_api.get_engine()
        with engine.begin() as conn:
            for table in reversed(models.Base.metadata.sorted_tables):
                conn.execute(table.delete())

    def drop(self):
        db_api.dispose()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            return
        with self._admin.connect() as conn:
            if self.backend == 'postgresql':
                conn.execute(sa.text(
                    'SELECT pg_terminate_backend(pid) FROM pg_stat_activity '
                    'WHERE datname = :n AND pid <> pg_backend_pid()'),
                    {'n': self.name})
            conn.execute(sa.text('DROP DATABASE IF EXISTS %s' % self.name))
        self._admin.dispose()


_SHARED = {}


def shared(backend):
    """The migrated database of `backend` for this test run, created on
    first use; raises Unavailable (every time) if the backend is down."""
    if backend not in _SHARED:
        try:
            db = TestDatabase(backend)
            db.migrate()
        except Unavailable as e:
            _SHARED[backend] = e
        else:
            _SHARED[backend] = db
    found = _SHARED[backend]
    if isinstance(found, Exception):
        raise found
    return found


def drop_shared():
    while _SHARED:
        _, db = _SHARED.popitem()
        if isinstance(db, TestDatabase):
            db.drop()
