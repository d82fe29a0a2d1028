"""The distributed deployment a fault check runs against: Placement,
cyborg-api (gunicorn), cyborg-conductor and cyborg-agent as separate
processes with one config file, over the private MariaDB and RabbitMQ,
and a stand-in for Nova's events API (in the test process) that records
every event and can be taken down and brought back on its port."""

import os
import signal
import sys
import textwrap
import time
import uuid

import requests
import sqlalchemy as sa
import yaml

from cyborg.common import wsgi_server
from tests import processes
from tests.reliability import stack as race_stack

NOVA_HEADERS = dict(race_stack.NOVA_HEADERS)
ADMIN_HEADERS = dict(race_stack.ADMIN_HEADERS)
PLACEMENT_HEADERS = {'X-Auth-Token': 'admin',
                     'OpenStack-API-Version': 'placement 1.26'}
# One FPGA card with many functions: enough attach handles that a burst's
# binds are all Bound when nothing goes wrong.
HANDLES = 128
SWEEP_INTERVAL = 1.0
STALE_AFTER = 8.0


class Events:
    """Nova's events endpoint: an EventRecorder served on a fixed port."""

    def __init__(self):
        self.recorder = race_stack.EventRecorder()
        self.port = processes.free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        self.server = None

    def up(self):
        self.server = wsgi_server.ThreadedServer('nova', self.recorder,
                                                 port=self.port)
        self.server.start()

    def down(self):
        if self.server is not None:
            self.server.stop()
            self.server = None


