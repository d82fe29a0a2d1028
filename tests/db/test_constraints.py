# SPDX-License-Identifier: Apache-2.0
"""Schema constraints hold on every backend, below any code path.

Each test writes straight to the tables, so what it shows is that the
database itself refuses the bad row (and nothing half-written remains).
"""

from oslo_db import exception as db_exc
import pytest
import sqlalchemy as sa

from cyborg.db import api
from tests.db import seed


# oslo.db wraps most violations in DBError subclasses; MariaDB reports a
# failed CHECK as error 4025, an OperationalError that oslo.db re-raises as is.
CHECK_FAILED = (db_exc.DBError, sa.exc.OperationalError)


def _count(table):
    with api.reader() as session:
        return session.execute(
            sa.select(sa.func.count()).select_from(table)).scalar()


def _insert(table, **values):
    """seed.insert, or a plain INSERT for a table without a uuid."""
    if 'uuid' in table.c:
        return seed.insert(table, **values)
    with api.writer() as session:
        session.execute(table.insert().values(**values))


def _refused(error, table, **values):
    """Inserting `values` into `table` raises `error`; no row is added."""
    before = _count(table)
    with pytest.raises(error):
        _insert(table, **values)
    assert _count(table) == before


def _device_values(**values):
    return {'type': 'GPU', 'vendor': '10de', 'model': 'H200',
            'hostname': 'h', 'status': 'enabled', **values}


# --- unique -----------------------------------------------------------------

_OTHER_UNIQUES = {'controlpath_ids': {'cpid_info': 'other'},
                  'device_profiles': {'name': 'other'},
                  'extended_accelerator_requests': {'attach_handle_id': None}}


@pytest.mark.parametrize('table', ['devices', 'deployables', 'attributes',
                                   'controlpath_ids', 'attach_handles',
                                   'device_profiles',
                                   'extended_accelerator_requests'])
def test_uuid_unique_in_every_table(database, table):
    handle = seed.attach_handle()
    seed.attribute(handle['deployable_id'])
    seed.arq_requests(1)
    t = sa.Table(table, seed.DEVICE.metadata)
    values = {k: v for k, v in seed.select(t)[0].items() if k != 'id'}
    values.update(_OTHER_UNIQUES.get(table, {}))  # only the uuid repeats
    _refused(db_exc.DBDuplicateEntry, t, **values)


def test_controlpath_address_unique_per_host(database):
    dev = seed.device(hostname='h1')
    seed.controlpath_id(dev['id'], hostname='h1', cpid_info='0000:1b:00.0')
    _refused(db_exc.DBDuplicateEntry, seed.CPID, device_id=dev['id'],
             hostname='h1', cpid_type='PCI', cpid_info='0000:1b:00.0')
    # Another device on the same host cannot claim the address either.
    other = seed.device(hostname='h1')
    _refused(db_exc.DBDuplicateEntry, seed.CPID, device_id=other['id'],
             hostname='h1', cpid_type='PCI', cpid_info='0000:1b:00.0')
    # The same PCI address on another host is another device.
    elsewhere = seed.device(hostname='h2')
    seed.controlpath_id(elsewhere['id'], hostname='h2',
                        cpid_info='0000:1b:00.0')
    seed.controlpath_id(dev['id'], hostname='h1', cpid_info='0000:1c:00.0')


def test_device_profile_name_unique(database):
    seed.profile('same')
    _refused(db_exc.DBDuplicateEntry, seed.DP, name='same',
             profile_json='{"groups": []}')


def test_one_attach_handle_serves_one_arq(database):
    first, second, third = seed.arq_requests(3)
    handle = seed.attach_handle()
    seed.bind_handle(first['uuid'], handle)
    with pytest.raises(db_exc.DBDuplicateEntry):
        with api.writer() as session:
            session.execute(seed.ARQ.update()
                            .where(seed.ARQ.c.uuid == second['uuid'])
                            .values(attach_handle_id=handle['id']))
    # Many ARQs without a handle are fine (NULLs are not duplicates).
    assert [r['attach_handle_id'] for r in seed.select(seed.ARQ)] == [
        handle['id'], None, None]


# --- checks -----------------------------------------------------------------

