# SPDX-License-Identifier: Apache-2.0
"""Accelerator request (ARQ) storage.

State changes are conditional UPDATEs (`WHERE state IN (...)`), so two
binders of one ARQ can never both win; every call is one transaction.
"""

import functools
import json

from oslo_db import exception as db_exc
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.common import identifiers
from cyborg.db import api
from cyborg.db import device_profiles as dp_db
from cyborg.db import models
from cyborg.db import stored_time
from cyborg.objects import device as records

ARQ = models.ExtendedAcceleratorRequest.__table__
DP = models.DeviceProfile.__table__
AH = models.AttachHandle.__table__
DEPLOYABLE = models.Deployable.__table__
DEVICE = models.Device.__table__

RESOLVED_STATES = ('Bound', 'BindFailed', 'Deleting')
BINDABLE_STATES = ('Initial', 'Unbound')
UNBINDABLE_STATES = ('Initial', 'BindStarted', 'Bound', 'BindFailed',
                     'Unbound', 'UnbindFailed')

# The ARQ's own columns of what the API answers.
_OWN = (ARQ.c.id, ARQ.c.uuid, ARQ.c.state, ARQ.c.device_profile_group_id,
        ARQ.c.hostname, ARQ.c.device_rp_uuid, ARQ.c.instance_uuid,
        ARQ.c.project_id, stored_time.as_stored(ARQ.c.created_at),
        stored_time.as_stored(ARQ.c.updated_at), ARQ.c.bind_failure)
_SELECT = sa.select(
    *_OWN,
    DP.c.name.label('device_profile_name'),
    AH.c.uuid.label('attach_handle_uuid'),
    AH.c.attach_type.label('attach_handle_type'),
    AH.c.attach_info.label('attach_handle_info'),
).select_from(
    ARQ.join(DP, ARQ.c.device_profile_id == DP.c.id)
    .outerjoin(AH, ARQ.c.attach_handle_id == AH.c.id))


def _decode(row):
    row = dict(row)
    bound = row['state'] == 'Bound'
    info = row.pop('attach_handle_info')
    row['attach_handle_info'] = json.loads(info) if bound and info else {}
    row['attach_handle_type'] = (row['attach_handle_type'] or ''
                                 if bound else '')
    if not bound:
        row['attach_handle_uuid'] = None
    return row


def _in_project(query, by_project):
    """`query` restricted to the project bound as `project_id` when
    `by_project` (without it: every project, as admins see them).
    """
    if by_project:
        query = query.where(ARQ.c.project_id == sa.bindparam('project_id'))
    return query


def _with_project(params, project_id):
    """`params` with `project_id` bound for _in_project(); None: every
    project.
    """
    if project_id is not None:
        params['project_id'] = project_id
    return params


@api.retry_on_deadlock
def create(device_profile_id, counts, project_id):
    """Insert counts[g] ARQs for each group index g, in group order."""
    try:
        with api.writer() as session:
            return _insert(session, device_profile_id, counts, project_id)
    except db_exc.DBReferenceError:
        # The profile was deleted between our read and this insert.
        raise _no_profile(device_profile_id)


def _no_profile(device_profile_id):
    return exception.NotFound(resource='Device Profile',
                              msg='with id=%s' % device_profile_id)


# The profiles this process last created ARQs from, by name: their id,
# uuid, name and groups (dp_db.find_groups_by_name()), up to
# _PROFILES_KEPT (then forgotten all at once, as the API's caches do).
#
# A profile's row never changes once written (the API has no update; a
# profile is created and deleted), and its uuid is never another
# profile's. So while a row with a remembered profile's id and uuid
# exists, it is the profile remembered, with the same groups; the INSERT
# of its ARQs checks that itself (_inserting_checked()) instead of reading
# the profile first: on MariaDB and PostgreSQL that read was one of an ARQ
# create's three round trips.
_PROFILES = {}
_PROFILES_KEPT = 256


