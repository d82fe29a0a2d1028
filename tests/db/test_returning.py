# SPDX-License-Identifier: Apache-2.0
"""Creates give back what a read of the new rows gives, whether the
database returned them from the INSERT itself (INSERT ... RETURNING) or
they were read back after it (a server without RETURNING: MySQL); every
test runs both ways on every backend (the insert_returning fixture).
"""

import datetime

from oslo_utils import uuidutils
import pytest
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api
from cyborg.db import arqs
from cyborg.db import device_profiles
from tests.db import seed

GROUPS = [{'resources:PGPU': '1'}, {'resources:CUSTOM_MIG_1G_18GB': '2'}]


@pytest.fixture
def statements(monkeypatch):
    """The statements the DB layer sends, counted as they are sent."""
    sent = []
    execute = api.Session.execute

    def counting(self, statement, params=None):
        sent.append(statement)
        return execute(self, statement, params)
    monkeypatch.setattr(api.Session, 'execute', counting)
    return sent


def _count(table):
    with api.reader() as session:
        return session.execute(
            sa.select(sa.func.count()).select_from(table)).scalar()


def test_profile_create_answers_what_a_read_gives(insert_returning):
    dp = device_profiles.create(uuidutils.generate_uuid(), 'dp', GROUPS,
                                description='d')
    assert dp == device_profiles.get_by_uuid(dp['uuid'])
    assert dp == device_profiles.list_()[0]


def test_arq_create_answers_what_a_read_gives(insert_returning):
    dp = seed.profile('two-groups', GROUPS)
    by_id = arqs.create(dp['id'], [1, 2], 'p1')
    by_name = arqs.create_from_profile('two-groups', lambda dp: [2, 1], 'p2')
    # The second from a profile this process knows (arqs._PROFILES).
    known = arqs.create_from_profile('two-groups', lambda dp: [1, 1], 'p3')
    assert [a['device_profile_group_id'] for a in by_id + by_name + known] \
        == [0, 1, 1, 0, 0, 1, 0, 1]
    for arq in by_id + by_name + known:
        assert arq == arqs.get(arq['uuid'])
    assert arqs.list_() == by_id + by_name + known


def test_statements_per_create(insert_returning, statements):
    returning = insert_returning
    seed.profile('counted')
    del statements[:]
    device_profiles.create(uuidutils.generate_uuid(), 'one', GROUPS)
    # One INSERT ... RETURNING, or the INSERT and the read as before.
    assert statements == ([device_profiles._INSERT_RETURNING] if returning
                          else [device_profiles._INSERT,
                                device_profiles._BY['uuid']])
    arqs._PROFILES.pop('counted', None)
    del statements[:]
    arqs.create_from_profile('counted', lambda dp: [3], 'p')
    # The profile's read, then the same.
    assert len(statements) == (2 if returning else 3)
    del statements[:]
    arqs.create_from_profile('counted', lambda dp: [3], 'p')
    # The profile known: the INSERT checks it is still the one stored.
    assert len(statements) == (1 if returning else 2)


def test_arqs_of_a_known_profile_made_again_follow_the_new_one(
        insert_returning):
    """A profile deleted and made again under its name (on SQLite, maybe
    with the same id) is read again: its ARQs are the new profile's.
    """
    old = seed.profile('again', GROUPS)
    first = arqs.create_from_profile('again', lambda dp: [1, 1], 'p')
    arqs.delete_by_uuids([a['uuid'] for a in first])
    device_profiles.delete_by_uuid(old['uuid'])
    new = seed.profile('again', GROUPS[:1])
    made = arqs.create_from_profile(
        'again', lambda dp: [len(dp['groups'])], 'p')
    assert [a['device_profile_group_id'] for a in made] == [0]
    assert made == arqs.list_()
    with api.reader() as session:
        assert session.execute(sa.select(seed.ARQ.c.device_profile_id)).all() \
            == [(new['id'],)]
    arqs.delete_by_uuids([made[0]['uuid']])
    device_profiles.delete_by_uuid(new['uuid'])
    with pytest.raises(exception.NotFound):
        arqs.create_from_profile('again', lambda dp: [1], 'p')
    assert _count(seed.ARQ) == 0


def test_many_arqs_are_inserted_in_batches(insert_returning, monkeypatch):
    monkeypatch.setattr(arqs, '_BATCH', 2)
    dp = seed.profile('many', GROUPS)
    made = arqs.create(dp['id'], [3, 2], 'p')
    assert [a['device_profile_group_id'] for a in made] == [0, 0, 0, 1, 1]
    assert made == arqs.list_()


