# SPDX-License-Identifier: Apache-2.0
"""/v2/devices: physical accelerators reported by the agents."""

import json

import pecan

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.api.controllers import base
from cyborg.api.schemas import devices as schema
from cyborg.common import exception
from cyborg.db import devices as db

LIFECYCLE = (2, 4)
RESET = (2, 6)
DEFAULT_SHARE_SLOTS = 10


def serialize(device):
    out = {k: device[k] for k in ('uuid', 'type', 'vendor', 'model',
                                  'std_board_info', 'vendor_board_info',
                                  'hostname')}
    if base.version() >= (2, 3):
        out['status'] = device['status']
    if base.version() >= LIFECYCLE:
        board = json.loads(device['std_board_info'] or '{}')
        out.update(phase=device['phase'] or 'Ready',
                   driver=board.get('driver'), mode=board.get('mode'),
                   management_state=device['management_state'] or 'Unknown',
                   excluded=device['excluded'],
                   conditions=json.loads(device['conditions'] or '[]'),
                   share_mode=device['share_mode'] or 'none',
                   share_slots=device['share_slots'])
    out['links'] = base.links('devices', device['uuid'])
    out.update(base.timestamps(device))
    return out


class DeviceController:
    def __init__(self, uuid):
        self.uuid = uuid

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET')

    @index.when(method='GET')
    @base.handler()
    def get(self):
        return base.show('device', self.uuid, db.get, serialize)

    @pecan.expose(generic=True)
    def disable(self):
        return base.not_allowed('POST')

    @disable.when(method='POST')
    @base.handler()
    def post_disable(self):
        self._set_status('disable', 'maintaining')

    @pecan.expose(generic=True)
    def enable(self):
        return base.not_allowed('POST')

    @enable.when(method='POST')
    @base.handler()
    def post_enable(self):
        self._set_status('enable', 'enabled')

    @pecan.expose(generic=True)
    def exclude(self):
        return base.not_allowed('POST')

    @exclude.when(method='POST')
    @base.handler()
    def post_exclude(self):
        self._set_excluded('exclude', True)

    @pecan.expose(generic=True)
    def include(self):
        return base.not_allowed('POST')

    @include.when(method='POST')
    @base.handler()
    def post_include(self):
        self._set_excluded('include', False)

    @pecan.expose(generic=True)
    def reclaim(self):
        return base.not_allowed('POST')

    @reclaim.when(method='POST')
    @base.handler(202)
    def post_reclaim(self):
        self._lifecycle_action('reclaim')
        device = db.request_reclaim(base.require_uuid(self.uuid, 'device'))
        agent_rpcapi.AgentAPI().resync(base.context(), device['hostname'])

    @pecan.expose(generic=True)
    def reset(self):
        return base.not_allowed('POST')

    @reset.when(method='POST')
    @base.handler(202)
    def post_reset(self):
        """Reset a Failed or Lost GPU that nothing uses: its agent checks
        again that nothing holds it, then resets it and says how it went
        in the `Reset` condition.
        """
        self._lifecycle_action('reset', RESET)
        device = db.request_reset(base.require_uuid(self.uuid, 'device'))
        agent_rpcapi.AgentAPI().resync(base.context(), device['hostname'])

    @pecan.expose(generic=True)
    def share(self):
        return base.not_allowed('POST')

    @share.when(method='POST')
    @base.handler()
    def post_share(self):
        """Ask for sharing by capacity (mps | time-slice) or none; the
        device's agent sets the share pool up, or says why it cannot in
        the `Share` condition.
        """
        self._lifecycle_action('share')
        body = base.body(schema.SHARE)
        mode = body['mode']
        slots = body.get('slots', DEFAULT_SHARE_SLOTS) \
            if mode != 'none' else None
        before = db.set_share(base.require_uuid(self.uuid, 'device'), mode,
                              slots)
        if (before['share_mode'], before['share_slots']) != (mode, slots):
            agent_rpcapi.AgentAPI().resync(base.context(), before['hostname'])
        return serialize(db.get(self.uuid))

    def _set_excluded(self, action, excluded):
        self._lifecycle_action(action)
        before = db.set_excluded(base.require_uuid(self.uuid, 'device'),
                                 excluded)
        if before['excluded'] != excluded:
            agent_rpcapi.AgentAPI().resync(base.context(), before['hostname'])

    @staticmethod
    def _lifecycle_action(action, since=LIFECYCLE):
        if base.version() < since:
            raise exception.NotFound(
                'The resource could not be found.')
        base.authorize('cyborg:device:' + action)
        base.query()

    def _set_status(self, action, status):
        base.authorize('cyborg:device:' + action)
        base.query()
        before = db.set_status(base.require_uuid(self.uuid, 'device'), status)
        if before['status'] != status:
            # The device's agent owns its providers: it fences (reserved =
            # total) or unfences them on the report pass this triggers.
            agent_rpcapi.AgentAPI().resync(base.context(), before['hostname'])


class DevicesController:

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET')

    @index.when(method='GET')
    @base.handler()
    def get_all(self):
        base.authorize('cyborg:device:get_all')
        params = base.query('type', 'vendor', 'hostname', 'limit', 'marker')
        filters = {k: params[k] for k in ('type', 'vendor', 'hostname')
                   if k in params}
        devices = db.list_(**filters, **base.pagination(params))
        return {'devices': [serialize(d) for d in devices]}

    @pecan.expose()
    def _lookup(self, uuid, *remainder):
        return DeviceController(uuid), remainder