def _remember(dp):
    if len(_PROFILES) >= _PROFILES_KEPT:
        _PROFILES.clear()
    _PROFILES[dp['name']] = dp


# The most ARQs one checked INSERT makes (one SELECT per ARQ, joined by
# UNION ALL; SQLite allows 500 at most): a profile asking for more is
# read first, which costs little beside inserting that many rows.
_CHECKED_MAX = 16


@api.retry_on_deadlock
def create_from_profile(name, plan, project_id):
    """create() for the profile named `name`, in one transaction with the
    profile's read (or the check that the profile this process knows by
    that name is still the one stored: _PROFILES): `plan(profile)` gives
    the counts per group (and may raise, leaving nothing written).
    """
    try:
        dp = _PROFILES.get(name)
        if dp is not None:
            counts = plan(dp)
            if sum(counts) <= _CHECKED_MAX:
                # One statement where the INSERT gives its rows back,
                # committed on its own (a lone writer).
                with api.writer(lone=api.insert_returning()) as session:
                    made = _insert_checked(session, dp, counts, project_id)
                if made is not None:
                    return made
                # Deleted, or deleted and made again under its name.
                _PROFILES.pop(name, None)
        with api.writer() as session:
            dp = dp_db.find_groups_by_name(session, name)
            _remember(dp)
            return _insert(session, dp['id'], plan(dp), project_id,
                           dp['name'])
    except db_exc.DBReferenceError:
        # The profile was deleted under us (a database without SQLite's
        # up-front write lock).
        _PROFILES.pop(name, None)
        raise exception.not_found('Device Profile', name=name)


_INSERT = api.Prepared(ARQ.insert())


@functools.lru_cache(maxsize=64)
def _created(count):
    """The rows of `count` new ARQs (bound `uuid_<i>`), in id order."""
    return api.Prepared(_SELECT.where(api.in_(ARQ.c.uuid, 'uuid', count))
                        .order_by(ARQ.c.id))


# The columns an ARQ is created with (the others take their defaults).
_INSERTED = ('uuid', 'state', 'device_profile_id', 'device_profile_group_id',
             'project_id')
# Rows per INSERT ... RETURNING: 7 parameters each (with the defaults),
# well below the fewest a statement may have (SQLite's 32766, since 3.32;
# its RETURNING needs 3.35).
_BATCH = 500


# What the database gives a new ARQ: the rest of its row is what the
# INSERT wrote, or NULL (_NEW). Fewer columns back is less to parse per
# result (PyMySQL decodes every column's description in Python).
_MADE = (ARQ.c.id, ARQ.c.uuid, ARQ.c.created_at)
_NEW = {'hostname': None, 'device_rp_uuid': None, 'instance_uuid': None,
        'updated_at': None, 'bind_failure': None,
        'attach_handle_uuid': None, 'attach_handle_type': None,
        'attach_handle_info': None}


@functools.lru_cache(maxsize=64)
def _inserting(count):
    """One INSERT of `count` ARQs (bound `<column>_<i>`) that gives back
    their _MADE columns.
    """
    return api.Prepared(ARQ.insert().values([
        {c: sa.bindparam('%s_%d' % (c, i)) for c in _INSERTED}
        for i in range(count)]).returning(*_MADE))


# An ARQ made by a checked INSERT: what _INSERTED holds but its profile's
# id, which the INSERT takes from the profile's row, and the columns
# whose default it would otherwise not get.
_CHECKED = ('uuid', 'state', 'device_profile_group_id', 'project_id',
            'created_at', 'event_pending')


