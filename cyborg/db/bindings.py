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
import time

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
    """A DB error worth retrying (a busy SQLite, a lost connection), as
    opposed to a constraint that will fail again.
    """
    return (isinstance(exc, db_exc.DBError)
            and not isinstance(exc, (db_exc.DBDuplicateEntry,
                                     db_exc.DBReferenceError,
                                     db_exc.DBConstraintError)))


def retry(fn, attempts=6, interval=0.2):
    """Run fn again on a transient DB error (a deadlock, a busy SQLite, a
    lost connection), waiting 0.2, 0.4, ... 3.2 s between tries, then
    raise the error. Unlike oslo.db's wrap_db_retry it logs nothing: the
    caller says once that the database is unreachable (an outage would
    otherwise print a traceback per call).
    """
    @functools.wraps(fn)
    def retried(*args, **kwargs):
        wait = interval
        for attempt in range(attempts):
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                if attempt == attempts - 1 or not transient(e):
                    raise
            time.sleep(wait)
            wait *= 2
    return retried


class BindError(Exception):
    """The ARQ cannot be bound; the message is the recorded reason."""


class Gone(Exception):
    """The ARQ left BindStarted meanwhile (unbound or deleted)."""


# The ARQs of a batch with their deployable, device and profile, in one
# round trip; built once, so SQLAlchemy reuses its compiled form.
_CLAIM_ROWS = (
    sa.select(ARQ, DEPLOYABLE, DEVICE, DP.c.profile_json)
    .select_from(
        ARQ.outerjoin(DEPLOYABLE, DEPLOYABLE.c.rp_uuid == ARQ.c.device_rp_uuid)
        .outerjoin(DEVICE, DEVICE.c.id == DEPLOYABLE.c.device_id)
        .outerjoin(DP, DP.c.id == ARQ.c.device_profile_id))
    .where(ARQ.c.uuid.in_(sa.bindparam('uuids', expanding=True))))


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
    """
    outcomes = {uuid: Gone(uuid) for uuid in arq_uuids}
    with api.writer() as session:
        rows = session.execute(_CLAIM_ROWS,
                               {'uuids': list(outcomes)}).all()
        rows.sort(key=lambda r: (r._mapping[DEPLOYABLE.c.id] or 0,
                                 r._mapping[ARQ.c.id]))
        for row in rows:
            uuid = row._mapping[ARQ.c.uuid]
            try:
                outcomes[uuid] = _claim(session, row, picker, owner)
            except (BindError, Gone) as e:
                outcomes[uuid] = e
    return outcomes


def claim_handle(arq_uuid, picker, owner=None):
    """claim_handles() of one ARQ: its claim, or raises BindError/Gone."""
    outcome = claim_handles([arq_uuid], picker, owner)[arq_uuid]
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def _claim(session, row, picker, owner):
    arq_uuid = row._mapping[ARQ.c.uuid]
    if row._mapping[ARQ.c.state] != 'BindStarted' or \
            row._mapping[ARQ.c.bind_owner] not in (None, owner):
        raise Gone(arq_uuid)
    arq, dep, device = (_columns(row, table)
                        for table in (ARQ, DEPLOYABLE, DEVICE))
    if dep['id'] is None:
        raise BindError('No device is known for resource provider %s'
                        % arq['device_rp_uuid'])
    if device['status'] != 'enabled':
        raise BindError('Device %s on %s is in maintenance'
                        % (device['uuid'], device['hostname']))
    group = _request_group(row._mapping[DP.c.profile_json],
                           arq['device_profile_group_id'])
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
    handle = session.execute(_HANDLE, {'handle_id': handle_id}
                             ).mappings().one()
    return {'arq': arq, 'deployable': dep, 'device': device,
            'handle': dict(handle, request_group=group)}


# Conditional on the handle read and on no other conductor holding the
# ARQ (a peer that took it over from us while we were slow keeps it).
_CLAIM, _RECLAIM = (
    ARQ.update().where(ARQ.c.uuid == sa.bindparam('arq_uuid'),
                       ARQ.c.state == 'BindStarted', held,
                       sa.or_(ARQ.c.bind_owner.is_(None),
                              ARQ.c.bind_owner == sa.bindparam('owner'))
                       ).values(
        attach_handle_id=sa.bindparam('handle_id'),
        deployable_id=sa.bindparam('deployable_id'),
        bind_owner=sa.bindparam('owner'))
    for held in (ARQ.c.attach_handle_id.is_(None),
                 ARQ.c.attach_handle_id == sa.bindparam('held')))
_HANDLE = sa.select(AH).where(AH.c.id == sa.bindparam('handle_id'))
_SET_IN_USE = AH.update().where(AH.c.id == sa.bindparam('handle_id')).values(
    in_use=sa.bindparam('in_use'))


def _columns(row, table):
    return {c.name: row._mapping[c] for c in table.c}


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


_FREE_HANDLES = sa.select(AH.c.id, AH.c.attach_type, AH.c.attach_info).where(
    AH.c.deployable_id == sa.bindparam('deployable_id'),
    AH.c.in_use == sa.false()).order_by(AH.c.id).with_for_update()
_TAKE = AH.update().where(AH.c.id == sa.bindparam('handle_id'),
                          AH.c.in_use == sa.false()).values(in_use=True)
_HANDLE_COUNT = sa.select(sa.func.count()).where(
    AH.c.deployable_id == sa.bindparam('deployable_id'))


@retry
def update_handle_info(handle_uuid, info):
    """Record attach info an agent re-made (e.g. a MIG UUID)."""
    with api.writer() as session:
        _merge_info(session, handle_uuid, info)


def _merge_info(session, handle_uuid, info):
    current = session.execute(sa.select(AH.c.attach_info).where(
        AH.c.uuid == handle_uuid)).scalar()
    merged = dict(json.loads(current or '{}'), **info)
    session.execute(AH.update().where(AH.c.uuid == handle_uuid).values(
        attach_info=json.dumps(merged, sort_keys=True,
                               separators=(', ', ': '))))


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


_HELD = sa.select(ARQ.c.attach_handle_id).where(
    ARQ.c.uuid == sa.bindparam('arq_uuid'), ARQ.c.state == 'BindStarted'
).with_for_update()
_BOUND = ARQ.update().where(
    ARQ.c.uuid == sa.bindparam('arq_uuid'), ARQ.c.state == 'BindStarted'
).values(state='Bound', event_pending=True, bind_failure=None)
_FAILED = ARQ.update().where(
    ARQ.c.uuid == sa.bindparam('arq_uuid'), ARQ.c.state == 'BindStarted'
).values(state='BindFailed', event_pending=True,
         bind_failure=sa.bindparam('reason'), attach_handle_id=None,
         deployable_id=None)


def _finish(session, arq_uuid, reason):
    row = session.execute(_HELD, {'arq_uuid': arq_uuid}).mappings().first()
    if row is None:
        raise Gone(arq_uuid)
    if reason is None:
        session.execute(_BOUND, {'arq_uuid': arq_uuid})
    else:
        session.execute(_FAILED, {'arq_uuid': arq_uuid,
                                  'reason': reason[:255]})
    if reason is not None and row['attach_handle_id'] is not None:
        return arqs.free_handles(session, [row['attach_handle_id']])
    return []


def bind_started(older_than=None, unowned=False):
    """ARQs in BindStarted, grouped by instance; with older_than
    (seconds), only those Nova asked to bind that long ago (what `arq
    list-stuck` and cyborg-status report); with unowned, only those no
    conductor holds (their bind message is still queued, or was lost).
    """
    query = sa.select(ARQ.c.uuid, ARQ.c.instance_uuid).where(
        ARQ.c.state == 'BindStarted')
    if older_than is not None:
        cutoff = (datetime.datetime.now(datetime.timezone.utc)
                  .replace(tzinfo=None)
                  - datetime.timedelta(seconds=older_than))
        query = query.where(started_at() < cutoff)
    if unowned:
        query = query.where(ARQ.c.bind_owner.is_(None))
    with api.reader() as session:
        by_instance = {}
        for uuid, instance in session.execute(query.order_by(ARQ.c.id)):
            by_instance.setdefault(instance, []).append(uuid)
        return by_instance


def started_at():
    """When the bind started: rows from before revision 0006 have no
    bind_started_at, and their last update stands in for it.
    """
    return sa.func.coalesce(ARQ.c.bind_started_at, ARQ.c.updated_at,
                            ARQ.c.created_at)


def pending_events(uuids=None):
    """Nova events not yet delivered: [{name, server_uuid, tag, status}]."""
    query = sa.select(ARQ.c.uuid, ARQ.c.instance_uuid, ARQ.c.state).where(
        ARQ.c.event_pending == sa.true(), ARQ.c.instance_uuid.is_not(None))
    if uuids is not None:
        query = query.where(ARQ.c.uuid.in_(uuids))
    with api.reader() as session:
        return [{'name': 'accelerator-request-bound',
                 'server_uuid': r['instance_uuid'], 'tag': r['uuid'],
                 'status': BIND_STATUS.get(r['state'], 'failed')}
                for r in session.execute(query.order_by(ARQ.c.id)).mappings()]


@retry
def events_delivered(uuids):
    with api.writer() as session:
        session.execute(ARQ.update().where(ARQ.c.uuid.in_(uuids)).values(
            event_pending=False))
