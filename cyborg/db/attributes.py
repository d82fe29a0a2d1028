"""Deployable attributes (key/value pairs such as `rc` and `trait0`)."""

from oslo_db import exception as db_exc
from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api
from cyborg.db import models

ATTRIBUTE = models.Attribute.__table__


def list_(deployable_id=None, key=None, limit=None, marker=None):
    with api.reader() as session:
        query = sa.select(ATTRIBUTE)
        if deployable_id is not None:
            query = query.where(ATTRIBUTE.c.deployable_id == deployable_id)
        if key is not None:
            query = query.where(ATTRIBUTE.c.key == key)
        query = api.paginate(session, query, ATTRIBUTE, limit, marker)
        return api.rows(session.execute(query))


def get(uuid):
    with api.reader() as session:
        row = session.execute(sa.select(ATTRIBUTE).where(
            ATTRIBUTE.c.uuid == uuid)).mappings().first()
    if row is None:
        raise exception.not_found('Attribute', uuid=uuid)
    return dict(row)


def create(deployable_id, key, value):
    uuid = uuidutils.generate_uuid()
    try:
        with api.writer() as session:
            session.execute(ATTRIBUTE.insert().values(
                uuid=uuid, deployable_id=deployable_id, key=key, value=value))
    except db_exc.DBReferenceError:
        raise exception.Invalid(
            reason='deployable_id %s does not exist' % deployable_id)
    return get(uuid)


def delete(uuid):
    with api.writer() as session:
        result = session.execute(
            ATTRIBUTE.delete().where(ATTRIBUTE.c.uuid == uuid))
    if result.rowcount != 1:
        raise exception.not_found('Attribute', uuid=uuid)
