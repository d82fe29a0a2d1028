"""Device profile storage: explicit queries, one transaction per call."""

import json

from oslo_db import exception as db_exc
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api
from cyborg.db import models

DP = models.DeviceProfile.__table__
ARQ = models.ExtendedAcceleratorRequest.__table__

_COLUMNS = (DP.c.id, DP.c.uuid, DP.c.name, DP.c.description,
            DP.c.profile_json, DP.c.created_at, DP.c.updated_at)


def _decode(row):
    row = dict(row)
    row['groups'] = json.loads(row.pop('profile_json'))['groups']
    return row


def create(uuid, name, groups, description=None):
    try:
        with api.writer() as session:
            session.execute(DP.insert().values(
                uuid=uuid, name=name, description=description,
                profile_json=json.dumps({'groups': groups})))
            row = session.execute(
                sa.select(*_COLUMNS).where(DP.c.uuid == uuid)).mappings().one()
    except db_exc.DBDuplicateEntry as e:
        if 'uuid' in (e.columns or []) or _exists(DP.c.uuid, uuid):
            raise exception.DeviceProfileAlreadyExists(uuid=uuid)
        raise exception.DuplicateDeviceProfileName(name=name)
    return _decode(row)


def _exists(column, value):
    with api.reader() as session:
        return session.execute(
            sa.select(DP.c.id).where(column == value)).first() is not None


def list_(names=None, limit=None, marker=None):
    with api.reader() as session:
        query = sa.select(*_COLUMNS)
        if names is not None:
            query = query.where(DP.c.name.in_(names))
        query = api.paginate(session, query, DP, limit, marker)
        return [_decode(r) for r in session.execute(query).mappings()]


def get_by_uuid(uuid):
    return _get(DP.c.uuid, uuid, 'uuid')


def get_by_name(name):
    return _get(DP.c.name, name, 'name')


def _get(column, value, key):
    with api.reader() as session:
        row = session.execute(
            sa.select(*_COLUMNS).where(column == value)).mappings().first()
    if row is None:
        raise exception.not_found('Device Profile', **{key: value})
    return _decode(row)


def delete_by_uuid(uuid):
    _delete(DP.c.uuid, [uuid], 'uuid')


def delete_by_names(names):
    """Delete all named profiles or none of them."""
    _delete(DP.c.name, names, 'name')


def _delete(column, values, key):
    with api.writer() as session:
        found = session.execute(
            sa.select(DP.c.id, DP.c.name, column.label('key'))
            .where(column.in_(values))
            .with_for_update()).mappings().all()
        by_key = {r['key']: r for r in found}
        for value in values:
            if value not in by_key:
                raise exception.not_found('Device Profile', **{key: value})
        ids = [r['id'] for r in found]
        in_use = session.execute(
            sa.select(ARQ.c.device_profile_id, sa.func.count())
            .where(ARQ.c.device_profile_id.in_(ids))
            .group_by(ARQ.c.device_profile_id)).all()
        if in_use:
            dp_id, count = in_use[0]
            name = next(r['name'] for r in found if r['id'] == dp_id)
            raise exception.DeviceProfileInUse(name=name, count=count)
        try:
            session.execute(DP.delete().where(DP.c.id.in_(ids)))
        except db_exc.DBReferenceError:
            # An ARQ was created against the profile after our check.
            raise exception.DeviceProfileInUse(name=found[0]['name'], count=1)
