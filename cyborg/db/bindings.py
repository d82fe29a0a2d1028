# SPDX-License-Identifier: Apache-2.0
"""The conductor's side of binding an ARQ: claim an attach handle, record
the outcome, and remember which outcomes Nova has not heard of yet.

Every step is a conditional statement, so two conductors (or a conductor
re-driving after a crash) can never hand one handle to two ARQs nor move an
ARQ that someone else already moved. The conductor works in batches: one
transaction claims the handles of every ARQ that arrived meanwhile, one
records the outcomes of every prepare that ended meanwhile; each ARQ's
outcome in a batch is its own.
"""

import datetime
import functools
import json

from oslo_db import exception as db_exc
import sqlalchemy as sa

from cyborg.db import api
from cyborg.db import arqs
from cyborg.db import models

ARQ = models.ExtendedAcceleratorRequest.__table__
AH = models.AttachHandle.__table__
DEPLOYABLE = models.Deployable.__table__
DEVICE = models.Device.__table__
DP = models.DeviceProfile.__table__

BIND_STATUS = {'Bound': 'completed', 'BindFailed': 'failed',
               'Deleting': 'failed'}


def transient(exc):
    """A DB error that may pass (a busy SQLite, a lost connection), as
    opposed to a constraint or a value the database refuses (too long for
    its column, out of range), which will fail again. (retry runs only
    some of them again at once: not those that waited out a lock timeout.)
    """
    return (isinstance(exc, db_exc.DBError)
            and not isinstance(exc, (db_exc.DBDuplicateEntry,
                                     db_exc.DBReferenceError,
                                     db_exc.DBConstraintError,
                                     db_exc.DBDataError)))


def _worth_running_again(exc):
    return transient(exc) and not api.waited_out(exc)


# Run again on a transient DB error (a deadlock, a lost connection), 0.2,
# 0.4, ... 3.2 s apart, then raise it; not a statement that waited out its
# lock timeout (a MariaDB lock wait, a busy SQLite), which would wait as
# long again each time (six runs of MariaDB's default 50 s, or of SQLite's
# 30 s busy timeout, outlast Nova's arq_binding_timeout): the caller's
# next pass (the sweep, the next heartbeat) runs it again.
retry = api.retrying(_worth_running_again, attempts=6, first_wait=0.2)


class BindError(Exception):
    """The ARQ cannot be bound; the message is the recorded reason."""


class Gone(Exception):
    """The ARQ left BindStarted meanwhile (unbound or deleted)."""


def _layout(*tables):
    """Where each table's columns are in a row of all their columns, table
    after table: [(column names, start, end)].
    """
    parts, start = [], 0
    for table in tables:
        names = tuple(c.name for c in table.c)
        parts.append((names, start, start + len(names)))
        start += len(names)
    return parts


# A claim row: every column of the ARQ, its deployable and device, in this
# order, then its profile's JSON. Read by position: Prepared rows are
# keyed by label, and the three tables share column names (id, uuid,
# created_at, ...).
_ARQ_PART, _DEPLOYABLE_PART, _DEVICE_PART = _CLAIM_PARTS = _layout(
    ARQ, DEPLOYABLE, DEVICE)
_PROFILE_JSON = _DEVICE_PART[2]
_ARQ_ID = _ARQ_PART[1] + _ARQ_PART[0].index('id')
_DEPLOYABLE_ID = _DEPLOYABLE_PART[1] + _DEPLOYABLE_PART[0].index('id')


@functools.lru_cache(maxsize=64)
def _claim_rows(count):
    """The ARQs bound as `uuid_0` ... `uuid_<count-1>` with their
    deployable, device and profile (_CLAIM_PARTS), in one round trip; one
    statement per batch size, compiled once.
    """
    return api.Prepared(
        sa.select(*ARQ.c, *DEPLOYABLE.c, *DEVICE.c, DP.c.profile_json)
        .set_label_style(sa.LABEL_STYLE_TABLENAME_PLUS_COL)
        .select_from(
            ARQ.outerjoin(DEPLOYABLE,
                          DEPLOYABLE.c.rp_uuid == ARQ.c.device_rp_uuid)
            .outerjoin(DEVICE, DEVICE.c.id == DEPLOYABLE.c.device_id)
            .outerjoin(DP, DP.c.id == ARQ.c.device_profile_id))
        .where(api.in_(ARQ.c.uuid, 'uuid', count)))


def _claim_order(row):
    """Deployables in id order (those of unknown providers first), then
    ARQs in id order.
    """
    return row[_DEPLOYABLE_ID] or 0, row[_ARQ_ID]


