# SPDX-License-Identifier: Apache-2.0
"""Device profile storage: explicit queries, one transaction per call."""

import functools
import json

from oslo_db import exception as db_exc
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api
from cyborg.db import models
from cyborg.db import stored_time

DP = models.DeviceProfile.__table__
ARQ = models.ExtendedAcceleratorRequest.__table__

_COLUMNS = (DP.c.id, DP.c.uuid, DP.c.name, DP.c.description,
            DP.c.profile_json, stored_time.as_stored(DP.c.created_at),
            stored_time.as_stored(DP.c.updated_at))


_NOT_DECODED = object()


def _decode(row, profile=None):
    """A row of _COLUMNS as a dict; `profile` is its profile_json when the
    caller has decoded it already, _NOT_DECODED to leave it as the stored
    JSON text (`profile_json` instead of `groups`). (Plain tuples unpack
    faster than SQLAlchemy's mappings, which counted on 200-item lists.)
    """
    id_, uuid, name, description, profile_json, created_at, updated_at = row
    if profile is None:
        profile = json.loads(profile_json)
    out = {'id': id_, 'uuid': uuid, 'name': name,
           'description': description,
           'created_at': created_at, 'updated_at': updated_at}
    if profile is _NOT_DECODED:
        out['profile_json'] = profile_json
    else:
        out['groups'] = profile['groups']
    return out


_INSERT = api.Prepared(DP.insert())
# Where the database can, the INSERT gives back what the database made of
# the new row itself: one statement instead of an INSERT and a read. The
# id, and created_at as stored (MariaDB's DATETIME keeps whole seconds);
# the rest is what was inserted. Fewer columns back is less to parse
# (PyMySQL decodes every column's description in Python).
_MADE = (DP.c.id, DP.c.created_at)
_INSERT_RETURNING = api.Prepared(DP.insert().returning(*_MADE))
# Statements built once, and compiled once per database.
_BY = {'uuid': api.Prepared(
           sa.select(*_COLUMNS).where(DP.c.uuid == sa.bindparam('v'))),
       'name': api.Prepared(
           sa.select(*_COLUMNS).where(DP.c.name == sa.bindparam('v')))}


@api.retry_on_deadlock
def create(uuid, name, groups, description=None, groups_json=None):
    """A new profile; `groups_json`: json.dumps(groups), when the caller
    has made it (its answer shows it too).
    """
    if groups_json is None:
        groups_json = json.dumps(groups)
    # What json.dumps({'groups': groups}) gives, without encoding the
    # groups again.
    values = {'uuid': uuid, 'name': name, 'description': description,
              'profile_json': '{"groups": %s}' % groups_json}
    try:
        # One statement where the INSERT gives its row back, committed on
        # its own (a lone writer).
        with api.writer(lone=api.insert_returning()) as session:
            if session.insert_returning:
                id_, created_at = session.execute(
                    _INSERT_RETURNING, values).one()
                row = (id_, uuid, name, description, values['profile_json'],
                       created_at, None)
            else:
                session.execute(_INSERT, values)
                row = session.execute(_BY['uuid'], {'v': uuid}).one()
    except db_exc.DBDuplicateEntry as e:
        if 'uuid' in (e.columns or []) or _exists(DP.c.uuid, uuid):
            raise exception.DeviceProfileAlreadyExists(uuid=uuid)
        raise exception.DuplicateDeviceProfileName(name=name)
    # Its profile_json is what was just encoded from `groups`.
    return _decode(row, {'groups': groups})


def _exists(column, value):
    return api.read(sa.select(DP.c.id).where(column == value)).first() \
        is not None


@functools.lru_cache(maxsize=None)
def _list_statement(by_names, after_marker, limited):
    """The list query for one combination of filters, built once."""
    query = sa.select(*_COLUMNS)
    if by_names:
        query = query.where(DP.c.name.in_(sa.bindparam('names',
                                                       expanding=True)))
    return api.page(query, DP, after_marker, limited)


def _listing(session, names, limit, marker):
    """The list statement and its parameters, for one page."""
    params = api.bounds(session, DP, limit, marker)
    if names is not None:
        params['names'] = list(names)
    return _list_statement(names is not None, marker is not None,
                           limit is not None), params


def list_(names=None, limit=None, marker=None):
    """Profiles in id order (the API lists them with list_stored())."""
    if marker is None:
        # One statement, which needs no transaction (api.read()).
        rows = api.read(*_listing(None, names, limit, marker)).all()
    else:
        with api.reader() as session:
            rows = session.execute(*_listing(session, names, limit,
                                             marker)).all()
    if not rows:
        return []
    # Every row's profile_json as one JSON document: one decoder call
    # instead of one per profile.
    profiles = json.loads('[%s]' % ','.join(r[4] for r in rows))
    return [_decode(r, p) for r, p in zip(rows, profiles)]