@functools.lru_cache(maxsize=_CHECKED_MAX)
def _inserting_checked(count):
    """One INSERT of `count` ARQs (bound `<column>_<i>`) of the profile
    whose id and uuid are bound as `dp_id` and `dp_uuid`: an INSERT ...
    SELECT from that profile's row, which writes nothing when no row has
    both. It gives back their _MADE columns where the database can.
    """
    selects = [
        sa.select(*(sa.bindparam('%s_%d' % (c, i), type_=ARQ.c[c].type)
                    for c in _CHECKED), DP.c.id)
        .where(DP.c.id == sa.bindparam('dp_id'),
               DP.c.uuid == sa.bindparam('dp_uuid'))
        for i in range(count)]
    insert = ARQ.insert().from_select(
        _CHECKED + ('device_profile_id',),
        selects[0] if count == 1 else sa.union_all(*selects),
        include_defaults=False)
    return (api.Prepared(insert.returning(*_MADE)), api.Prepared(insert))


def _insert_checked(session, dp, counts, project_id):
    """_insert() of the ARQs of a remembered profile `dp` if it is still
    the stored one; else None, nothing written.
    """
    values = _new(counts, project_id=project_id,
                  created_at=models.utcnow(), event_pending=False)
    if not values:
        return []
    params = {'%s_%d' % (k, i): v[k] for i, v in enumerate(values)
              for k in _CHECKED}
    params['dp_id'] = dp['id']
    params['dp_uuid'] = dp['uuid']
    returning, plain = _inserting_checked(len(values))
    if session.insert_returning:
        made = session.execute(returning, params).all()
        if len(made) != len(values):
            return None
        return _made(values, made, dp['name'])
    if session.execute(plain, params).rowcount != len(values):
        return None
    return _read_back(session, values)


def _new(counts, **columns):
    """The values of counts[g] new ARQs for each group index g, in group
    order: each a new uuid, state Initial, its group and `columns`.
    """
    return [dict(columns, uuid=identifiers.new_uuid(), state='Initial',
                 device_profile_group_id=group_id)
            for group_id, count in enumerate(counts) for _ in range(count)]


def _read_back(session, values):
    """The ARQs just inserted with `values`, as a read gives them (a
    database without INSERT ... RETURNING).
    """
    uuids = [v['uuid'] for v in values]
    return [_decode(r) for r in api.rows(session.execute(
        _created(len(uuids)), api.in_params('uuid', uuids)))]


def _made(values, made, device_profile_name):
    """The new ARQs, in id order (which is group order), from the values
    inserted and the (id, uuid, created_at) RETURNING gave in no
    promised order.
    """
    by_uuid = {v['uuid']: v for v in values}
    rows = []
    for id_, uuid, created_at in sorted(made):
        row = {'id': id_, 'uuid': uuid, 'state': 'Initial',
               'device_profile_group_id':
                   by_uuid[uuid]['device_profile_group_id'],
               'project_id': by_uuid[uuid]['project_id'],
               'created_at': created_at,
               'device_profile_name': device_profile_name}
        row.update(_NEW)
        rows.append(_decode(row))
    return rows


_NAME_OF = api.Prepared(sa.select(DP.c.name).where(
    DP.c.id == sa.bindparam('dp_id')))


def _insert(session, device_profile_id, counts, project_id,
            device_profile_name=None):
    """The new ARQs, in id order (which is group order), as a read gives
    them; device_profile_name: their profile's, if the caller has read it.
    """
    values = _new(counts, device_profile_id=device_profile_id,
                  project_id=project_id)
    if not values:
        return []
    if not session.insert_returning:
        session.execute(_INSERT, values)
        return _read_back(session, values)
    if device_profile_name is None:
        device_profile_name = session.execute(
            _NAME_OF, {'dp_id': device_profile_id}).scalar()
        if device_profile_name is None:
            raise _no_profile(device_profile_id)
    made = []
    for start in range(0, len(values), _BATCH):
        batch = values[start:start + _BATCH]
        made.extend(session.execute(
            _inserting(len(batch)),
            {'%s_%d' % (k, i): v[k] for i, v in enumerate(batch)
             for k in _INSERTED}).all())
    return _made(values, made, device_profile_name)


