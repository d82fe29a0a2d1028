# SPDX-License-Identifier: Apache-2.0
"""Deployable reads, with their attributes fetched in one extra query."""

import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api
from cyborg.db import models

DEPLOYABLE = models.Deployable.__table__
ATTRIBUTE = models.Attribute.__table__


def _with_attributes(session, rows):
    rows = api.rows(rows)
    if not rows:
        return rows
    attrs = {}
    for a in session.execute(
            sa.select(ATTRIBUTE.c.deployable_id, ATTRIBUTE.c.key,
                      ATTRIBUTE.c.value)
            .where(ATTRIBUTE.c.deployable_id.in_([r['id'] for r in rows]))
            .order_by(ATTRIBUTE.c.id)).mappings():
        attrs.setdefault(a['deployable_id'], []).append({a['key']: a['value']})
    for row in rows:
        row['attributes_list'] = attrs.get(row['id'], [])
    return rows


def list_(limit=None, marker=None):
    with api.reader() as session:
        query = api.paginate(session, sa.select(DEPLOYABLE), DEPLOYABLE,
                             limit, marker)
        return _with_attributes(session, session.execute(query))


def get(uuid):
    with api.reader() as session:
        rows = _with_attributes(session, session.execute(
            sa.select(DEPLOYABLE).where(DEPLOYABLE.c.uuid == uuid)))
    if not rows:
        raise exception.not_found('Deployable', uuid=uuid)
    return rows[0]