class Deployment:

    def __init__(self, tmp_path, mariadb, rabbitmq):
        self.dir = str(tmp_path)
        self.mariadb, self.rabbitmq = mariadb, rabbitmq
        self.db_url = mariadb.create_database(
            'cyborg_fault_%s' % uuid.uuid4().hex[:10])
        self.events = Events()
        self.events.up()
        self.host = 'fault-%s' % uuid.uuid4().hex[:8]
        self.placement_port = processes.free_port()
        self.placement_url = 'http://127.0.0.1:%d' % self.placement_port
        self.api_port = processes.free_port()
        self.api = 'http://127.0.0.1:%d/v2' % self.api_port
        self.procs = {}
        spec = os.path.join(self.dir, 'host.yaml')
        with open(spec, 'w') as f:
            yaml.safe_dump({'devices': [{
                'type': 'FPGA', 'vendor_id': 'abcd', 'product_id': 'abcd',
                'model': 'fault FPGA', 'pci_address': '0000:0c:00.0',
                'functions': HANDLES}]}, f)
        self.conf = os.path.join(self.dir, 'cyborg.conf')
        with open(self.conf, 'w') as f:
            f.write(textwrap.dedent('''\
                [DEFAULT]
                host = %(host)s
                transport_url = %(rabbit)s
                control_exchange = cyborg-fault-%(tag)s
                [database]
                connection = %(db)s
                [api]
                auth_strategy = noauth
                host_ip = 127.0.0.1
                port = %(api_port)d
                api_workers = 2
                [conductor]
                bind_sweep_interval = %(sweep)s
                bind_stale_after = %(stale)s
                [agent]
                enabled_drivers = fake
                report_interval = 2
                placement_retry_max_delay = 2
                [fake_driver]
                host_spec = %(spec)s
                [placement]
                auth_type = none
                endpoint_override = %(placement)s
                [nova]
                auth_type = none
                endpoint_override = %(nova)s
                ''') % {'host': self.host, 'rabbit': rabbitmq.url,
                        'tag': uuid.uuid4().hex[:8], 'db': self.db_url,
                        'api_port': self.api_port, 'sweep': SWEEP_INTERVAL,
                        'stale': STALE_AFTER, 'spec': spec,
                        'placement': self.placement_url,
                        'nova': self.events.url})
        self.engine = sa.create_engine(self.db_url, pool_pre_ping=True)

    # Processes -------------------------------------------------------------

    def start(self):
        self.start_placement()
        # What nova-compute does on its host: register the compute node.
        r = requests.post(self.placement_url + '/resource_providers',
                          json={'name': self.host},
                          headers=PLACEMENT_HEADERS)
        assert r.status_code == 200, r.text
        self.start_conductor()
        self.start_agent()
        self.start_api()
        self.wait_devices()

    def _process(self, name, argv):
        log_name = '%s-%d' % (name, len([p for p in os.listdir(self.dir)
                                         if p.startswith(name)]))
        proc = processes.Process(log_name, argv, self.dir)
        self.procs[name] = proc
        return proc

    def _service(self, name):
        return self._process(name, [processes.script(name), '--config-file',
                                    self.conf])

    def start_placement(self):
        proc = self._process('placement', [
            sys.executable, '-m', 'tests.placement_process', '--state-dir',
            self.dir, '--port', str(self.placement_port)])
        proc.wait_for(lambda: 'placement ready' in proc.logs(),
                      'ready line')

    def start_conductor(self):
        proc = self._service('cyborg-conductor')
        # Its queue must exist before an agent's report or a bind is cast.
        proc.wait_for(lambda: 'cyborg-conductor started' in proc.logs(),
                      'conductor start')

    def start_agent(self):
        proc = self._service('cyborg-agent')
        proc.wait_for(lambda: 'cyborg-agent started' in proc.logs(),
                      'agent start')

    def start_api(self):
        proc = self._service('cyborg-api')
        proc.wait_for(self.api_answers, 'API answer')

    def api_answers(self):
        try:
            return requests.get(self.api, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def kill(self, name):
        """SIGKILL: no clean shutdown, as when a host loses power."""
        proc = self.procs.pop(name)
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait(30)

    def stop(self, name):
        self.procs.pop(name).stop()

    def logs(self, name):
        return self.procs[name].logs()

    def all_logs(self, name):
        """The logs of every run of `name` (killed ones too), joined."""
        out = []
        for log_name in sorted(os.listdir(self.dir)):
            if log_name.startswith(name + '-') and log_name.endswith('.log'):
                with open(os.path.join(self.dir, log_name)) as f:
                    out.append(f.read())
        return '\n'.join(out)

    def re_driven(self):
        """How many ARQs conductors re-drove (start-up recovery, sweep)."""
        logs = self.all_logs('cyborg-conductor')
        return sum(int(line.split('Re-driving ')[1].split()[0])
                   for line in logs.splitlines() if 'Re-driving ' in line)

    def close(self):
        processes.stop_all(list(self.procs.values()))
        self.procs = {}
        self.events.down()
        self.engine.dispose()

    # API -------------------------------------------------------------------

    def call(self, method, path, body=None, admin=False, timeout=60):
        return requests.request(
            method, self.api + path,
            headers=ADMIN_HEADERS if admin else NOVA_HEADERS,
            json=body, timeout=timeout)

    def wait_devices(self, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            deps = self.call('GET', '/deployables', admin=True).json()[
                'deployables']
            if deps and all(d['rp_uuid'] for d in deps):
                return deps
            time.sleep(0.3)
        raise AssertionError('the agent never reported its devices:\n%s'
                             % self.logs('cyborg-agent')[-3000:])

    def rp(self):
        [dep] = self.wait_devices()
        return dep['rp_uuid']

    def profile(self, name='fpga'):
        r = self.call('POST', '/device_profiles', [
            {'name': name, 'groups': [{'resources:FPGA': '1'}]}], admin=True)
        assert r.status_code == 201, r.text
        return name

    def create_arqs(self, count, profile='fpga'):
        uuids = []
        for _ in range(count):
            r = self.call('POST', '/accelerator_requests',
                          {'device_profile_name': profile})
            assert r.status_code == 201, r.text
            uuids.append(r.json()['arqs'][0]['uuid'])
        return uuids

    def bind_body(self, arq_uuid, instance, rp):
        return {arq_uuid: [
            {'op': 'add', 'path': '/hostname', 'value': self.host},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance}]}

    # The DB, read directly --------------------------------------------------

    def arq_rows(self):
        with self.engine.connect() as conn:
            return {r['uuid']: dict(r) for r in conn.execute(sa.text(
                'SELECT uuid, state, instance_uuid, attach_handle_id, '
                'bind_failure, event_pending FROM '
                'extended_accelerator_requests')).mappings()}

    def handles_in_use(self):
        with self.engine.connect() as conn:
            return conn.execute(sa.text(
                'SELECT count(*) FROM attach_handles WHERE in_use')).scalar()