def test_arqs_of_a_profile_gone_are_not_found_and_not_written(
        insert_returning, monkeypatch):
    """The multi-row INSERT fails on its foreign key: nothing of it stays,
    and the API's 404 is what it was.
    """
    dp = seed.profile('real')
    gone = dict(dp, id=dp['id'] + 1000)
    monkeypatch.setattr(arqs.dp_db, 'find_groups_by_name',
                        lambda session, name: gone)
    with pytest.raises(exception.NotFound) as e:
        arqs.create_from_profile('real', lambda dp: [3], 'p')
    assert e.value.code == 404
    with pytest.raises(exception.NotFound):
        arqs.create(gone['id'], [2], 'p')
    assert _count(seed.ARQ) == 0


def test_duplicate_profile_leaves_nothing_written(insert_returning):
    first = seed.profile('taken')
    with pytest.raises(exception.DuplicateDeviceProfileName) as e:
        device_profiles.create(uuidutils.generate_uuid(), 'taken', GROUPS)
    assert e.value.code == 409
    with pytest.raises(exception.DeviceProfileAlreadyExists):
        device_profiles.create(first['uuid'], 'other', GROUPS)
    assert device_profiles.list_() == [first]
    assert _count(seed.DP) == 1


_RETURNING = api.Prepared(seed.DP.insert().returning(seed.DP.c.id,
                                                     seed.DP.c.created_at))
_READ = api.Prepared(sa.select(seed.DP.c.created_at).where(
    seed.DP.c.id == sa.bindparam('id')))


def test_returning_gives_the_stored_datetime(database):
    """What RETURNING gives is what the row holds, as a fresh read gives
    it: MariaDB's DATETIME keeps whole seconds of the microseconds sent.
    """
    if not api.get_engine().dialect.insert_returning:
        pytest.skip('%s cannot INSERT ... RETURNING' % database.backend)
    sent = datetime.datetime(2024, 5, 6, 7, 8, 9, 987654)
    with api.writer() as session:
        id_, returned = session.execute(_RETURNING, {
            'uuid': uuidutils.generate_uuid(), 'name': 'precise',
            'profile_json': '{"groups": []}', 'created_at': sent}).one()
    with api.reader() as session:
        assert session.execute(_READ, {'id': id_}).scalar() == returned
    assert returned == (sent.replace(microsecond=0)
                        if database.backend == 'mysql' else sent)


def test_statements_per_delete(delete_returning, statements):
    dp = seed.profile('unused')
    made = seed.arq_requests(2)
    del statements[:]
    arqs.delete_by_uuids([a['uuid'] for a in made])
    # The DELETE alone, or the locking read and then it.
    assert len(statements) == (1 if delete_returning else 2)
    del statements[:]
    device_profiles.delete_by_uuid(dp['uuid'])
    # One conditional DELETE, each way.
    assert statements == [device_profiles._DELETE_UNUSED['uuid']]
    assert arqs.list_() == []
    assert [p['name'] for p in device_profiles.list_()] == [
        made[0]['device_profile_name']]


def test_arq_delete_refusals_delete_none(delete_returning):
    mine = seed.arq_requests(2, project_id='p1')
    theirs = seed.arq_requests(1, project_id='p2')
    listed = [a['uuid'] for a in mine]
    with pytest.raises(exception.NotFound):
        arqs.delete_by_uuids(listed + [uuidutils.generate_uuid()])
    with pytest.raises(exception.NotFound):
        arqs.delete_by_uuids(listed + [theirs[0]['uuid']], project_id='p1')
    handle = seed.attach_handle()
    arqs.start_bind({mine[1]['uuid']: {
        'hostname': 'host', 'device_rp_uuid': uuidutils.generate_uuid(),
        'instance_uuid': uuidutils.generate_uuid()}})
    seed.bind_handle(mine[1]['uuid'], handle)
    with pytest.raises(exception.Forbidden):
        arqs.delete_by_uuids(listed, project_id='p1')
    assert _count(seed.ARQ) == 3

    # A uuid listed twice is one ARQ to delete; a bound one may go when
    # allowed, and its handle is freed.
    arqs.delete_by_uuids([listed[0], listed[0], listed[1]], project_id='p1',
                         may_delete_bound=True)
    assert arqs.list_() == [arqs.get(theirs[0]['uuid'])]
    assert seed.select(seed.AH)[0]['in_use'] is False


def test_profile_delete_losing_to_an_arq_insert_is_in_use(database,
                                                          monkeypatch):
    """The ARQ the DELETE's NOT EXISTS did not see (not yet committed on
    MariaDB or PostgreSQL) fails it on the foreign key: a 409, as when
    it is seen, and the profile stays.
    """
    dp = seed.profile('raced')
    seed.arq_requests(1, dp=dp)
    unguarded = api.Prepared(seed.DP.delete().where(
        seed.DP.c.uuid == sa.bindparam('v')))
    monkeypatch.setitem(device_profiles._DELETE_UNUSED, 'uuid', unguarded)
    with pytest.raises(exception.DeviceProfileInUse) as e:
        device_profiles.delete_by_uuid(dp['uuid'])
    assert e.value.code == 409
    assert 'raced is used by 1 ' in str(e.value)
    assert device_profiles.get_by_uuid(dp['uuid']) == dp
