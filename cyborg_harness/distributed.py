# SPDX-License-Identifier: Apache-2.0
"""A distributed deployment on this machine: Placement, cyborg-conductor,
cyborg-agent and cyborg-api (gunicorn workers) as separate processes with
one config file, over RabbitMQ (a virtual host of its own) and a real
database (a throw-away one unless given).

Each service's log is WORKDIR/NAME-N.log, N counting its runs (a killed
and restarted agent keeps both logs).
"""

import os
import subprocess
import uuid

from cyborg_harness import databases
from cyborg_harness import net
from cyborg_harness import placement as harness_placement
from cyborg_harness import processes
from cyborg_harness import rabbit

SERVICES = ('cyborg-conductor', 'cyborg-agent', 'cyborg-api')


def write_conf(path, sections):
    """An oslo.config file of {section: {option: value}}."""
    with open(path, 'w') as f:
        for section, options in sections.items():
            f.write('[%s]\n' % section)
            for key, value in options.items():
                if isinstance(value, (list, tuple)):
                    value = ','.join(str(v) for v in value)
                f.write('%s = %s\n' % (key, value))
    return path


class Distributed:
    """The deployment; start() brings it up (Placement, the compute node's
    provider, conductor, agent, API), close() takes all of it down.

    database: a databases.Database (kept), or a backend name for a
      throw-away one (dropped by close()).
    broker: a rabbit.Broker (default: the machine's); the deployment
      uses a virtual host of its own on it.
    options: {section: {option: value}} over the defaults below.
    host_spec: the fake driver's host description (default: its own).
    nova_url: where [nova] points (e.g. a nova.NovaEvents' url).
    """

    def __init__(self, workdir, database='sqlite', broker=None,
                 options=None, host=None, host_spec=None, nova_url=None,
                 api_workers=2, timeout=120, start=True):
        self.dir = str(workdir)
        self.timeout = timeout
        self.host = host or 'dist-%s' % uuid.uuid4().hex[:8]
        self.procs = {}
        self.placement = self.vhost = None
        self._own_database = isinstance(database, str)
        self.database = database
        self.api_port = net.free_port()
        self.api_url = self.api = net.url(self.api_port, '/v2')
        self.port, self.prefix = self.api_port, '/v2'
        self.broker = broker or rabbit.Broker()
        self._options = options or {}
        self._host_spec = host_spec
        self._nova_url = nova_url
        self._api_workers = api_workers
        self.conf = os.path.join(self.dir, 'cyborg.conf')
        if start:
            self.start()

    # -- bringing it up -----------------------------------------------------

    def start(self):
        try:
            if self._own_database:
                self.database = databases.Database(
                    self.database, self.dir, prefix='cyborg_dist').migrate()
            self.vhost = rabbit.VirtualHost(self.broker, prefix='cyborg-dist')
            self.start_placement()
            harness_placement.register_node(self.placement_url, self.host)
            self._write_conf()
            self.start_conductor()
            self.start_agent()
            self.start_api()
        except BaseException:
            self.close()
            raise
        return self

    def _write_conf(self):
        sections = {
            'DEFAULT': {'host': self.host, 'transport_url': self.vhost.url},
            'database': {'connection': self.database.url},
            'api': {'auth_strategy': 'noauth', 'host_ip': net.LOOPBACK,
                    'port': self.api_port,
                    'api_workers': self._api_workers},
            'agent': {'enabled_drivers': 'fake'},
            'placement': {'auth_type': 'none',
                          'endpoint_override': self.placement_url},
        }
        if self._host_spec:
            sections['fake_driver'] = {'host_spec': self._host_spec}
        if self._nova_url:
            sections['nova'] = {'auth_type': 'none',
                                'endpoint_override': self._nova_url}
        for section, options in self._options.items():
            sections.setdefault(section, {}).update(options)
        write_conf(self.conf, sections)

    @property
    def transport_url(self):
        return self.vhost.url

    def _runs(self, name):
        return len([p for p in os.listdir(self.dir)
                    if p.startswith(name + '-') and p.endswith('.log')])

    def _process(self, name, argv, key=None):
        proc = processes.Process('%s-%d' % (name, self._runs(name)), argv,
                                 self.dir,
                                 env={'PYTHONWARNINGS': 'ignore'})
        self.procs[key or name] = proc
        return proc

    def _service(self, name, extra_conf=None, key=None):
        argv = [processes.script(name), '--config-file', self.conf]
        if extra_conf:
            argv += ['--config-file', extra_conf]
        return self._process(name, argv, key)

    def start_placement(self):
        """Placement (again, on the same port and database after a
        stop('placement')).
        """
        port = self.placement.port if self.placement is not None else 0
        self.placement = harness_placement.PlacementProcess(
            self.dir, port=port, timeout=self.timeout,
            name='placement-%d' % self._runs('placement'))
        self.procs['placement'] = self.placement
        self.placement_url = self.placement.url
        return self.placement

    def start_conductor(self, key='cyborg-conductor'):
        proc = self._service('cyborg-conductor', key=key)
        # Its queue must exist before an agent's report or a bind is
        # cast: a message to a topic nobody consumes yet is dropped.
        proc.wait_for_log('cyborg-conductor started', self.timeout)
        return proc

    def start_agent(self, host=None):
        """This deployment's agent, or one for another compute node
        `host` (registered in Placement first; key 'cyborg-agent@HOST').
        """
        extra, key = None, 'cyborg-agent'
        if host is not None and host != self.host:
            harness_placement.register_node(self.placement_url, host)
            extra = write_conf(os.path.join(self.dir, 'agent-%s.conf'
                                            % host),
                               {'DEFAULT': {'host': host}})
            key = 'cyborg-agent@%s' % host
        proc = self._service('cyborg-agent', extra, key)
        proc.wait_for_log('cyborg-agent started', self.timeout)
        return proc

    def start_api(self):
        proc = self._service('cyborg-api')
        proc.wait_for(self.api_answers, 'API answer', self.timeout)
        return proc

    def api_answers(self):
        import requests

        try:
            return requests.get(self.api_url, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    # -- taking parts down --------------------------------------------------

    def kill(self, key):
        """SIGKILL (with its children): no clean shutdown, as when a host
        loses power.
        """
        self.procs.pop(key).kill()

    def stop(self, key=None):
        """Stop one service cleanly; without a key, the whole deployment
        (close()).
        """
        if key is None:
            return self.close()
        return self.procs.pop(key).stop()

    def close(self):
        processes.stop_all(list(self.procs.values()))
        self.procs = {}
        if self.vhost is not None:
            try:
                self.vhost.delete()
            except (subprocess.SubprocessError, OSError):
                pass        # a broker left down keeps it; it is ours
            self.vhost = None
        if self._own_database and not isinstance(self.database, str):
            self.database.drop()
            self.database = None

    # -- looking at it ------------------------------------------------------

    def logs(self, key):
        return self.procs[key].logs()

    def all_logs(self, name):
        """The logs of every run of service `name` (killed ones too)."""
        out = []
        for log_name in sorted(os.listdir(self.dir)):
            if log_name.startswith(name + '-') and log_name.endswith('.log'):
                with open(os.path.join(self.dir, log_name),
                          errors='replace') as f:
                    out.append(f.read())
        return '\n'.join(out)

    def cpu_seconds(self):
        """CPU of the cyborg processes (gunicorn workers included);
        Placement's, RabbitMQ's and the database server's not counted.
        """
        return sum(p.cpu_seconds() for key, p in self.procs.items()
                   if key != 'placement')

    def log_tail(self, lines=40):
        return '\n'.join('== %s\n%s' % (p.name, p.log_tail(lines))
                         for p in self.procs.values())

    def log_problems(self):
        return ['%s: %s' % (p.name, line) for key, p in self.procs.items()
                if key != 'placement' for line in p.problems()]