@retry
def claim_handles(arq_uuids, picker, owner=None):
    """Give each BindStarted ARQ a free attach handle of the deployable
    behind its device_rp_uuid (or the one it already holds, when
    re-driven), all in one transaction, and make `owner` (the claiming
    conductor, cyborg.db.conductors) its holder. An ARQ another conductor
    holds is Gone to this one: its holder finishes it, or a peer takes it
    over once the holder stops heartbeating.

    picker(driver_name) gives the driver's choice among free handles,
    pick(deployable, request_group, handles) → the suitable handles in
    the order to try them (the binder passes cyborg.drivers.handle_picker;
    this layer knows no drivers).

    Returns {uuid: {arq, deployable, device, handle} | BindError | Gone}.
    Deployables are visited in id order, so two conductors claiming at
    once lock handle rows in the same order.

    Every statement is Prepared, so the transaction stays on the driver's
    connection from BEGIN to COMMIT (api.Session).
    """
    outcomes = {uuid: Gone(uuid) for uuid in arq_uuids}
    if not outcomes:
        return outcomes
    with api.writer() as session:
        rows = session.execute(_claim_rows(len(outcomes)),
                               api.in_params('uuid', list(outcomes))).all()
        rows.sort(key=_claim_order)
        for row in rows:
            claimed = _split(row)
            uuid = claimed[0]['uuid']
            try:
                outcomes[uuid] = _claim(session, claimed, picker, owner)
            except (BindError, Gone) as e:
                outcomes[uuid] = e
    return outcomes


def _split(row):
    """A claim row as (arq, deployable, device) dicts by column name and
    the profile's JSON. The deployable's and device's values are all None
    when the ARQ's provider has none.
    """
    arq, dep, device = (dict(zip(names, row[start:end]))
                        for names, start, end in _CLAIM_PARTS)
    return arq, dep, device, row[_PROFILE_JSON]


def claim_handle(arq_uuid, picker, owner=None):
    """claim_handles() of one ARQ: its claim, or raises BindError/Gone."""
    outcome = claim_handles([arq_uuid], picker, owner)[arq_uuid]
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def _claim(session, claimed, picker, owner):
    """The claim of one ARQ of a _split() row, or BindError or Gone."""
    arq, dep, device, profile_json = claimed
    arq_uuid = arq['uuid']
    if arq['state'] != 'BindStarted' or \
            arq['bind_owner'] not in (None, owner):
        raise Gone(arq_uuid)
    if dep['id'] is None:
        raise BindError('No device is known for resource provider %s'
                        % arq['device_rp_uuid'])
    if device['status'] != 'enabled':
        raise BindError('Device %s on %s is in maintenance'
                        % (device['uuid'], device['hostname']))
    group = _request_group(profile_json, arq['device_profile_group_id'])
    held = arq['attach_handle_id']
    handle_id = held or _take_free_handle(
        session, dep, group, picker(dep['driver_name']))
    # Only if no other binder of this ARQ (a re-drive racing the queued
    # message) claimed a handle since we read it: else we give back the
    # handle we took and leave the ARQ to it.
    params = {'arq_uuid': arq_uuid, 'handle_id': handle_id,
              'deployable_id': dep['id'], 'owner': owner}
    if held is not None:
        params['held'] = held
    updated = session.execute(_RECLAIM if held is not None else _CLAIM,
                              params)
    if updated.rowcount != 1:
        if held is None:
            session.execute(_SET_IN_USE, {'handle_id': handle_id,
                                          'in_use': False})
        raise Gone(arq_uuid)
    handle = session.execute(_HANDLE, {'handle_id': handle_id})
    return {'arq': arq, 'deployable': dep, 'device': device,
            'handle': dict(zip(handle.keys(), handle.one()),
                           request_group=group)}


# Conditional on the handle read and on no other conductor holding the
# ARQ (a peer that took it over from us while we were slow keeps it).
_CLAIM, _RECLAIM = (
    api.Prepared(ARQ.update().where(
        ARQ.c.uuid == sa.bindparam('arq_uuid'), ARQ.c.state == 'BindStarted',
        held, sa.or_(ARQ.c.bind_owner.is_(None),
                     ARQ.c.bind_owner == sa.bindparam('owner'))
    ).values(
        attach_handle_id=sa.bindparam('handle_id'),
        deployable_id=sa.bindparam('deployable_id'),
        bind_owner=sa.bindparam('owner')))
    for held in (ARQ.c.attach_handle_id.is_(None),
                 ARQ.c.attach_handle_id == sa.bindparam('held')))
