# SPDX-License-Identifier: Apache-2.0
"""The deployments the benchmarks run against, on this machine: cyborg-aio
as a subprocess, a distributed deployment (Placement, cyborg-api with
gunicorn workers, cyborg-conductor and cyborg-agent with the fake driver
over RabbitMQ on a vhost of its own), Placement as its own process, and
throw-away databases. Aio and Distributed offer the same surface (api_url,
port, prefix, pid, cpu_seconds, log_problems, stop), so a benchmark runs
the same load against either.
"""

import collections
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

RABBIT_URL = 'rabbit://guest:guest@127.0.0.1:5672/%s'
DEFAULT_SERVER_URLS = {
    'mysql': 'mysql+pymysql://root@127.0.0.1:3306/',
    'postgresql': 'postgresql+psycopg2://postgres@127.0.0.1:5432/postgres',
}
PROBLEM_KEYS = ('Traceback', 'ERROR', 'CRITICAL', 'WARNING', 'locked')


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def listening(port):
    with socket.socket() as sock:
        return sock.connect_ex(('127.0.0.1', port)) == 0


def answers(url, timeout=1):
    """True when GET url answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


# --------------------------------------------------------------------------
# Processes


def stop_group(proc, timeout=20, on_kill=None):
    """SIGTERM a process started in its own session, and its children;
    SIGKILL them if they are still there after `timeout` seconds."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        if on_kill is not None:
            on_kill()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    except ProcessLookupError:
        pass


def _stat(pid):
    with open('/proc/%s/stat' % pid) as f:
        return f.read().rsplit(')', 1)[1].split()


def process_cpu_seconds(pid, children=False):
    """user+system CPU time of one process (with its reaped children when
    `children`); None when it cannot be read."""
    try:
        fields = _stat(pid)
    except OSError:
        return None
    ticks = sum(int(x) for x in fields[11:15 if children else 13])
    return ticks / os.sysconf('SC_CLK_TCK')


def group_cpu_seconds(pgid):
    """user+system CPU time of every live process in a process group."""
    ticks = 0
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            fields = _stat(entry)
        except OSError:
            continue
        if int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf('SC_CLK_TCK')


