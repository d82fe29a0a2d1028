# SPDX-License-Identifier: Apache-2.0
"""The ARQ lookups by a column whose index holds only the rows that have
a value (cyborg.db.models.ARQ_PARTIAL_INDEXES: SQLite and PostgreSQL)
use that index.

The statements are the DB layer's own, or its conditions in a statement
of their own; each is explained as the database would plan it
(PostgreSQL with sequential scans turned off, since on a table this
small it would scan whatever the indexes allow).
"""

import pytest
import sqlalchemy as sa

from cyborg.db import api
from cyborg.db import arqs
from cyborg.db import bindings
from cyborg.db import models

ARQ = models.ExtendedAcceleratorRequest.__table__
UUID = '7f2c4b9e-1d3a-4c5b-9e8f-0a1b2c3d4e5f'

# (what it looks up, statement, parameters, the index it must use, or
# the indexes it may use)
LOOKUPS = [
    ('ARQs of an instance (list ?instance=)',
     arqs._list_statement(False, True, False, False, False).statement,
     {'instance_uuid': UUID}, 'arqs_instance_uuid_idx'),
    # Both its conditions are an index's WHERE: on an empty table either
    # index may be the planner's choice.
    ('Nova events not yet delivered',
     bindings._pending(None).statement, {},
     ('arqs_event_pending_idx', 'arqs_instance_uuid_idx')),
    ('ARQs whose event is pending',
     sa.select(ARQ.c.uuid).where(ARQ.c.event_pending == sa.true()), {},
     'arqs_event_pending_idx'),
    ('deployables that bound ARQs hold',
     sa.select(ARQ.c.deployable_id).where(ARQ.c.deployable_id.in_([1, 2])),
     {}, 'arqs_deployable_id_idx'),
    ('binds a conductor holds',
     sa.select(ARQ.c.uuid).where(ARQ.c.bind_owner == sa.bindparam('c')),
     {'c': 'conductor-1'}, 'arqs_bind_owner_idx'),
    ('ARQs on a device provider',
     sa.select(ARQ.c.uuid).where(ARQ.c.device_rp_uuid == sa.bindparam('r')),
     {'r': UUID}, 'arqs_device_rp_uuid_idx'),
]


def _plan(engine, statement, params):
    """The database's plan of `statement` as text."""
    compiled = statement.compile(
        dialect=engine.dialect, compile_kwargs={'render_postcompile': True})
    values = compiled.construct_params(params)
    with engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()
        try:
            if engine.dialect.name == 'sqlite':
                cursor.execute('EXPLAIN QUERY PLAN ' + compiled.string,
                               [values[k] for k in compiled.positiontup])
                return '\n'.join(row[-1] for row in cursor.fetchall())
            cursor.execute('SET enable_seqscan = off')
            cursor.execute('EXPLAIN ' + compiled.string, values)
            return '\n'.join(row[0] for row in cursor.fetchall())
        finally:
            cursor.close()
            conn.rollback()


@pytest.fixture
def partial(database):
    if database.backend not in ('sqlite', 'postgresql'):
        pytest.skip('partial indexes: SQLite and PostgreSQL only')
    return api.get_engine()


@pytest.mark.parametrize('what,statement,params,index', LOOKUPS,
                         ids=[lookup[0] for lookup in LOOKUPS])
def test_lookup_uses_its_partial_index(partial, what, statement, params,
                                       index):
    plan = _plan(partial, statement, params)
    indexes = (index,) if isinstance(index, str) else index
    assert any(i in plan for i in indexes), (what, plan)


def test_the_partial_indexes_are_those_the_models_declare(partial):
    names = {name for name, _, _ in models.ARQ_PARTIAL_INDEXES}
    with partial.connect() as conn:
        if partial.dialect.name == 'sqlite':
            rows = conn.execute(sa.text(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                "AND tbl_name = :t"), {'t': ARQ.name}).all()
        else:
            rows = conn.execute(sa.text(
                'SELECT indexname, indexdef FROM pg_indexes '
                'WHERE tablename = :t'), {'t': ARQ.name}).all()
    found = {name: sql or '' for name, sql in rows}
    assert all(' WHERE ' in found[name].upper() for name in names), found
    # The plain index of attach_handle_id is gone (its unique
    # constraint's index serves every lookup by handle).
    assert 'arqs_attach_handle_id_idx' not in found