_HANDLE = api.Prepared(sa.select(AH).where(
    AH.c.id == sa.bindparam('handle_id')))
_SET_IN_USE = api.Prepared(AH.update().where(
    AH.c.id == sa.bindparam('handle_id')).values(
    in_use=sa.bindparam('in_use')))


def _request_group(profile_json, index):
    """The device-profile group the ARQ was made from: what the driver
    needs to know to prepare the handle (e.g. which MIG size).
    """
    groups = json.loads(profile_json)['groups'] if profile_json else []
    return groups[index] if index < len(groups) else {}


def _take_free_handle(session, dep, group, pick, attempts=5):
    """Flip one free handle that suits the request to in_use; a concurrent
    taker makes the conditional UPDATE match nothing and we try the next
    one.

    The free handles are read with a locking read: under MariaDB/MySQL's
    REPEATABLE READ a plain SELECT keeps answering from the transaction's
    snapshot, so a handle a concurrent binder took meanwhile would look
    free on every attempt and the bind would fail with handles to spare.
    """
    free = []
    for _ in range(attempts):
        free = session.execute(_FREE_HANDLES,
                               {'deployable_id': dep['id']}).mappings().all()
        candidates = pick(dep, group, [dict(h) for h in free])
        if not candidates:
            break
        taken = session.execute(_TAKE, {'handle_id': candidates[0]['id']})
        if taken.rowcount == 1:
            return candidates[0]['id']
    total = session.execute(_HANDLE_COUNT,
                            {'deployable_id': dep['id']}).scalar()
    raise BindError('No free attach handle for this request on deployable '
                    '%s (%d in use)' % (dep['name'], total - len(free)))


_FREE_HANDLES = api.Prepared(
    sa.select(AH.c.id, AH.c.attach_type, AH.c.attach_info).where(
        AH.c.deployable_id == sa.bindparam('deployable_id'),
        AH.c.in_use == sa.false()).order_by(AH.c.id).with_for_update())
_TAKE = api.Prepared(AH.update().where(
    AH.c.id == sa.bindparam('handle_id'),
    AH.c.in_use == sa.false()).values(in_use=True))
_HANDLE_COUNT = api.Prepared(sa.select(sa.func.count()).where(
    AH.c.deployable_id == sa.bindparam('deployable_id')))


@retry
def update_handle_info(handle_uuid, info):
    """Record attach info an agent re-made (e.g. a MIG UUID)."""
    with api.writer() as session:
        _merge_info(session, handle_uuid, info)


def _merge_info(session, handle_uuid, info):
    current = session.execute(_INFO, {'h_uuid': handle_uuid}).scalar()
    merged = dict(json.loads(current or '{}'), **info)
    session.execute(arqs.SET_ATTACH_INFO, {
        'h_uuid': handle_uuid,
        'info': json.dumps(merged, sort_keys=True, separators=(', ', ': '))})


_INFO = api.Prepared(sa.select(AH.c.attach_info).where(
    AH.c.uuid == sa.bindparam('h_uuid')))


@retry
def finish_many(reasons, infos=None):
    """Record many binds' outcomes in one transaction: BindStarted → Bound
    (reason None) or BindFailed (with the reason), each with its event to
    Nova marked pending.

    reasons: {arq uuid: None | reason}; infos: {arq uuid: (handle uuid,
    what the driver's prepare() learnt)}, recorded for the ARQs that end
    Bound. A failed ARQ's handle is freed. Returns (the freed handles, for
    release; the uuids no longer BindStarted, which are left alone).
    """
    infos = infos or {}
    released, gone = [], []
    with api.writer() as session:
        for uuid, reason in reasons.items():
            try:
                released += _finish(session, uuid, reason)
            except Gone:
                gone.append(uuid)
                continue
            if reason is None and uuid in infos:
                _merge_info(session, *infos[uuid])
    return released, gone


def finish(arq_uuid, reason=None):
    """finish_many() of one ARQ: the freed handles, or raises Gone."""
    released, gone = finish_many({arq_uuid: reason})
    if gone:
        raise Gone(arq_uuid)
    return released