@functools.lru_cache(maxsize=None)
def _list_statement(by_project, by_instance, by_states, after_marker,
                    limited):
    """The list query for one combination of filters, built once."""
    query = _in_project(_SELECT, by_project)
    if by_instance:
        query = query.where(
            ARQ.c.instance_uuid == sa.bindparam('instance_uuid'))
    if by_states:
        query = query.where(
            ARQ.c.state.in_(sa.bindparam('states', expanding=True)))
    return api.page(query, ARQ, after_marker, limited)


def list_(project_id=None, instance_uuid=None, states=None, limit=None,
          marker=None):
    """One query (two with a marker): ARQs with their profile's name and
    attach handle, in id order.
    """
    if marker is None:
        # One statement, which needs no transaction (api.read()).
        return _listed(None, project_id, instance_uuid, states, limit, None)
    with api.reader() as session:
        return _listed(session, project_id, instance_uuid, states, limit,
                       marker)


def _listed(session, project_id, instance_uuid, states, limit, marker):
    params = _with_project(api.bounds(session, ARQ, limit, marker),
                           project_id)
    if instance_uuid is not None:
        params['instance_uuid'] = instance_uuid
    if states is not None:
        params['states'] = list(states)
    query = _list_statement(project_id is not None,
                            instance_uuid is not None,
                            states is not None, marker is not None,
                            limit is not None)
    result = api.read(query, params) if session is None else \
        session.execute(query, params)
    return [_decode(r) for r in api.rows(result)]


def instance_unresolved(instance_uuid, project_id=None):
    """Whether any of the instance's ARQs is still being bound."""
    with api.reader() as session:
        query = _in_project(sa.select(ARQ.c.id), project_id is not None).where(
            ARQ.c.instance_uuid == instance_uuid,
            ARQ.c.state.not_in(RESOLVED_STATES)).limit(1)
        return session.execute(
            query, _with_project({}, project_id)).first() is not None


@functools.lru_cache(maxsize=None)
def _get_statement(by_project):
    return api.Prepared(_in_project(
        _SELECT.where(ARQ.c.uuid == sa.bindparam('uuid')), by_project))


def get(uuid, project_id=None):
    row = api.read(_get_statement(project_id is not None), _with_project(
        {'uuid': uuid}, project_id)).mappings().first()
    if row is None:
        raise exception.not_found('ExtArq', uuid=uuid)
    return _decode(row)


@functools.lru_cache(maxsize=256)
def _locking_read(by_project, count):
    query = sa.select(
        ARQ.c.id, ARQ.c.uuid, ARQ.c.state, ARQ.c.instance_uuid,
        ARQ.c.attach_handle_id).where(api.in_(ARQ.c.uuid, 'uuid', count))
    return api.Prepared(_in_project(query, by_project).with_for_update())


def _require_all(session, uuids, project_id):
    """Lock and return {uuid: row} for all uuids, or raise 404."""
    params = _with_project(api.in_params('uuid', uuids), project_id)
    found = {r['uuid']: r for r in session.execute(
        _locking_read(project_id is not None, len(uuids)),
        params).mappings()}
    for uuid in uuids:
        if uuid not in found:
            raise exception.not_found('ExtArq', uuid=uuid)
    return found


@functools.lru_cache(maxsize=None)
def _transition_statement(target, allowed, keys):
    """UPDATE of one ARQ (bound `arq_uuid`) from `allowed` to `target`, with
    the columns `keys` (bound as `v_<key>`), built once per shape. The
    states are bound one by one (`allowed_<i>`): an IN of a Python list
    would be expanded by SQLAlchemy on every execution.
    """
    return api.Prepared(ARQ.update().where(
        ARQ.c.uuid == sa.bindparam('arq_uuid'),
        api.in_(ARQ.c.state, 'allowed', len(allowed))
    ).values(state=target, **{k: sa.bindparam('v_' + k) for k in keys}))