def test_num_accelerators_not_negative(database):
    dev = seed.device()
    _refused(CHECK_FAILED, seed.DEPLOYABLE, name='d', num_accelerators=-1,
             device_id=dev['id'])
    seed.deployable(dev['id'], num_accelerators=0)


def test_group_id_not_negative(database):
    dp = seed.profile()
    _refused(CHECK_FAILED, seed.ARQ, state='Initial',
             device_profile_id=dp['id'], device_profile_group_id=-1)
    with pytest.raises(CHECK_FAILED):
        with api.writer() as session:
            session.execute(seed.ARQ.insert().values(
                uuid='u', state='Initial', device_profile_id=dp['id'],
                device_profile_group_id=0))
            session.execute(seed.ARQ.update().values(
                device_profile_group_id=-5))
    assert _count(seed.ARQ) == 0


_ENUMS = [
    ('devices', 'type', 'TPU'),
    ('devices', 'status', 'broken'),
    ('controlpath_ids', 'cpid_type', 'USB'),
    ('attach_handles', 'attach_type', 'VFIO'),
    ('extended_accelerator_requests', 'state', 'Resolved'),
]


@pytest.mark.parametrize('table,column,bad', _ENUMS)
def test_enum_values_refused(database, table, column, bad):
    """Enums are VARCHAR + CHECK on every backend, so a raw write of an
    unknown value fails in the database, not only in Python.
    """
    seed.attach_handle()
    seed.arq_requests(1)
    t = sa.Table(table, seed.DEVICE.metadata)
    with pytest.raises(CHECK_FAILED):
        with api.writer() as session:
            # Literal SQL: SQLAlchemy's Enum would refuse in Python first.
            session.execute(sa.text(
                'UPDATE %s SET %s = :v' % (table, column)), {'v': bad})
    assert {r[column] for r in seed.select(t)} != {bad}


@pytest.mark.parametrize('table,column,bad', _ENUMS)
def test_enum_values_refused_on_insert(database, table, column, bad):
    seed.attach_handle()
    seed.arq_requests(1)
    t = sa.Table(table, seed.DEVICE.metadata)
    (row,) = seed.select(t)
    values = {k: v for k, v in row.items()
              if k not in ('id', 'created_at', 'updated_at')}
    values.update(_OTHER_UNIQUES.get(table, {}))

    def insert(value, uuid):
        params = dict(values, uuid=uuid, **{column: value})
        sql = 'INSERT INTO %s (%s, created_at) VALUES (%s, %s)' % (
            table, ', '.join(params), ', '.join(':' + k for k in params),
            'CURRENT_TIMESTAMP')
        with api.writer() as session:
            session.execute(sa.text(sql), params)

    with pytest.raises(CHECK_FAILED):
        insert(bad, 'x' * 36)
    assert _count(t) == 1
    # The same statement with a known value passes: the enum was the cause.
    insert(row[column], 'y' * 36)
    assert _count(t) == 2


def test_every_enum_value_accepted(database):
    for t in ('GPU', 'FPGA', 'AICHIP', 'QAT', 'NIC', 'SSD'):
        seed.device(type=t, status='maintaining')
    deployable = seed.deployable()
    for a in seed.models.ATTACH_TYPES:
        seed.attach_handle(deployable, attach_type=a)
    (arq,) = seed.arq_requests(1)
    for state in seed.models.ARQ_STATES:
        with api.writer() as session:
            session.execute(seed.ARQ.update().values(state=state))
        assert seed.select(seed.ARQ)[0]['state'] == state


# --- NOT NULL ---------------------------------------------------------------

# Tables of our own service, not Cyborg's (no uuid column): the
# conductors' heartbeats, keyed by the conductor's name.
OUR_TABLES = ('conductors',)

# Every NOT NULL column but the primary key, as the model declares them
# (test_migrations proves the migrated schema matches the model).
_REQUIRED = sorted(
    (table.name, column.name)
    for table in seed.models.Base.metadata.sorted_tables
    for column in table.columns
    if not column.nullable and not column.primary_key)


