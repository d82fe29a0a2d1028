# SPDX-License-Identifier: Apache-2.0
"""cyborg.db.device_profiles on every backend."""

import json

from oslo_db import exception as db_exc
from oslo_utils import uuidutils
import pytest
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api
from cyborg.db import device_profiles
from tests.db import seed

GROUPS = [{'resources:PGPU': '1', 'trait:CUSTOM_GPU_H200': 'required'},
          {'resources:CUSTOM_MIG_1G_18GB': '2'}]


def test_create_returns_stored_profile(database):
    uuid = uuidutils.generate_uuid()
    dp = device_profiles.create(uuid, 'gpu-dp', GROUPS, description='two')
    assert dp['uuid'] == uuid
    assert dp['name'] == 'gpu-dp'
    assert dp['groups'] == GROUPS
    assert dp['description'] == 'two'
    assert isinstance(dp['id'], int)
    assert dp['created_at'] is not None
    assert dp['updated_at'] is None
    assert 'profile_json' not in dp


def test_create_stores_the_groups_text_it_is_given_as_its_own(database):
    """With the groups' JSON text made by the caller (the API, which
    answers with it too), the stored text is what create() makes alone.
    """
    made = device_profiles.create(uuidutils.generate_uuid(), 'given',
                                  GROUPS, groups_json=json.dumps(GROUPS))
    device_profiles.create(uuidutils.generate_uuid(), 'alone', GROUPS)
    rows, decode = device_profiles.list_stored(names=['given', 'alone'])
    stored = [decode(row)['profile_json'] for row in rows]
    assert stored == [json.dumps({'groups': GROUPS})] * 2
    assert device_profiles.get_by_uuid(made['uuid'])['groups'] == GROUPS


def test_get_by_uuid_and_name(database):
    dp = seed.profile('by-name', GROUPS)
    assert device_profiles.get_by_uuid(dp['uuid']) == dp
    assert device_profiles.get_by_name('by-name') == dp


def test_get_missing_is_not_found(database):
    with pytest.raises(exception.NotFound) as e:
        device_profiles.get_by_name('nope')
    assert e.value.code == 404
    assert str(e.value) == 'Device Profile not found with name=nope'
    uuid = uuidutils.generate_uuid()
    with pytest.raises(exception.NotFound):
        device_profiles.get_by_uuid(uuid)


def test_list_in_creation_order_and_name_filter(database):
    made = [seed.profile('dp-%d' % i) for i in range(4)]
    assert device_profiles.list_() == made
    assert [d['name'] for d in device_profiles.list_(names=['dp-2', 'dp-0'])
            ] == ['dp-0', 'dp-2']
    assert device_profiles.list_(names=['missing']) == []
    assert device_profiles.list_(names=[]) == []


def test_list_pagination(database):
    made = [seed.profile('page-%d' % i) for i in range(5)]
    names = [d['name'] for d in made]
    assert [d['name'] for d in device_profiles.list_(limit=2)] == names[:2]
    second = device_profiles.list_(limit=2, marker=made[1]['uuid'])
    assert [d['name'] for d in second] == names[2:4]
    assert [d['name'] for d in device_profiles.list_(
        marker=made[3]['uuid'])] == names[4:]
    assert device_profiles.list_(marker=made[4]['uuid']) == []
    assert device_profiles.list_(limit=0) == []
    # Filter and marker combine: the marker need not match the filter.
    assert [d['name'] for d in device_profiles.list_(
        names=['page-0', 'page-4'], marker=made[2]['uuid'])] == ['page-4']


def test_list_bad_marker_is_invalid(database):
    seed.profile()
    with pytest.raises(exception.Invalid) as e:
        device_profiles.list_(marker=uuidutils.generate_uuid())
    assert e.value.code == 400


def test_duplicate_name(database):
    seed.profile('dup')
    with pytest.raises(exception.DuplicateDeviceProfileName) as e:
        device_profiles.create(uuidutils.generate_uuid(), 'dup', GROUPS)
    assert e.value.code == 409
    assert str(e.value) == 'A device_profile with name dup already exists.'
    assert len(device_profiles.list_()) == 1