_STATE_OF = api.Prepared(sa.select(ARQ.c.state).where(
    ARQ.c.uuid == sa.bindparam('arq_uuid')))


def _transition(session, uuid, target, allowed, values, current):
    """Move one ARQ to `target` if it is in `allowed`, else ARQBadState."""
    params = api.in_params('allowed', allowed)
    params.update(('v_' + k, v) for k, v in values.items())
    params['arq_uuid'] = uuid
    result = session.execute(
        _transition_statement(target, tuple(allowed), tuple(sorted(values))),
        params)
    if result.rowcount != 1:
        state = session.execute(_STATE_OF, {'arq_uuid': uuid}).scalar()
        raise exception.ARQBadState(state=state or current, uuid=uuid,
                                    expected=', '.join(allowed))


@functools.lru_cache(maxsize=64)
def _instance_taken(count):
    """An ARQ of any of `count` instances (bound `instance_<i>`)."""
    return api.Prepared(sa.select(ARQ.c.instance_uuid).where(
        api.in_(ARQ.c.instance_uuid, 'instance', count)).limit(1))


@functools.lru_cache(maxsize=64)
def _hosts_of_providers(count):
    """The host of the device behind each of `count` resource providers
    (bound `rp_<i>`): the agent of that host reported both, so no
    Placement round trip is needed to know it.
    """
    return api.Prepared(sa.select(
        DEPLOYABLE.c.rp_uuid, DEVICE.c.hostname
    ).select_from(DEPLOYABLE.join(DEVICE,
                                  DEPLOYABLE.c.device_id == DEVICE.c.id)
                  ).where(api.in_(DEPLOYABLE.c.rp_uuid, 'rp', count)))


def _require_hosts_own_providers(session, bindings):
    """PatchError unless each binding's hostname is the host of the device
    behind its device_rp_uuid. A provider no device has is left to the
    conductor (which records BindFailed, as Cyborg does).
    """
    providers = sorted({b['device_rp_uuid'] for b in bindings.values()})
    hosts = dict(session.execute(_hosts_of_providers(len(providers)),
                                 api.in_params('rp', providers)).all())
    for uuid, binding in sorted(bindings.items()):
        host = hosts.get(binding['device_rp_uuid'])
        if host is not None and host != binding['hostname']:
            raise exception.PatchError(
                reason='hostname %s does not own device_rp_uuid %s (ARQ %s): '
                       'that provider is a device of host %s'
                       % (exception.excerpt(binding['hostname']),
                          binding['device_rp_uuid'], uuid, host))


@api.retry_on_deadlock
def start_bind(bindings, project_id=None):
    """Atomically move every ARQ of one PATCH to BindStarted.

    bindings: {arq_uuid: {hostname, device_rp_uuid, instance_uuid,
    project_id?}}. All or none: a bad state anywhere, or a hostname that
    is not the host of its device_rp_uuid, rolls everything back.
    """
    with api.writer() as session:
        found = _require_all(session, list(bindings), project_id)
        instances = sorted({b['instance_uuid'] for b in bindings.values()})
        already = session.execute(
            _instance_taken(len(instances)),
            api.in_params('instance', instances)).scalar()
        if already is not None:
            raise exception.PatchError(
                reason='Instance %s already has accelerator requests. Cannot '
                       'bind additional ARQs.' % already)
        _require_hosts_own_providers(session, bindings)
        # The bind's deadline (Nova's arq_binding_timeout) counts from now;
        # no conductor holds it until one claims it.
        started = models.utcnow()
        for uuid, values in bindings.items():
            _transition(session, uuid, 'BindStarted', BINDABLE_STATES,
                        dict(values, bind_failure=None, bind_owner=None,
                             bind_started_at=started),
                        found[uuid]['state'])