def _valid_values(table):
    """Column values for one more valid row of `table` (parents seeded)."""
    if table in OUR_TABLES:
        return {'conductors': {'name': 'host:1:fresh',
                               'heartbeat_at': seed.models.utcnow(),
                               'created_at': seed.models.utcnow()}}[table]
    handle = seed.attach_handle()
    (device,) = seed.select(seed.DEVICE)
    dp = seed.profile()
    values = {
        'devices': _device_values(),
        'deployables': {'name': 'd', 'num_accelerators': 1,
                        'device_id': device['id']},
        'attributes': {'deployable_id': handle['deployable_id'],
                       'key': 'rc', 'value': 'PGPU'},
        'controlpath_ids': {'device_id': device['id'],
                            'hostname': device['hostname'],
                            'cpid_type': 'PCI', 'cpid_info': 'fresh'},
        'attach_handles': {'deployable_id': handle['deployable_id'],
                           'cpid_id': handle['cpid_id'], 'in_use': False,
                           'attach_type': 'PCI', 'attach_info': '{}'},
        'device_profiles': {'name': 'fresh', 'profile_json': '{}'},
        'extended_accelerator_requests': {
            'state': 'Initial', 'device_profile_id': dp['id'],
            'device_profile_group_id': 0},
    }[table]
    return dict(values, uuid='f' * 36, created_at=seed.models.utcnow())


@pytest.mark.parametrize('table,column', _REQUIRED)
def test_not_null(database, table, column):
    t = sa.Table(table, seed.DEVICE.metadata)
    values = _valid_values(table)
    _refused(db_exc.DBError, t, **dict(values, **{column: None}))
    _insert(t, **values)  # the same row with the column set is fine


def test_not_null_columns_are_the_expected_ones():
    """Cyborg's NOT NULLs (contract section 5), plus the ones we added."""
    required = set(_REQUIRED)
    for table in seed.models.Base.metadata.tables:
        if table not in OUR_TABLES:
            assert (table, 'uuid') in required
        assert (table, 'created_at') in required
    assert {
        ('devices', 'type'), ('devices', 'vendor'), ('devices', 'model'),
        ('devices', 'hostname'), ('devices', 'status'),
        ('deployables', 'name'), ('deployables', 'num_accelerators'),
        ('deployables', 'device_id'),
        ('attributes', 'deployable_id'), ('attributes', 'key'),
        ('attributes', 'value'),
        ('controlpath_ids', 'device_id'), ('controlpath_ids', 'cpid_type'),
        ('controlpath_ids', 'cpid_info'),
        ('attach_handles', 'deployable_id'), ('attach_handles', 'cpid_id'),
        ('attach_handles', 'in_use'), ('attach_handles', 'attach_type'),
        ('attach_handles', 'attach_info'),
        ('device_profiles', 'name'), ('device_profiles', 'profile_json'),
        ('extended_accelerator_requests', 'state'),
        ('extended_accelerator_requests', 'device_profile_id'),
        ('extended_accelerator_requests', 'device_profile_group_id'),
        ('conductors', 'heartbeat_at'),
    } <= required


# --- foreign keys -----------------------------------------------------------

@pytest.mark.parametrize('table,column', [
    ('deployables', 'device_id'),
    ('deployables', 'parent_id'),
    ('attributes', 'deployable_id'),
    ('controlpath_ids', 'device_id'),
    ('attach_handles', 'deployable_id'),
    ('attach_handles', 'cpid_id'),
    ('extended_accelerator_requests', 'device_profile_id'),
    ('extended_accelerator_requests', 'attach_handle_id'),
    ('extended_accelerator_requests', 'deployable_id'),
])
def test_foreign_keys_refuse_dangling_ids(database, table, column):
    t = sa.Table(table, seed.DEVICE.metadata)
    values = _valid_values(table)
    _refused(db_exc.DBReferenceError, t, **dict(values, **{column: 999999}))


@pytest.mark.parametrize('parent', ['devices', 'deployables',
                                    'controlpath_ids', 'attach_handles'])
def test_parents_in_use_cannot_be_deleted(database, parent):
    handle = seed.attach_handle()
    seed.attribute(handle['deployable_id'])
    (arq,) = seed.arq_requests(1)
    seed.bind_handle(arq['uuid'], handle)
    t = sa.Table(parent, seed.DEVICE.metadata)
    with pytest.raises(db_exc.DBReferenceError):
        with api.writer() as session:
            session.execute(t.delete())
    assert _count(t) == 1