def test_duplicate_uuid(database):
    dp = seed.profile('first')
    with pytest.raises(exception.DeviceProfileAlreadyExists) as e:
        device_profiles.create(dp['uuid'], 'second', GROUPS)
    assert e.value.code == 409
    assert str(e.value) == ('DeviceProfile with uuid %s already exists.'
                            % dp['uuid'])
    # Both taken: the uuid is the one reported.
    with pytest.raises(exception.DeviceProfileAlreadyExists):
        device_profiles.create(dp['uuid'], 'first', GROUPS)
    assert [d['name'] for d in device_profiles.list_()] == ['first']


def test_long_unicode_name_round_trips(database):
    name = 'π' * 255
    dp = seed.profile(name)
    assert device_profiles.get_by_name(name)['uuid'] == dp['uuid']


def test_delete_by_uuid(database):
    dp = seed.profile()
    keep = seed.profile()
    device_profiles.delete_by_uuid(dp['uuid'])
    assert device_profiles.list_() == [keep]
    with pytest.raises(exception.NotFound):
        device_profiles.delete_by_uuid(dp['uuid'])


def test_delete_by_names(database):
    a, b, c = (seed.profile(n) for n in ('a', 'b', 'c'))
    device_profiles.delete_by_names(['a', 'c'])
    assert device_profiles.list_() == [b]


def test_delete_by_names_missing_one_deletes_none(database):
    seed.profile('a')
    seed.profile('b')
    with pytest.raises(exception.NotFound) as e:
        device_profiles.delete_by_names(['a', 'missing', 'b'])
    assert 'name=missing' in str(e.value)
    assert [d['name'] for d in device_profiles.list_()] == ['a', 'b']


def test_delete_by_names_in_use_deletes_none(database):
    free = seed.profile('free')
    used = seed.profile('used')
    seed.arq_requests(2, dp=used)
    with pytest.raises(exception.DeviceProfileInUse) as e:
        device_profiles.delete_by_names(['free', 'used'])
    assert e.value.code == 409
    assert 'used' in str(e.value) and ' 2 ' in str(e.value)
    assert device_profiles.list_() == [free, used]


def test_delete_by_uuid_in_use(database):
    dp = seed.profile()
    seed.arq_requests(1, dp=dp)
    with pytest.raises(exception.DeviceProfileInUse):
        device_profiles.delete_by_uuid(dp['uuid'])
    assert device_profiles.get_by_uuid(dp['uuid']) == dp


def test_profile_deletable_once_its_arqs_are_gone(database):
    from cyborg.db import arqs
    dp = seed.profile()
    made = seed.arq_requests(2, dp=dp)
    arqs.delete_by_uuids([a['uuid'] for a in made])
    device_profiles.delete_by_uuid(dp['uuid'])
    assert device_profiles.list_() == []


def test_foreign_key_restricts_direct_delete(database):
    """The DB itself refuses to orphan ARQs, whatever the code checks."""
    dp = seed.profile()
    seed.arq_requests(1, dp=dp)
    with pytest.raises(db_exc.DBReferenceError):
        with api.writer() as session:
            session.execute(seed.DP.delete().where(seed.DP.c.id == dp['id']))
    assert device_profiles.get_by_uuid(dp['uuid']) == dp
    with api.reader() as session:
        assert session.execute(
            sa.select(sa.func.count()).select_from(seed.ARQ)).scalar() == 1


@pytest.mark.parametrize('filters', [{}, {'names': ['st-0', 'st-2']},
                                     {'limit': 2}])
def test_list_stored_decodes_to_list(database, filters):
    [seed.profile('st-%d' % i, GROUPS) for i in range(3)]
    rows, decode = device_profiles.list_stored(**filters)
    listed = device_profiles.list_(**filters)
    assert len({hash(r) for r in rows}) == len(rows) == len(listed) > 0
    decoded = [decode(r) for r in rows]
    assert [device_profiles.groups_of(d) for d in decoded] == \
        [d['groups'] for d in listed]
    for d in decoded:
        d['groups'] = device_profiles.groups_of(d)
        del d['profile_json']
    assert decoded == listed
    # The same stored values give the same rows.
    assert device_profiles.list_stored(**filters)[0] == rows