@api.retry_on_deadlock
def unbind(uuids, project_id=None):
    """Move ARQs to Unbound, clearing their binding and freeing handles.

    Returns the released handles (for the agents' release()).
    """
    with api.writer() as session:
        found = _require_all(session, uuids, project_id)
        for uuid in uuids:
            _transition(session, uuid, 'Unbound', UNBINDABLE_STATES,
                        {'hostname': None, 'device_rp_uuid': None,
                         'instance_uuid': None, 'attach_handle_id': None,
                         'deployable_id': None, 'bind_failure': None,
                         'event_pending': False},
                        found[uuid]['state'])
        return _free_handles(session, found.values())


def _free_handles(session, arq_rows):
    """Mark the ARQs' attach handles free; return what the agents must
    release (see released_handles).
    """
    return free_handles(session, [r['attach_handle_id'] for r in arq_rows
                                  if r['attach_handle_id'] is not None])


def free_handles(session, handle_ids):
    if not handle_ids:
        return []
    released = released_handles(session, handle_ids)
    session.execute(_freeing(len(handle_ids)),
                    api.in_params('id', handle_ids))
    for handle in released:
        # What prepare() recorded described the binding that just ended.
        identity = records.handle_identity(handle['attach_info'])
        if identity != json.loads(handle['attach_info']):
            session.execute(SET_ATTACH_INFO, {
                'h_uuid': handle['uuid'],
                'info': records.canonical_json(identity)})
    return released


@functools.lru_cache(maxsize=64)
def _freeing(count):
    return api.Prepared(AH.update().where(api.in_(AH.c.id, 'id', count))
                        .values(in_use=False))


# The attach info (bound `info`) of the handle bound as `h_uuid`.
SET_ATTACH_INFO = api.Prepared(AH.update().where(
    AH.c.uuid == sa.bindparam('h_uuid')).values(
        attach_info=sa.bindparam('info')))


@functools.lru_cache(maxsize=64)
def _releasing(count):
    return api.Prepared(sa.select(
        AH.c.uuid, AH.c.attach_type, AH.c.attach_info,
        DEPLOYABLE.c.name.label('deployable_name'),
        DEPLOYABLE.c.driver_name, DEVICE.c.hostname)
        .select_from(AH.join(DEPLOYABLE, AH.c.deployable_id
                             == DEPLOYABLE.c.id)
                     .join(DEVICE, DEPLOYABLE.c.device_id == DEVICE.c.id))
        .where(api.in_(AH.c.id, 'id', count)))


def released_handles(session, handle_ids):
    """Handle, deployable and host of each handle: what an agent's
    release() needs.
    """
    return api.rows(session.execute(_releasing(len(handle_ids)),
                                    api.in_params('id', handle_ids)))


@functools.lru_cache(maxsize=256)
def _deleting_listed(by_project, bound_too, count):
    """One DELETE of the listed ARQs (bound `uuid_<i>`), of one project
    and unbound unless asked, that gives back what freeing their attach
    handles needs.
    """
    query = _in_project(
        ARQ.delete().where(api.in_(ARQ.c.uuid, 'uuid', count)), by_project)
    if not bound_too:
        query = query.where(ARQ.c.instance_uuid.is_(None))
    return api.Prepared(query.returning(ARQ.c.id, ARQ.c.attach_handle_id))


# The DELETE of one listed ARQ (bound `uuid`) that holds no attach handle,
# of one project and unbound unless asked: nothing to free after it.
_DELETING_FREE = {
    (by_project, bound_too): api.Prepared(_in_project(ARQ.delete().where(
        ARQ.c.uuid == sa.bindparam('uuid'), ARQ.c.attach_handle_id.is_(None),
        *(() if bound_too else (ARQ.c.instance_uuid.is_(None),))),
        by_project))
    for by_project in (False, True) for bound_too in (False, True)}


class _NotAll(Exception):
    """Some listed ARQ was not deleted: roll the rest back."""


