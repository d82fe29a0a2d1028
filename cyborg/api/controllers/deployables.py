# SPDX-License-Identifier: Apache-2.0
"""/v2/deployables: the schedulable units of a device (a GPU, a MIG-capable
GPU, an FPGA region), each backed by one resource provider."""

import json

import pecan

from cyborg.api.controllers import base
from cyborg.api.schemas import deployables as schema
from cyborg.common import exception
from cyborg.db import deployables as db


def serialize(dep):
    out = {k: dep[k] for k in ('uuid', 'parent_id', 'root_id', 'name',
                               'num_accelerators', 'device_id', 'rp_uuid',
                               'driver_name', 'bitstream_id')}
    # A JSON string, not a list, exactly as Cyborg answers.
    out['attributes_list'] = json.dumps(dep['attributes_list'])
    out['links'] = base.links('deployables', dep['uuid'], bookmark=True)
    out.update(base.timestamps(dep))
    return out


class DeployableController:
    def __init__(self, uuid):
        self.uuid = uuid

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET')

    @index.when(method='GET')
    @base.handler()
    def get(self):
        return base.show('deployable', self.uuid, db.get, serialize)

    @pecan.expose(generic=True)
    def program(self, *extra):
        return base.not_allowed('PATCH')

    @program.when(method='PATCH')
    @base.handler()
    def patch_program(self, *extra):
        # openstacksdk appends the id once more (/program/<id>); accept it.
        base.authorize('cyborg:deployable:program')
        base.query()
        if extra not in ((), (self.uuid,)):
            raise exception.NotFound(resource='Resource',
                                     msg='/program/' + '/'.join(extra))
        base.body(schema.PROGRAM)
        dep = db.get(base.require_uuid(self.uuid, 'deployable'))
        raise exception.Conflict(
            reason='deployable %s (driver %s) cannot be programmed: no '
                   'enabled driver supports programming'
                   % (dep['uuid'], dep['driver_name']))


class DeployablesController:

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET')

    @index.when(method='GET')
    @base.handler()
    def get_all(self):
        base.authorize('cyborg:deployable:get_all')
        params = base.query('limit', 'marker')
        return {'deployables': [serialize(d) for d in
                                db.list_(**base.pagination(params))]}

    @pecan.expose()
    def _lookup(self, uuid, *remainder):
        return DeployableController(uuid), remainder
