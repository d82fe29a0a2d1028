"""A distributed deployment on this machine, for the benchmarks: Placement,
cyborg-api (gunicorn workers), cyborg-conductor and cyborg-agent (fake
driver) as separate processes over RabbitMQ, with SQLite or a throw-away
MariaDB/PostgreSQL database. It offers what bind_bench's Aio offers (api_url,
port, prefix, cpu_seconds, log_problems, stop), so a benchmark can run the
same load against either deployment.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import agent_scale

RABBIT_URL = 'rabbit://guest:guest@127.0.0.1:5672/%s'

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


class VirtualHost:
    """A RabbitMQ virtual host of our own. Queues are named by topic
    whatever the exchange, so on a shared broker another Cyborg's
    conductor (a test run, the reference service) would consume our
    messages; a vhost keeps them apart."""

    def __init__(self):
        self.name = 'cyborg-bench-%s' % uuid.uuid4().hex[:8]
        self._ctl('add_vhost', self.name)
        self._ctl('set_permissions', '-p', self.name, 'guest',
                  '.*', '.*', '.*')

    @staticmethod
    def _ctl(*args):
        subprocess.run(['rabbitmqctl', '-q'] + list(args), check=True,
                       capture_output=True, timeout=60)

    def delete(self):
        self._ctl('delete_vhost', self.name)


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


def group_cpu_seconds(pgid):
    """user+system CPU time of every live process in a process group."""
    ticks = 0
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % entry) as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf('SC_CLK_TCK')


class _Service:
    """One console script in its own session, output to a log file."""

    def __init__(self, name, argv, workdir):
        self.name = name
        self.log_path = os.path.join(workdir, '%s.log' % name)
        self._log = open(self.log_path, 'wb')
        env = dict(os.environ, PYTHONUNBUFFERED='1',
                   PYTHONWARNINGS='ignore')
        self.proc = subprocess.Popen(argv, cwd=workdir, env=env,
                                     stdout=self._log,
                                     stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL,
                                     start_new_session=True)

    def text(self):
        with open(self.log_path, errors='replace') as f:
            return f.read()

    def wait_for(self, predicate, what, timeout=90.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError('%s exited with %s while waiting for %s:'
                                   '\n%s' % (self.name, self.proc.returncode,
                                             what, self.text()[-3000:]))
            if predicate():
                return
            time.sleep(0.2)
        raise RuntimeError('%s: no %s within %.0fs:\n%s'
                           % (self.name, what, timeout, self.text()[-3000:]))

    def stop(self):
        stop_group(self.proc)
        self._log.close()


def _answers(url):
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


class Distributed:

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
        self.database = agent_scale.Database(db, workdir)
        self.database.migrate()
        self.placement = agent_scale.PlacementProcess(workdir)
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
        with socket.socket() as sock:
            sock.bind(('127.0.0.1', 0))
            self.port = sock.getsockname()[1]
        conf = os.path.join(workdir, 'cyborg.conf')
        with open(conf, 'w') as f:
            f.write(CONFIG.format(
                host=host, rabbit=RABBIT_URL % self.vhost.name,
                db=self.database.url, api_port=self.port,
                api_workers=api_workers, spec=spec,
                placement=self.placement_url, nova=nova_url))
        bindir = os.path.dirname(sys.executable)
        for name in SERVICES:
            service = _Service(name, [os.path.join(bindir, name),
                                      '--config-file', conf], workdir)
            self.services.append(service)
            if name == 'cyborg-conductor':
                # Its queues must exist before the agent reports.
                service.wait_for(
                    lambda: '%s started' % name in service.text(),
                    'start', timeout)
        self.prefix = '/v2'
        self.api_url = 'http://127.0.0.1:%d/v2' % self.port
        self.services[-1].wait_for(lambda: _answers(self.api_url),
                                   'API answer', timeout)
        self.cmd = [s.proc.args[0] for s in self.services]
        self.pid = self.services[0].proc.pid   # py-spy: the conductor

    def cpu_seconds(self):
        """CPU of the cyborg processes (all gunicorn workers included);
        RabbitMQ's and the database server's are not counted."""
        return sum(group_cpu_seconds(s.proc.pid) for s in self.services)

    def log_tail(self, lines=40):
        return '\n'.join('== %s\n%s' % (s.name, ''.join(
            s.text().splitlines(True)[-lines:])) for s in self.services)

    def log_problems(self):
        keys = ('Traceback', 'ERROR', 'CRITICAL', 'WARNING', 'locked')
        return ['%s: %s' % (s.name, line) for s in self.services
                for line in s.text().splitlines()
                if any(k in line for k in keys)]

    def stop(self):
        for service in reversed(self.services):
            service.stop()
        if self.placement is not None:
            self.placement.stop()
        if self.database is not None:
            self.database.drop()
        if self.vhost is not None:
            self.vhost.delete()
