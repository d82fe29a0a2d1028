# SPDX-License-Identifier: Apache-2.0
"""Rows written straight into the service's database, for table sizes no
API would fill in reasonable time (the reference creates ~70 ARQs/s).

Both Cyborgs name the tables ``device_profiles`` and
``extended_accelerator_requests`` but their columns differ. Rather than
knowing either schema, the seeder clones a row the API itself wrote
(a template) and only changes the identifying columns, so every row
satisfies whatever the schema demands.
"""

import datetime
import uuid

import sqlalchemy as sa

ARQS = 'extended_accelerator_requests'
PROFILES = 'device_profiles'


class Seeder:

    def __init__(self, url):
        self.engine = sa.create_engine(url)
        meta = sa.MetaData()
        meta.reflect(self.engine, only=[ARQS, PROFILES])
        self.arqs = meta.tables[ARQS]
        self.profiles = meta.tables[PROFILES]

    def close(self):
        self.engine.dispose()

    def count(self, table):
        with self.engine.connect() as conn:
            return conn.execute(
                sa.select(sa.func.count()).select_from(table)).scalar()

    def row(self, table, row_uuid):
        with self.engine.connect() as conn:
            found = conn.execute(sa.select(table).where(
                table.c.uuid == row_uuid)).mappings().first()
        if found is None:
            raise LookupError('%s %s is not in the seeded database; does '
                              '--seed-db name the database the service '
                              'uses?' % (table.name, row_uuid))
        return dict(found)

    def clear_arqs(self):
        with self.engine.begin() as conn:
            conn.execute(self.arqs.delete())

    def fill_arqs(self, template, target, instances, hosts=500, rps=2000,
                  batch=5000):
        """Clone `template` (an ARQ row) until the table holds `target`
        rows. Instances alternately own one and two ARQs (state
        BindStarted, host and device RP set), so a lookup by instance
        matches 1-2 rows; new instance uuids are appended to `instances`.
        """
        base = {k: v for k, v in template.items() if k != 'id'}
        now = datetime.datetime.now(datetime.timezone.utc).replace(
            tzinfo=None)
        have = self.count(self.arqs)
        rows = []
        with self.engine.begin() as conn:
            while have < target:
                instance = str(uuid.uuid4())
                instances.append(instance)
                n = len(instances)
                for _ in range(min(1 + n % 2, target - have)):
                    rows.append(dict(
                        base, uuid=str(uuid.uuid4()), instance_uuid=instance,
                        state='BindStarted', created_at=now,
                        updated_at=None, hostname='compute-%d' % (n % hosts),
                        device_rp_uuid=str(uuid.uuid5(
                            uuid.NAMESPACE_DNS, 'rp-%d' % (n % rps)))))
                    have += 1
                if len(rows) >= batch:
                    conn.execute(self.arqs.insert(), rows)
                    rows = []
            if rows:
                conn.execute(self.arqs.insert(), rows)
        self._analyze()

    def _analyze(self):
        # Fresh planner statistics, as auto-analyze would give after a load.
        stmt = {'postgresql': 'ANALYZE %s', 'mysql': 'ANALYZE TABLE %s',
                'sqlite': 'ANALYZE %s'}.get(self.engine.dialect.name)
        if stmt:
            with self.engine.begin() as conn:
                conn.execute(sa.text(stmt % ARQS))