@api.retry_on_deadlock
def delete_by_uuids(uuids, project_id=None, may_delete_bound=False):
    """Delete the listed ARQs, all or none (404 if any is missing, 403 if
    one is bound and that is not allowed).

    Where DELETE ... RETURNING is had (SQLite 3.35+, PostgreSQL, MariaDB),
    one statement deletes them when all are there to delete: a DELETE and
    its COMMIT, where locking the rows first took one more round trip.
    When it deletes fewer than listed, it is rolled back and the locking
    read says why.

    One ARQ that holds no attach handle (Nova's cleanup of a boot that
    did not bind) is one DELETE with nothing after it, a lone writer: one
    round trip on MariaDB and PostgreSQL. When it deletes nothing (no
    such ARQ, or one bound, or one with a handle to free), the above
    runs.
    """
    if len(uuids) == 1:
        with api.writer(lone=True) as session:
            if session.execute(
                    _DELETING_FREE[project_id is not None, may_delete_bound],
                    _with_project({'uuid': uuids[0]}, project_id)).rowcount:
                return []
    try:
        with api.writer() as session:
            if not session.delete_returning:
                return _delete_listed(session, uuids, project_id,
                                      may_delete_bound)
            gone = session.execute(_deleting_listed(
                project_id is not None, may_delete_bound, len(uuids)),
                _with_project(api.in_params('uuid', uuids),
                              project_id)).mappings().all()
            if len(gone) != len(uuids):
                raise _NotAll()
            return _free_handles(session, gone)
    except _NotAll:
        pass
    with api.writer() as session:
        return _delete_listed(session, uuids, project_id, may_delete_bound)


def _delete_listed(session, uuids, project_id, may_delete_bound):
    """delete_by_uuids() with a locking read of the rows first."""
    found = _require_all(session, uuids, project_id)
    if not may_delete_bound:
        for uuid in uuids:
            instance = found[uuid]['instance_uuid']
            if instance is not None:
                raise exception.Forbidden(
                    'ARQ %s is bound to instance %s. Use the Compute API '
                    'to manage instance accelerators.' % (uuid, instance))
    return _delete(session, found.values())


_OF_INSTANCE = ARQ.c.instance_uuid == sa.bindparam('instance_uuid')
# The ARQs of the instance bound as `instance_uuid`, by whether they are of
# the project bound as `project_id`: their id and attach handle, given
# back by the DELETE of them, or locked by a read before it.
_DELETING_OF_INSTANCE = {
    by_project: api.Prepared(_in_project(
        ARQ.delete().where(_OF_INSTANCE), by_project).returning(
            ARQ.c.id, ARQ.c.attach_handle_id))
    for by_project in (False, True)}
_LOCKING_OF_INSTANCE = {
    by_project: api.Prepared(_in_project(
        sa.select(ARQ.c.id, ARQ.c.attach_handle_id).where(_OF_INSTANCE),
        by_project).with_for_update())
    for by_project in (False, True)}


@api.retry_on_deadlock
def delete_by_instance(instance_uuid, project_id=None):
    """Delete all ARQs of an instance; deleting none is not an error."""
    params = _with_project({'instance_uuid': instance_uuid}, project_id)
    by_project = project_id is not None
    with api.writer() as session:
        if session.delete_returning:
            # One statement deletes them and says which handles to free.
            return _free_handles(session, session.execute(
                _DELETING_OF_INSTANCE[by_project], params).mappings().all())
        return _delete(session, session.execute(
            _LOCKING_OF_INSTANCE[by_project], params).mappings().all())


def _delete(session, arq_rows):
    """Delete the rows; returns the released handles."""
    arq_rows = list(arq_rows)
    if not arq_rows:
        return []
    session.execute(_deleting(len(arq_rows)),
                    api.in_params('id', [r['id'] for r in arq_rows]))
    return _free_handles(session, arq_rows)


@functools.lru_cache(maxsize=64)
def _deleting(count):
    return api.Prepared(ARQ.delete().where(api.in_(ARQ.c.id, 'id', count)))
