# SPDX-License-Identifier: Apache-2.0
"""Device reads and what operators ask of devices: maintenance,
exclusion, reclaim, reset."""

import json

import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api
from cyborg.db import models

DEVICE = models.Device.__table__
DEPLOYABLE = models.Deployable.__table__
HANDLE = models.AttachHandle.__table__


def list_(type=None, vendor=None, hostname=None, limit=None, marker=None):
    with api.reader() as session:
        query = sa.select(DEVICE)
        for column, value in ((DEVICE.c.type, type),
                              (DEVICE.c.vendor, vendor),
                              (DEVICE.c.hostname, hostname)):
            if value is not None:
                query = query.where(column == value)
        query = api.paginate(session, query, DEVICE, limit, marker)
        return api.rows(session.execute(query))


def get(uuid):
    with api.reader() as session:
        row = session.execute(
            sa.select(DEVICE).where(DEVICE.c.uuid == uuid)).mappings().first()
    if row is None:
        raise exception.not_found('Device', uuid=uuid)
    return dict(row)


def _locked(session, uuid):
    row = session.execute(sa.select(DEVICE).where(DEVICE.c.uuid == uuid)
                          .with_for_update()).mappings().first()
    if row is None:
        raise exception.not_found('Device', uuid=uuid)
    return dict(row)


@api.retry_on_deadlock
def _set(uuid, column, value):
    """Set one operator field; returns the device as it was before."""
    with api.writer() as session:
        row = _locked(session, uuid)
        if row[column] != value:
            session.execute(DEVICE.update().where(DEVICE.c.id == row['id'])
                            .values(**{column: value}))
        return row


def set_status(uuid, status):
    """Set `enabled`/`maintaining`."""
    return _set(uuid, 'status', status)


def set_excluded(uuid, excluded):
    return _set(uuid, 'excluded', excluded)


@api.retry_on_deadlock
def set_share(uuid, mode, slots):
    """Ask for a share mode; returns the device as it was before."""
    with api.writer() as session:
        row = _locked(session, uuid)
        if (row['share_mode'], row['share_slots']) != (mode, slots):
            session.execute(DEVICE.update().where(DEVICE.c.id == row['id'])
                            .values(share_mode=mode, share_slots=slots))
        return row


def _orphan_pending(row):
    return row['management_state'] == 'Unknown' and any(
        c.get('reason') == 'OrphanPending'
        for c in json.loads(row['conditions'] or '[]'))


@api.retry_on_deadlock
def request_reclaim(uuid, now=None):
    """Admit a reclaim request: for an Orphaned device, or one whose orphan
    wait is running (held until it ends); refused naming the state
    otherwise. A repeated request keeps the first one's time.
    """
    with api.writer() as session:
        row = _locked(session, uuid)
        if row['management_state'] != 'Orphaned' and not _orphan_pending(
                row):
            raise exception.NotReclaimable(
                uuid=uuid, state=row['management_state'] or 'Unknown')
        if row['reclaim_requested_at'] is None:
            session.execute(DEVICE.update().where(DEVICE.c.id == row['id'])
                            .values(reclaim_requested_at=(
                                now or models.utcnow()).replace(
                                    microsecond=0)))
        return row


RESETTABLE_PHASES = ('Failed', 'Lost')


def _claimed(session, device_id):
    return session.execute(
        sa.select(HANDLE.c.id).where(HANDLE.c.in_use.is_(True))
        .where(HANDLE.c.deployable_id.in_(
            sa.select(DEPLOYABLE.c.id).where(
                DEPLOYABLE.c.device_id == device_id)))
        .limit(1)).first() is not None


@api.retry_on_deadlock
def request_reset(uuid, now=None):
    """Admit a reset request: for a Failed or Lost device that no binding
    holds; refused naming the state otherwise. A repeated request keeps
    the first one's time.
    """
    with api.writer() as session:
        row = _locked(session, uuid)
        if row['phase'] not in RESETTABLE_PHASES:
            raise exception.NotResettable(uuid=uuid,
                                          state=row['phase'] or 'Ready')
        claimed = row['management_state'] == 'Managed' or _claimed(
            session, row['id'])
        if claimed:
            raise exception.NotResettable(
                uuid=uuid, state='%s and claimed' % row['phase'])
        if row['reset_requested_at'] is None:
            session.execute(DEVICE.update().where(DEVICE.c.id == row['id'])
                            .values(reset_requested_at=(
                                now or models.utcnow()).replace(
                                    microsecond=0)))
        return row
