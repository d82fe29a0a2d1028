# SPDX-License-Identifier: Apache-2.0
"""The migrations build exactly the schema cyborg.db.models declares, on
every backend, and every column a list filters on has an index.
"""

import datetime
import json
import uuid

from alembic import autogenerate
from alembic import migration as alembic_migration
from alembic import script as alembic_script
import pytest
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import models
from tests import dbs


@pytest.fixture(scope='module', params=dbs.BACKENDS)
def empty_database(request):
    """A brand-new database per backend, upgraded from empty by
    cyborg.db.migration (not the shared per-run one the DB tests use).
    """
    db = dbs.new(request.param)
    engine = sa.create_engine(db.url)
    try:
        migration.upgrade(engine=engine)
        yield engine
    finally:
        engine.dispose()
        db.drop()


def _head():
    cfg = migration._config(None)
    return alembic_script.ScriptDirectory.from_config(cfg).get_current_head()


def test_upgrade_reaches_head_and_is_idempotent(empty_database):
    assert migration.version(engine=empty_database) == _head()
    migration.upgrade(engine=empty_database)
    assert migration.version(engine=empty_database) == _head()


def test_migrated_schema_matches_models(empty_database):
    with empty_database.connect() as conn:
        context = alembic_migration.MigrationContext.configure(
            conn, opts={'compare_type': True,
                        'compare_server_default': True})
        diff = autogenerate.compare_metadata(context, models.Base.metadata)
    assert diff == []


def test_check_constraints_exist(empty_database):
    """compare_metadata ignores CHECKs; look for each one by its column."""
    inspector = sa.inspect(empty_database)
    expected = {
        'devices': ['type', 'status'],
        'deployables': ['num_accelerators'],
        'controlpath_ids': ['cpid_type'],
        'attach_handles': ['attach_type'],
        'extended_accelerator_requests': ['state',
                                          'device_profile_group_id'],
    }
    for table, columns in expected.items():
        sql = ' '.join(c['sqltext'] for c in
                       inspector.get_check_constraints(table))
        for column in columns:
            assert column in sql, (table, column, sql)


def test_attach_types_mig_and_mps_are_allowed(empty_database):
    """0004 lets a handle be a MIG instance, 0007 an MPS share (the CHECK
    lists both, and still MDEV).
    """
    inspector = sa.inspect(empty_database)
    sql = ' '.join(c['sqltext'] for c in
                   inspector.get_check_constraints('attach_handles'))
    for kind in ('MIG', 'MPS', 'MDEV', 'PCI', 'TEST_PCI'):
        assert "'%s'" % kind in sql, sql


def _insert(conn, table, **values):
    """A row at the schema of the revision the database is at; its id."""
    now = datetime.datetime(2026, 12, 2)
    row = dict({'uuid': str(uuid.uuid4()), 'created_at': now}, **values)
    tbl = sa.Table(table, sa.MetaData(), autoload_with=conn)
    conn.execute(tbl.insert().values(**row))
    return conn.execute(sa.select(tbl.c.id).where(
        tbl.c.uuid == row['uuid'])).scalar_one()


def _at(backend, revision):
    """A new database of `backend` at `revision`: its engine, then it is
    dropped (a fixture's body).
    """
    db = dbs.new(backend)
    engine = sa.create_engine(db.url)
    try:
        migration.upgrade(revision, engine=engine)
        yield engine
    finally:
        engine.dispose()
        db.drop()


@pytest.fixture(params=dbs.BACKENDS)
def at_0006(request):
    """A new database per backend at revision 0006 (before MPS)."""
    yield from _at(request.param, '0006')


@pytest.fixture(params=dbs.BACKENDS)
def at_0007(request):
    """A new database per backend at revision 0007 (whole ARQ indexes)."""
    yield from _at(request.param, '0007')


def test_0007_retypes_stored_mps_share_handles(at_0006):
    """Share handles the nvidia driver stored as MDEV (free, or bound to
    an MPS share) become MPS; a vGPU's MDEV handle, a time-slice share's
    and another driver's handle on a deployable named alike stay MDEV.
    """
    pf = {'domain': '0000', 'bus': '1b', 'device': '00', 'function': '0'}
    handles = {}
    with at_0006.begin() as conn:
        device = _insert(conn, 'devices', type='GPU', vendor='10de',
                         model='NVIDIA H200', hostname='h1',
                         status='enabled', excluded=False)
        cpid = _insert(conn, 'controlpath_ids', hostname='h1',
                       device_id=device, cpid_type='PCI',
                       cpid_info=json.dumps(pf))

        def deployable(name, driver):
            return _insert(conn, 'deployables', name=name,
                           num_accelerators=1, device_id=device,
                           driver_name=driver)
        share = deployable('0000:1b:00.0_share', 'nvidia')
        gpu = deployable('0000:1b:00.0', 'nvidia')
        other = deployable('x_share', 'fake')
        for key, dep, info in (
                ('free', share, dict(pf, share_slot='0')),
                ('bound', share, dict(pf, share_slot='1', share_mode='mps',
                                      share_percent=25)),
                ('time-slice', share, dict(pf, share_slot='2',
                                           share_mode='time-slice')),
                ('vgpu', gpu, dict(pf, function='4',
                                   asked_type='nvidia-700')),
                ('other', other, dict(pf, share_slot='0'))):
            handles[key] = _insert(
                conn, 'attach_handles', deployable_id=dep, cpid_id=cpid,
                in_use=key == 'bound', attach_type='MDEV',
                attach_info=json.dumps(info))
    migration.upgrade(engine=at_0006)
    with at_0006.connect() as conn:
        tbl = sa.Table('attach_handles', sa.MetaData(), autoload_with=conn)
        types = {row.id: row.attach_type for row in conn.execute(
            sa.select(tbl.c.id, tbl.c.attach_type))}
    assert {key: types[i] for key, i in handles.items()} == {
        'free': 'MPS', 'bound': 'MPS', 'time-slice': 'MDEV',
        'vgpu': 'MDEV', 'other': 'MDEV'}