def list_stored(names=None, limit=None, marker=None):
    """list_() as stored: (rows, decode), each row a tuple of the driver's
    values of the profile's columns (a key for anything made of them:
    the API keeps each listed profile's answer per row) and decode(row)
    the profile with its stored JSON text (`profile_json`) instead of
    the decoded `groups` (groups_of() decodes them).
    """
    if marker is None:
        rows, process = api.read_stored(*_listing(None, names, limit, marker))
    else:
        with api.reader() as session:
            rows, process = session.execute_stored(
                *_listing(session, names, limit, marker))
    return rows, lambda row: _decode(process(row), _NOT_DECODED)


def groups_of(dp):
    """The groups of a profile read with its stored JSON text
    (list_stored()'s decode, get_by_uuid(stored=True)).
    """
    return json.loads(dp['profile_json'])['groups']


def get_by_uuid(uuid, stored=False):
    """The profile `uuid`; `stored`: with its stored JSON text
    (`profile_json`, see groups_of()) instead of the decoded `groups`.
    """
    return _found(api.read(_BY['uuid'], {'v': uuid}), 'uuid', uuid, stored)


def get_by_name(name, stored=False):
    """The profile named `name`; `stored` as for get_by_uuid()."""
    return _found(api.read(_BY['name'], {'v': name}), 'name', name, stored)


_GROUPS_BY_NAME = api.Prepared(sa.select(
    DP.c.id, DP.c.uuid, DP.c.name, DP.c.profile_json).where(
        DP.c.name == sa.bindparam('v')))


def find_groups_by_name(session, name):
    """The id, uuid, name and groups of the profile named `name`, inside
    the caller's transaction: what creating its ARQs reads.
    """
    row = session.execute(_GROUPS_BY_NAME, {'v': name}).first()
    if row is None:
        raise exception.not_found('Device Profile', name=name)
    id_, uuid, name, profile_json = row
    return {'id': id_, 'uuid': uuid, 'name': name,
            'groups': json.loads(profile_json)['groups']}


def _found(result, key, value, stored):
    row = result.first()
    if row is None:
        raise exception.not_found('Device Profile', **{key: value})
    return _decode(row, _NOT_DECODED if stored else None)


def delete_by_uuid(uuid):
    _delete(DP.c.uuid, [uuid], 'uuid')


def delete_by_names(names):
    """Delete all named profiles or none of them."""
    _delete(DP.c.name, names, 'name')


# One statement deletes a profile no ARQ uses: its DELETE and COMMIT are
# all the round trips a delete makes (on MariaDB, where each is ~0.3 ms,
# half of what locking the row and counting its ARQs first took). An ARQ
# created meanwhile either is seen by NOT EXISTS or, not yet committed,
# makes the DELETE fail on its foreign key (ON DELETE RESTRICT).
_DELETE_UNUSED = {
    key: api.Prepared(DP.delete().where(
        DP.c[key] == sa.bindparam('v'),
        ~sa.exists().where(ARQ.c.device_profile_id == DP.c.id)))
    for key in ('uuid', 'name')}
# Why nothing was deleted: no such profile, or the ARQs using it.
_USE_OF = {
    key: api.Prepared(sa.select(
        DP.c.name,
        sa.select(sa.func.count()).where(ARQ.c.device_profile_id == DP.c.id)
        .scalar_subquery()).where(DP.c[key] == sa.bindparam('v')))
    for key in ('uuid', 'name')}


@api.retry_on_deadlock
def _delete(column, values, key):
    if len(values) == 1:
        return _delete_one(key, values[0])
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


def _delete_one(key, value):
    """_delete() of one profile: one DELETE when no ARQ uses it."""
    try:
        with api.writer(lone=True) as session:
            if session.execute(_DELETE_UNUSED[key], {'v': value}).rowcount:
                return
    except db_exc.DBReferenceError:
        # An ARQ not yet committed when the DELETE ran uses the profile.
        pass
    # Nothing deleted: why is what a read now finds.
    found = api.read(_USE_OF[key], {'v': value}).first()
    if found is None:
        raise exception.not_found('Device Profile', **{key: value})
    name, count = found
    # The DELETE saw an ARQ using it; one deleted since is not counted.
    raise exception.DeviceProfileInUse(name=name, count=max(count, 1))