class Process:
    """A command in its own session, output to NAME.log in `workdir`."""

    def __init__(self, name, argv, workdir, env=None):
        self.name = name
        self.log_path = os.path.join(workdir, '%s.log' % name)
        self._log = open(self.log_path, 'wb')
        env = dict(os.environ, PYTHONUNBUFFERED='1', PYTHONWARNINGS='ignore',
                   **(env or {}))
        self.proc = subprocess.Popen(argv, cwd=workdir, env=env,
                                     stdout=self._log,
                                     stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL,
                                     start_new_session=True)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def text(self):
        if not self._log.closed:
            self._log.flush()
        with open(self.log_path, errors='replace') as f:
            return f.read()

    def log_tail(self, lines=40):
        return ''.join(self.text().splitlines(True)[-lines:])

    def problems(self, keys=PROBLEM_KEYS):
        return [line.rstrip() for line in self.text().splitlines()
                if any(k in line for k in keys)]

    def wait_for(self, predicate, what, timeout=90.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError('%s exited with %s while waiting for %s:'
                                   '\n%s' % (self.name, self.proc.returncode,
                                             what, self.log_tail(60)))
            if predicate():
                return
            time.sleep(0.2)
        raise RuntimeError('%s: no %s within %.0fs:\n%s'
                           % (self.name, what, timeout, self.log_tail(60)))

    def stop(self, on_kill=None):
        stop_group(self.proc, on_kill=on_kill)
        self._log.close()


# --------------------------------------------------------------------------
# Databases


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


class Database:
    """A throw-away database: created in __init__, dropped by drop(). A
    SQLite file lives in `workdir` and goes with it."""

    def __init__(self, kind, workdir, server_url=None, prefix='cyborg_bench'):
        self.kind = kind
        self.name = '%s_%s' % (prefix, uuid.uuid4().hex[:10])
        self._admin = None
        if kind == 'sqlite':
            self.url = 'sqlite:///%s' % os.path.join(workdir,
                                                     self.name + '.sqlite')
            return
        self._admin, self.url = create_database(kind, self.name, server_url)

    def engine(self):
        import sqlalchemy as sa
        return sa.create_engine(self.url)

    def server_version(self):
        import sqlalchemy as sa
        engine = self.engine()
        try:
            with engine.connect() as conn:
                if self.kind == 'sqlite':
                    return 'SQLite ' + conn.execute(
                        sa.text('select sqlite_version()')).scalar()
                version = conn.execute(sa.text('select version()')).scalar()
                return version.split(' on ')[0] if self.kind == 'postgresql' \
                    else 'MariaDB/MySQL ' + version
        finally:
            engine.dispose()

    def migrate(self):
        from cyborg.db import migration
        engine = self.engine()
        try:
            migration.upgrade(engine=engine)
        finally:
            engine.dispose()

    def drop(self):
        if self._admin is not None:
            drop_database(self._admin, self.kind, self.name)
            self._admin = None


# --------------------------------------------------------------------------
# RabbitMQ


class VirtualHost:
    """A RabbitMQ virtual host of our own. Queues are named by topic
    whatever the exchange, so on a shared broker another Cyborg's
    conductor (a test run, the reference service) would consume our
    messages; a vhost keeps them apart."""

    def __init__(self, name=None):
        self.name = name or 'cyborg-bench-%s' % uuid.uuid4().hex[:8]
        self._ctl('add_vhost', self.name)
        self._ctl('set_permissions', '-p', self.name, 'guest',
                  '.*', '.*', '.*')
        self.url = RABBIT_URL % self.name

    @staticmethod
    def _ctl(*args):
        subprocess.run(['rabbitmqctl', '-q'] + list(args), check=True,
                       capture_output=True, timeout=60)

    def delete(self):
        self._ctl('delete_vhost', self.name)


# --------------------------------------------------------------------------
# Placement


class PlacementProcess(Process):
    """The real Placement app as its own process (``python -m
    cyborg_bench.serve placement``), on SQLite in `workdir` or on the
    database `connection` names."""

    def __init__(self, workdir, connection=None, timeout=180.0):
        state_dir = os.path.join(workdir, 'placement')
        os.makedirs(state_dir)
        cmd = [sys.executable, '-m', 'cyborg_bench.serve', 'placement',
               '--state-dir', state_dir]
        if connection:
            cmd += ['--connection', connection]
        super().__init__('placement', cmd, workdir)
        self.url = None

        def ready():
            m = re.search(r'placement ready (\S+)', self.text())
            self.url = m and m.group(1)
            return self.url is not None

        try:
            self.wait_for(ready, 'ready line', timeout)
        except BaseException:
            self.stop()
            raise

    def problems(self, keys=('Traceback', 'ERROR', 'CRITICAL', 'locked',
                             'Error')):
        """Distinct log lines that point at trouble, with their counts."""
        found = collections.Counter(line.strip()[:300]
                                    for line in super().problems(keys))
        return ['%d× %s' % (n, line) for line, n in found.items()]


# --------------------------------------------------------------------------
# The deployments


class Aio:
    """cyborg-aio in a subprocess (its own session), stderr to aio.log."""

    def __init__(self, workdir, spec, nova_url, timeout=90.0, debug=False,
                 log=None):
        self._say = log or (lambda msg: None)
        exe = os.path.join(os.path.dirname(sys.executable), 'cyborg-aio')
        cmd = [exe] if os.path.exists(exe) else [
            sys.executable, '-m', 'cyborg.cmd.aio']
        cmd += ['--no-demo', '--nova-endpoint', nova_url,
                '--host-spec', spec,
                '--state-dir', os.path.join(workdir, 'state'),
                '--port', '0', '--placement-port', '0',
                '--metrics-port', '0']
        if debug:
            cmd.append('--debug')
        self.cmd = cmd
        self.process = Process('aio', cmd, workdir)
        self.api_url = self.placement_url = None
        try:
            self.process.wait_for(self._ready, 'ready line', timeout)
        except BaseException:
            self.stop()  # also on Ctrl-C: never leave it running
            raise
        rest = self.api_url.split('//', 1)[1]
        hostport, prefix = rest.split('/', 1)
        self.prefix = '/' + prefix.rstrip('/')
        self.port = int(hostport.rsplit(':', 1)[1])

    def _ready(self):
        for line in self.process.text().splitlines():
            if 'cyborg-aio ready:' in line:
                for word in line.split():
                    if word.startswith('api='):
                        self.api_url = word[4:]
                    elif word.startswith('placement='):
                        self.placement_url = word[10:]
        return self.api_url is not None

    @property
    def pid(self):
        return self.process.pid

    @property
    def proc(self):
        return self.process.proc

    def cpu_seconds(self):
        """user+system CPU time of the aio process so far."""
        return process_cpu_seconds(self.pid)

    def log_tail(self, lines=40):
        return self.process.log_tail(lines)

    def log_problems(self):
        return self.process.problems()

    def stop(self):
        self.process.stop(on_kill=lambda: self._say(
            'cyborg-aio did not stop within 20 s of SIGTERM; killing it'))


CONFIG = """\
[DEFAULT]
host = {host}
transport_url = {rabbit}
[database]
connection = {db}
[api]
auth_strategy = noauth
host_ip = 127.0.0.1
port = {api_port}
api_workers = {api_workers}
[agent]
enabled_drivers = fake
[fake_driver]
host_spec = {spec}
[placement]
auth_type = none
endpoint_override = {placement}
[nova]
auth_type = none
endpoint_override = {nova}
"""

SERVICES = ('cyborg-conductor', 'cyborg-agent', 'cyborg-api')


class Distributed:
    """Placement, cyborg-conductor, cyborg-agent and cyborg-api as
    separate processes over RabbitMQ (a vhost of their own), with SQLite
    or a throw-away MariaDB/PostgreSQL database."""

    def __init__(self, workdir, spec, nova_url, db='sqlite', api_workers=2,
                 timeout=120.0):
        self.services = []
        self.placement = self.database = self.vhost = None
        try:
            self._start(workdir, spec, nova_url, db, api_workers, timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, workdir, spec, nova_url, db, api_workers, timeout):
        self.vhost = VirtualHost()
        self.database = Database(db, workdir)
        self.database.migrate()
        self.placement = PlacementProcess(workdir)
        self.placement_url = self.placement.url
        host = 'bench-%s' % uuid.uuid4().hex[:8]
        # What nova-compute does first: register the compute node.
        request = urllib.request.Request(
            self.placement_url + '/resource_providers', method='POST',
            data=('{"name": "%s"}' % host).encode(),
            headers={'Content-Type': 'application/json',
                     'X-Auth-Token': 'admin',
                     'OpenStack-API-Version': 'placement 1.20'})
        urllib.request.urlopen(request, timeout=10).close()
        self.port = free_port()
        conf = os.path.join(workdir, 'cyborg.conf')
        with open(conf, 'w') as f:
            f.write(CONFIG.format(
                host=host, rabbit=self.vhost.url,
                db=self.database.url, api_port=self.port,
                api_workers=api_workers, spec=spec,
                placement=self.placement_url, nova=nova_url))
        bindir = os.path.dirname(sys.executable)
        for name in SERVICES:
            service = Process(name, [os.path.join(bindir, name),
                                     '--config-file', conf], workdir)
            self.services.append(service)
            if name == 'cyborg-conductor':
                # Its queues must exist before the agent reports.
                service.wait_for(
                    lambda: '%s started' % name in service.text(),
                    'start', timeout)
        self.prefix = '/v2'
        self.api_url = 'http://127.0.0.1:%d/v2' % self.port
        self.services[-1].wait_for(lambda: answers(self.api_url),
                                   'API answer', timeout)
        self.cmd = [s.proc.args[0] for s in self.services]
        self.pid = self.services[0].pid   # py-spy: the conductor

    def cpu_seconds(self):
        """CPU of the cyborg processes (all gunicorn workers included);
        RabbitMQ's and the database server's are not counted."""
        return sum(group_cpu_seconds(s.pid) for s in self.services)

    def log_tail(self, lines=40):
        return '\n'.join('== %s\n%s' % (s.name, s.log_tail(lines))
                         for s in self.services)

    def log_problems(self):
        return ['%s: %s' % (s.name, line) for s in self.services
                for line in s.problems()]

    def stop(self):
        for service in reversed(self.services):
            service.stop()
        if self.placement is not None:
            self.placement.stop()
        if self.database is not None:
            self.database.drop()
        if self.vhost is not None:
            self.vhost.delete()
