"""Helpers the benchmark scripts share (imported from the scripts'
directory, which Python puts on sys.path)."""

import http.client
import json
import math
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SERVER_URLS = {
    'mysql': 'mysql+pymysql://root@127.0.0.1:3306/',
    'postgresql': 'postgresql+psycopg2://postgres@127.0.0.1:5432/postgres',
}


def percentile(values, p):
    """Nearest-rank percentile; nan for no values."""
    if not values:
        return float('nan')
    values = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(values)))
    return values[rank - 1]


def git_revision():
    """Short HEAD, '+dirty' when cyborg/ has local changes; None outside
    a checkout."""
    try:
        rev = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                             cwd=REPO, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(['git', 'status', '--porcelain', 'cyborg'],
                               cwd=REPO, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return rev + ('+dirty' if dirty else '')
    except (OSError, subprocess.SubprocessError):
        return None


class Client:
    """One keep-alive HTTP connection to 127.0.0.1:port; a request the
    server cut (it closed the idle connection) is sent once more."""

    def __init__(self, port, timeout, prefix='', headers=None):
        self.prefix = prefix
        self.headers = headers or {}
        self.conn = http.client.HTTPConnection('127.0.0.1', port,
                                               timeout=timeout)

    def request(self, method, path, body=None, headers=None):
        """(status, body bytes); body is sent as JSON."""
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers if headers is None else headers)
        if data is not None:
            headers.setdefault('Content-Type', 'application/json')
        for attempt in (1, 2):
            try:
                self.conn.request(method, self.prefix + path, body=data,
                                  headers=headers)
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError):
                self.conn.close()
                if attempt == 2:
                    raise

    def close(self):
        self.conn.close()


def create_database(kind, name, server_url=None):
    """CREATE DATABASE `name` on the MariaDB/PostgreSQL server; returns
    (admin engine for drop_database, URL of the new database)."""
    import sqlalchemy as sa
    admin_url = sa.engine.make_url(server_url or DEFAULT_SERVER_URLS[kind])
    admin = sa.create_engine(admin_url, isolation_level='AUTOCOMMIT')
    with admin.connect() as conn:
        if kind == 'mysql':
            conn.execute(sa.text(
                'CREATE DATABASE %s CHARACTER SET utf8mb4' % name))
        else:
            conn.execute(sa.text('CREATE DATABASE %s' % name))
    url = admin_url.set(database=name)
    if kind == 'mysql':
        url = url.update_query_dict({'charset': 'utf8mb4'})
    return admin, url.render_as_string(hide_password=False)


def drop_database(admin, kind, name):
    import sqlalchemy as sa
    with admin.connect() as conn:
        if kind == 'postgresql':
            conn.execute(sa.text(
                'DROP DATABASE IF EXISTS %s WITH (FORCE)' % name))
        else:
            conn.execute(sa.text('DROP DATABASE IF EXISTS %s' % name))
    admin.dispose()
