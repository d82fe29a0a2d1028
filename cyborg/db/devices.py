"""Device reads and the maintenance status switch."""

import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api
from cyborg.db import models

DEVICE = models.Device.__table__


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


def set_status(uuid, status):
    """Set `enabled`/`maintaining`; returns the device as it was before."""
    with api.writer() as session:
        row = session.execute(
            sa.select(DEVICE).where(DEVICE.c.uuid == uuid)
            .with_for_update()).mappings().first()
        if row is None:
            raise exception.not_found('Device', uuid=uuid)
        if row['status'] != status:
            session.execute(DEVICE.update().where(DEVICE.c.id == row['id'])
                            .values(status=status))
        return dict(row)
