# SPDX-License-Identifier: Apache-2.0
"""Deployable attributes (key/value pairs such as `rc` and `trait0`)."""

from oslo_db import exception as db_exc
from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api
from cyborg.db import models

ATTRIBUTE = models.Attribute.__table__
DEPLOYABLE = models.Deployable.__table__


def _deployable_id(deployable):
    """A deployable's id in a query: `deployable` is its integer id or its
    uuid (then a subquery).
    """
    if isinstance(deployable, int):
        return deployable
    return sa.select(DEPLOYABLE.c.id).where(
        DEPLOYABLE.c.uuid == deployable).scalar_subquery()


def list_(deployable=None, key=None, limit=None, marker=None):
    """Attributes, of one deployable (its id or uuid) and/or one key."""
    with api.reader() as session:
        query = sa.select(ATTRIBUTE)
        if deployable is not None:
            query = query.where(
                ATTRIBUTE.c.deployable_id == _deployable_id(deployable))
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


@api.retry_on_deadlock
def create(deployable, key, value):
    """A new attribute of `deployable` (its integer id or its uuid)."""
    uuid = uuidutils.generate_uuid()
    try:
        with api.writer() as session:
            deployable_id = deployable
            if not isinstance(deployable, int):
                deployable_id = session.execute(
                    sa.select(DEPLOYABLE.c.id).where(
                        DEPLOYABLE.c.uuid == deployable)).scalar()
                if deployable_id is None:
                    raise _no_deployable(deployable)
            session.execute(ATTRIBUTE.insert().values(
                uuid=uuid, deployable_id=deployable_id, key=key,
                value=value))
    except db_exc.DBReferenceError:
        raise _no_deployable(deployable)
    return get(uuid)


def _no_deployable(deployable):
    return exception.Invalid(
        reason='deployable_id %s does not exist' % deployable)


@api.retry_on_deadlock
def delete(uuid):
    with api.writer() as session:
        result = session.execute(
            ATTRIBUTE.delete().where(ATTRIBUTE.c.uuid == uuid))
    if result.rowcount != 1:
        raise exception.not_found('Attribute', uuid=uuid)