def test_0008_keeps_the_arqs_and_their_lookups(at_0007):
    """ARQs stored before 0008, a bound one and a new one, are found
    after it by the columns whose indexes it rebuilt; the indexes are
    partial on SQLite and PostgreSQL, whole on MariaDB, and the plain
    attach_handle_id index is gone while its unique constraint stays.
    """
    instance = str(uuid.uuid4())
    with at_0007.begin() as conn:
        profile = _insert(conn, 'device_profiles', name='p',
                          profile_json='{"groups": []}')

        def arq(**values):
            return _insert(conn, 'extended_accelerator_requests', **dict({
                'state': 'Initial', 'device_profile_id': profile,
                'device_profile_group_id': 0, 'event_pending': False,
                'project_id': 'proj'}, **values))
        bound = arq(instance_uuid=instance, device_rp_uuid=instance,
                    bind_owner='conductor-1', event_pending=True)
        arq()
    migration.upgrade(engine=at_0007)
    arqs = sa.Table('extended_accelerator_requests', sa.MetaData(),
                    autoload_with=at_0007)
    with at_0007.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(
            arqs)).scalar() == 2
        for condition in (arqs.c.instance_uuid == instance,
                          arqs.c.device_rp_uuid == instance,
                          arqs.c.bind_owner == 'conductor-1',
                          arqs.c.event_pending == sa.true()):
            assert conn.execute(sa.select(arqs.c.id).where(
                condition)).scalars().all() == [bound]
    inspector = sa.inspect(at_0007)
    indexes = {i['name']: i for i in inspector.get_indexes(arqs.name)}
    assert 'arqs_attach_handle_id_idx' not in indexes
    assert ['attach_handle_id'] in [
        u['column_names'] for u in inspector.get_unique_constraints(
            arqs.name)]
    partial = at_0007.dialect.name in ('sqlite', 'postgresql')
    for name, column, _ in models.ARQ_PARTIAL_INDEXES:
        index = indexes[name]
        assert index['column_names'] == [column]
        where = index.get('dialect_options', {}).get(
            '%s_where' % at_0007.dialect.name)
        assert (where is not None) is partial, (name, index)


# Columns a list or lookup filters on (API filters, conductor and agent
# lookups, pagination markers and the FK checks behind RESTRICT deletes).
FILTERED = {
    'devices': ['type', 'vendor', 'hostname', 'uuid'],
    'deployables': ['uuid', 'device_id', 'parent_id', 'root_id', 'rp_uuid'],
    'attributes': ['uuid', 'deployable_id', 'key'],
    'controlpath_ids': ['uuid', 'device_id'],
    'attach_handles': ['uuid', 'deployable_id', 'cpid_id'],
    'device_profiles': ['uuid', 'name'],
    'extended_accelerator_requests': [
        'uuid', 'instance_uuid', 'project_id', 'state', 'device_rp_uuid',
        'device_profile_id', 'attach_handle_id', 'deployable_id'],
}


def _leading_columns(inspector, table):
    """First column of every index, unique constraint and primary key."""
    leading = set()
    for index in inspector.get_indexes(table):
        leading.add(index['column_names'][0])
    for unique in inspector.get_unique_constraints(table):
        leading.add(unique['column_names'][0])
    primary_key = inspector.get_pk_constraint(table)['constrained_columns']
    leading.update(primary_key[:1])
    return leading


@pytest.mark.parametrize('table,columns', sorted(FILTERED.items()))
def test_filtered_columns_are_indexed(empty_database, table, columns):
    leading = _leading_columns(sa.inspect(empty_database), table)
    missing = [c for c in columns if c not in leading]
    assert missing == [], '%s: no index leads with %s' % (table, missing)


def test_every_foreign_key_is_indexed(empty_database):
    """PostgreSQL does not index FK columns by itself; a RESTRICT check on
    delete would scan the child table.
    """
    inspector = sa.inspect(empty_database)
    for table in models.Base.metadata.tables:
        leading = _leading_columns(inspector, table)
        for fk in inspector.get_foreign_keys(table):
            assert fk['constrained_columns'][0] in leading, (table, fk)


def test_tables_are_innodb_utf8mb4(empty_database):
    if empty_database.dialect.name != 'mysql':
        pytest.skip('MySQL/MariaDB only')
    with empty_database.connect() as conn:
        rows = conn.execute(sa.text(
            'SELECT table_name, engine, table_collation '
            'FROM information_schema.tables WHERE table_schema = DATABASE()'
        )).all()
    for name, engine, collation in rows:
        assert engine == 'InnoDB', name
        assert collation.startswith('utf8mb4'), (name, collation)