_HELD = api.Prepared(sa.select(ARQ.c.attach_handle_id).where(
    ARQ.c.uuid == sa.bindparam('arq_uuid'), ARQ.c.state == 'BindStarted'
).with_for_update())
_BOUND = api.Prepared(ARQ.update().where(
    ARQ.c.uuid == sa.bindparam('arq_uuid'), ARQ.c.state == 'BindStarted'
).values(state='Bound', event_pending=True, bind_failure=None))
_FAILED = api.Prepared(ARQ.update().where(
    ARQ.c.uuid == sa.bindparam('arq_uuid'), ARQ.c.state == 'BindStarted'
).values(state='BindFailed', event_pending=True,
         bind_failure=sa.bindparam('reason'), attach_handle_id=None,
         deployable_id=None))


def _finish(session, arq_uuid, reason):
    """Record one outcome; the handles to release, or Gone."""
    if reason is None:
        # A bound ARQ keeps its handle, so there is nothing to read
        # first: the conditional UPDATE alone says whether the ARQ was
        # still BindStarted (and locks its row, as a locking read would).
        if session.execute(_BOUND, {'arq_uuid': arq_uuid}).rowcount != 1:
            raise Gone(arq_uuid)
        return []
    row = session.execute(_HELD, {'arq_uuid': arq_uuid}).first()
    if row is None:
        raise Gone(arq_uuid)
    session.execute(_FAILED, {'arq_uuid': arq_uuid, 'reason': reason[:255]})
    held = row[0]
    if held is not None:
        return arqs.free_handles(session, [held])
    return []


def bind_started(older_than=None, unowned=False):
    """ARQs in BindStarted, grouped by instance; with older_than
    (seconds), only those Nova asked to bind that long ago (what `arq
    list-stuck` and cyborg-status report); with unowned, only those no
    conductor holds (their bind message is still queued, or was lost).
    """
    params = {}
    if older_than is not None:
        params['cutoff'] = (datetime.datetime.now(datetime.timezone.utc)
                            .replace(tzinfo=None)
                            - datetime.timedelta(seconds=older_than))
    by_instance = {}
    for uuid, instance in api.read(
            _started_query(older_than is not None, unowned), params):
        by_instance.setdefault(instance, []).append(uuid)
    return by_instance


@functools.lru_cache(maxsize=None)
def _started_query(by_age, unowned):
    """bind_started()'s query, one per combination of filters; the age's
    cutoff is bound as `cutoff`.
    """
    query = sa.select(ARQ.c.uuid, ARQ.c.instance_uuid).where(
        ARQ.c.state == 'BindStarted')
    if by_age:
        query = query.where(started_at() < sa.bindparam(
            'cutoff', type_=ARQ.c.bind_started_at.type))
    if unowned:
        query = query.where(ARQ.c.bind_owner.is_(None))
    return api.Prepared(query.order_by(ARQ.c.id))


def started_at():
    """When the bind started: rows from before revision 0006 have no
    bind_started_at, and their last update stands in for it.
    """
    return sa.func.coalesce(ARQ.c.bind_started_at, ARQ.c.updated_at,
                            ARQ.c.created_at)


def pending_events(uuids=None):
    """Nova events not yet delivered: [{name, server_uuid, tag, status}].
    One query, which needs no transaction (api.read()).
    """
    if uuids is None:
        rows = api.read(_pending(None))
    else:
        uuids = list(uuids)
        rows = api.read(_pending(len(uuids)), api.in_params('uuid', uuids))
    return [{'name': 'accelerator-request-bound', 'server_uuid': instance,
             'tag': uuid, 'status': BIND_STATUS.get(state, 'failed')}
            for uuid, instance, state in rows]


@functools.lru_cache(maxsize=64)
def _pending(count):
    """pending_events()'s query; of the ARQs bound as `uuid_<i>` unless
    count is None.
    """
    query = sa.select(ARQ.c.uuid, ARQ.c.instance_uuid, ARQ.c.state).where(
        ARQ.c.event_pending == sa.true(), ARQ.c.instance_uuid.is_not(None))
    if count is not None:
        query = query.where(api.in_(ARQ.c.uuid, 'uuid', count))
    return api.Prepared(query.order_by(ARQ.c.id))


@retry
def events_delivered(uuids):
    # A delivery after an outage of Nova may hold thousands: several
    # UPDATEs (api.in_chunks), in one transaction.
    uuids = list(uuids)
    if not uuids:
        return
    with api.writer() as session:
        for count, params in api.in_chunks('uuid', uuids):
            session.execute(_delivering(count), params)


@functools.lru_cache(maxsize=64)
def _delivering(count):
    """events_delivered()'s UPDATE of the ARQs bound as `uuid_<i>`."""
    return api.Prepared(ARQ.update().where(
        api.in_(ARQ.c.uuid, 'uuid', count)).values(event_pending=False))
