# SPDX-License-Identifier: Apache-2.0
"""The distributed deployment a fault check runs against: the harness's
(Placement, cyborg-api (gunicorn), cyborg-conductor and cyborg-agent as
separate processes with one config file) over the private MariaDB and
RabbitMQ, and Nova's events API (in the test process) recording every
event, which can be taken down and brought back on its port.
"""

import os
import uuid

import requests
import sqlalchemy as sa
import yaml

from cyborg_harness import databases
from cyborg_harness import distributed
from cyborg_harness import nova as harness_nova
from cyborg_harness import placement
from cyborg_harness import waiting
from tests.reliability import stack as race_stack

NOVA_HEADERS = dict(race_stack.NOVA_HEADERS)
ADMIN_HEADERS = dict(race_stack.ADMIN_HEADERS)
PLACEMENT_HEADERS = placement.HEADERS
# One FPGA card with many functions: enough attach handles that a burst's
# binds are all Bound when nothing goes wrong.
HANDLES = 128
SWEEP_INTERVAL = 1.0
STALE_AFTER = 8.0


class Deployment(distributed.Distributed):

    def __init__(self, tmp_path, mariadb, rabbitmq):
        self.mariadb, self.rabbitmq = mariadb, rabbitmq
        # The private server goes with its directory: no drop needed.
        database = databases.Database(
            'mysql', server_url=mariadb.server_url,
            prefix='cyborg_fault').migrate()
        self.events = harness_nova.NovaEvents()
        spec = self.spec = os.path.join(str(tmp_path), 'host.yaml')
        self.slow_prepare(0)
        super().__init__(
            tmp_path, database=database, broker=rabbitmq,
            host='fault-%s' % uuid.uuid4().hex[:8], host_spec=spec,
            nova_url=self.events.url, start=False, options={
                'conductor': {'bind_sweep_interval': SWEEP_INTERVAL,
                              'bind_stale_after': STALE_AFTER},
                'agent': {'report_interval': 2,
                          'placement_retry_max_delay': 2}})
        self.engine = sa.create_engine(database.url, pool_pre_ping=True)

    def start(self):
        super().start()
        self.wait_devices()
        return self

    def slow_prepare(self, seconds):
        """Give the FPGA a prepare() that takes `seconds` (the fake driver
        reads it from the host spec when the file changes).
        """
        device = {'type': 'FPGA', 'vendor_id': 'abcd', 'product_id': 'abcd',
                  'model': 'fault FPGA', 'pci_address': '0000:0c:00.0',
                  'functions': HANDLES}
        if seconds:
            device['prepare_seconds'] = seconds
        with open(self.spec + '.new', 'w') as f:
            yaml.safe_dump({'devices': [device]}, f)
        os.replace(self.spec + '.new', self.spec)

    def conductor_holding(self, arq_uuid):
        """The key of the conductor process that holds the ARQ's bind
        (its bind_owner names host:pid:suffix), or None.
        """
        with self.engine.connect() as conn:
            owner = conn.execute(sa.text(
                'SELECT bind_owner FROM extended_accelerator_requests '
                'WHERE uuid = :u'), {'u': arq_uuid}).scalar()
        if owner is None:
            return None
        pid = int(owner.split(':')[1])
        for key, proc in self.procs.items():
            if key.startswith('cyborg-conductor') and proc.proc.pid == pid:
                return key
        return None

    def re_driven(self):
        """How many ARQs conductors re-drove (start-up recovery, sweep)."""
        logs = self.all_logs('cyborg-conductor')
        return sum(int(line.split('Re-driving ')[1].split()[0])
                   for line in logs.splitlines() if 'Re-driving ' in line)

    def close(self):
        super().close()
        self.events.down()
        self.engine.dispose()

    # API -------------------------------------------------------------------

    def call(self, method, path, body=None, admin=False, timeout=60):
        return requests.request(
            method, self.api + path,
            headers=ADMIN_HEADERS if admin else NOVA_HEADERS,
            json=body, timeout=timeout)

    def wait_devices(self, timeout=90):
        def reported():
            deps = self.call('GET', '/deployables', admin=True).json()[
                'deployables']
            return deps if deps and all(d['rp_uuid'] for d in deps) \
                else None

        return waiting.eventually(
            reported, 'the agent to report its devices', timeout,
            interval=0.3,
            detail=lambda: self.logs('cyborg-agent')[-3000:])

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
