# SPDX-License-Identifier: Apache-2.0
"""/v2/attributes: key/value facts about deployables (rc, traits, ...)."""

import pecan

from cyborg.api.controllers import base
from cyborg.api.schemas import attributes as schema
from cyborg.common import exception
from cyborg.db import attributes as db

# Deployable ids are 32-bit integer columns.
MAX_ID = 2 ** 31 - 1


def _deployable(value):
    """A deployable reference from a client: its integer id (a number or
    digits), or its uuid (beyond Cyborg, which takes only the id); None
    for anything else.
    """
    if isinstance(value, (int, float)):
        return int(value)          # JSON Schema's integers include 113.0
    if value.isascii() and value.isdigit():
        return int(value)
    if base.is_uuid_like(value):
        return value
    return None


def serialize(attr):
    out = {k: attr[k] for k in ('uuid', 'deployable_id', 'key', 'value')}
    out['links'] = base.links('attributes', attr['uuid'])
    out.update(base.timestamps(attr))
    return out


class AttributeController:
    def __init__(self, uuid):
        self.uuid = uuid

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET, DELETE')

    @index.when(method='GET')
    @base.handler()
    def get(self):
        return base.show('attribute', self.uuid, db.get, serialize)

    @index.when(method='DELETE')
    @base.handler(204)
    def delete(self):
        base.authorize('cyborg:attribute:delete')
        base.query()
        db.delete(base.require_uuid(self.uuid, 'attribute'))


class AttributesController:

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET, POST')

    @index.when(method='GET')
    @base.handler()
    def get_all(self):
        base.authorize('cyborg:attribute:get_all')
        params = base.query('deployable_id', 'key', 'limit', 'marker')
        deployable = params.get('deployable_id')
        if deployable is not None:
            deployable = _deployable(deployable)
            if deployable is None:
                raise exception.Invalid(
                    "deployable_id must be a deployable's integer id or "
                    "uuid")
        return {'attributes': [serialize(a) for a in db.list_(
            deployable, params.get('key'), **base.pagination(params))]}

    @index.when(method='POST')
    @base.handler(201)
    def post(self):
        base.authorize('cyborg:attribute:create')
        base.query()
        body = base.body(schema.CREATE)
        attr = body.get('attribute', body)
        deployable = _deployable(attr['deployable_id'])
        if deployable is None or (isinstance(deployable, int)
                                  and deployable > MAX_ID):
            # No deployable has it, and MySQL and PostgreSQL refuse an
            # out-of-range id instead of finding nothing.
            raise exception.Invalid(
                reason='deployable_id %s does not exist'
                % exception.excerpt(attr['deployable_id']))
        return serialize(db.create(deployable, attr['key'], attr['value']))

    @pecan.expose()
    def _lookup(self, uuid, *remainder):
        return AttributeController(uuid), remainder
