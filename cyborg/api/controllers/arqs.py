# SPDX-License-Identifier: Apache-2.0
"""/v2/accelerator_requests: ARQs, created from a device profile and bound
to an instance by Nova."""

import pecan

from cyborg.api.controllers import base
from cyborg.api import microversion
from cyborg.api.schemas import arqs as schema
from cyborg.common import exception
from cyborg.common import gpu_classes
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.conf import CONF
from cyborg.db import arqs as db
from cyborg import policy

BIND_PATHS = ('/hostname', '/device_rp_uuid', '/instance_uuid')
SERVICE_TOKEN_MSG = ('This operation requires a service token. Use the '
                     'Compute API to manage instance accelerators.')


_FIELDS = ('uuid', 'state', 'device_profile_name', 'device_profile_group_id',
           'hostname', 'device_rp_uuid', 'instance_uuid', 'project_id',
           'attach_handle_type', 'attach_handle_uuid', 'attach_handle_info')
# Microversion 2.5 (ours): `state_reason`, why the ARQ is in its state
# (a BindFailed's reason; null when there is none to tell).
STATE_REASON = (2, 5)


# An ARQ in an answer: the JSON text json.dumps() would give of _FIELDS,
# `state_reason` (from 2.5), `links` and the timestamps, in that order,
# made with one format (see device_profiles.encode).
_HEAD = '{' + ''.join('"%s": %%s, ' % k for k in _FIELDS)
_TAIL = ('"links": [{"href": %s, "rel": "self"}], "created_at": %s, '
         '"updated_at": %s}')
# By whether the answer has state_reason.
_ARQ = {False: _HEAD + _TAIL, True: _HEAD + '"state_reason": %s, ' + _TAIL}


def encode(arq, url=None):
    """The JSON text of `arq` in an answer."""
    value = base.json_value
    out = [value(arq[k]) for k in _FIELDS]
    with_reason = base.version() >= STATE_REASON
    if with_reason:
        out.append(value(arq['bind_failure']))
    out += (value(base.self_href('accelerator_requests', arq['uuid'], url)),
            value(base.isotime(arq['created_at'])),
            value(base.isotime(arq['updated_at'])))
    return _ARQ[with_reason] % tuple(out)


def _visible_project():
    """None (all projects) for admins, else the caller's project."""
    ctx = base.context()
    return None if ctx.is_admin else ctx.project_id


def _authorize_service(action):
    try:
        base.authorize(action)
    except exception.PolicyNotAuthorized:
        raise exception.Forbidden(SERVICE_TOKEN_MSG)


def units_per_group(groups):
    """ARQs per group: the sum of its resources:* amounts (Xilinx ×2), a
    GPU's slices and engines counting as one accelerator.
    """
    counts = []
    for group in groups:
        count = gpu_classes.accelerators_in_group(group)
        if group.get('trait:CUSTOM_FPGA_XILINX') == 'required':
            count = 2 * int(group.get('resources:FPGA', 0))
        counts.append(count)
    return counts


def _parse_patch(ops, allow_project_id):
    """One ARQ's ops → ('add', {field: value}) or ('remove', None)."""
    kinds = {op['op'] for op in ops}
    if not kinds <= {'add'} and not kinds <= {'remove'}:
        raise exception.PatchError(reason='Every op must be add or remove')
    paths = BIND_PATHS + (('/project_id',) if allow_project_id else ())
    for op in ops:
        if op['path'] not in paths:
            raise exception.PatchError(
                reason='Invalid path in patch %s'
                % exception.excerpt(op['path']))
    if kinds == {'remove'}:
        return 'remove', None
    values = {op['path'][1:]: op.get('value') for op in ops}
    absent = [p[1:] for p in BIND_PATHS if p[1:] not in values]
    if absent:
        raise exception.PatchError(
            reason='Fields absent in patch %s' % ','.join(absent))
    base.validate(values, schema.BIND_VALUES)
    return 'add', values


def apply_patch(patch):
    """Validate a whole PATCH body, then bind or unbind all of it at once."""
    ctx = base.context()
    project_used = any(op.get('path') == '/project_id'
                       for ops in patch.values() for op in ops)
    if project_used:
        microversion.require(pecan.request, (2, 1),
                             'setting /project_id in a bind patch')
        base.authorize('cyborg:arq:update_project_id')
    parsed = {}
    for uuid, ops in patch.items():
        base.require_uuid(uuid, 'accelerator request')
        parsed[uuid] = _parse_patch(ops, project_used)
    kinds = {kind for kind, _ in parsed.values()}
    if len(kinds) != 1:
        raise exception.PatchError(
            reason='A patch either binds or unbinds, not both')
    project = _visible_project()
    if kinds == {'remove'}:
        _release(db.unbind(list(parsed), project))
        return
    bindings = {}
    for uuid, (_, values) in parsed.items():
        values.setdefault('project_id', ctx.project_id)
        bindings[uuid] = values
    instances = {b['instance_uuid'] for b in bindings.values()}
    if len(instances) != 1:
        raise exception.PatchError(
            reason='All ARQs of one patch must be bound to one instance')
    db.start_bind(bindings, project)
    # The conductor binds asynchronously and tells Nova (202 now).
    conductor_rpcapi.ConductorAPI().bind_arqs(ctx, list(bindings))


def _release(handles):
    """The freed handles' agents undo what prepare() did: the conductor
    sends them word, as it does for bind (a cast; 202/204 now).
    """
    if handles:
        conductor_rpcapi.ConductorAPI().release_handles(base.context(),
                                                        handles)


class ARQController:
    def __init__(self, uuid):
        self.uuid = uuid

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET, PATCH, DELETE')

    @index.when(method='GET')
    @base.handler()
    def get(self):
        base.authorize('cyborg:arq:get_one')
        base.query()
        base.require_uuid(self.uuid, 'accelerator request')
        return base.Encoded(encode(db.get(self.uuid, _visible_project())))

    @index.when(method='PATCH')
    @base.handler(202)
    def patch(self):
        # openstacksdk and the OSC plugin PATCH /accelerator_requests/<uuid>
        # with the same {uuid: [ops]} body as Nova's collection PATCH.
        _authorize_service('cyborg:arq:update')
        base.query()
        patch = base.body(schema.PATCH)
        if self.uuid not in patch:
            raise exception.PatchError(
                reason='The body does not patch %s'
                % exception.excerpt(self.uuid))
        apply_patch(patch)

    @index.when(method='DELETE')
    @base.handler(204)
    def delete(self):
        base.authorize('cyborg:arq:delete')
        base.query()
        _delete_arqs([base.require_uuid(self.uuid, 'accelerator request')])


def _delete_arqs(uuids):
    may_delete_bound = policy.get_enforcer().check(
        'cyborg:arq:delete_bound', {'project_id': base.context().project_id},
        base.context())
    _release(db.delete_by_uuids(uuids, _visible_project(), may_delete_bound))


class ARQsController:

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET, POST, PATCH, DELETE')

    @index.when(method='GET')
    @base.handler()
    def get_all(self):
        base.authorize('cyborg:arq:get_all')
        params = base.query('instance', 'bind_state', 'limit', 'marker')
        instance = params.get('instance')
        if instance is not None:
            base.require_uuid(instance, 'instance')
        bind_state = params.get('bind_state')
        if bind_state is not None and bind_state != 'resolved':
            raise exception.Invalid(
                'Bad bind_state %s; the only filter supported is '
                'bind_state=resolved' % exception.excerpt(bind_state))
        project = _visible_project()
        states = db.RESOLVED_STATES if bind_state else None
        if bind_state and instance and db.instance_unresolved(instance,
                                                              project):
            raise exception.Locked(instance=instance)
        arqs = db.list_(project, instance, states, **base.pagination(params))
        url = base.base_url()
        return base.collection('arqs', [encode(a, url) for a in arqs])

    @index.when(method='POST')
    @base.handler(201)
    def post(self):
        base.authorize('cyborg:arq:create')
        base.query()
        body = base.body(schema.CREATE)
        name = body.get('device_profile_name')
        if name is None:
            raise exception.Invalid('DeviceProfile name needed.')

        def plan(dp):
            counts = units_per_group(dp['groups'])
            if sum(counts) > CONF.api.max_limit:
                # One answer lists them all; and a profile asking for a
                # million FPGAs must not make a million rows.
                raise exception.Invalid(
                    'Device profile %s asks for %d accelerators; at most %d '
                    '([api] max_limit) per request.'
                    % (name, sum(counts), CONF.api.max_limit))
            return counts
        # One transaction reads the profile and inserts its ARQs.
        arqs = db.create_from_profile(name, plan, base.context().project_id)
        url = base.base_url()
        return base.collection('arqs', [encode(a, url) for a in arqs])

    @index.when(method='PATCH')
    @base.handler(202)
    def patch(self):
        _authorize_service('cyborg:arq:update')
        base.query()
        apply_patch(base.body(schema.PATCH))

    @index.when(method='DELETE')
    @base.handler(204)
    def delete(self):
        base.authorize('cyborg:arq:delete')
        params = base.query('arqs', 'instance')
        if ('arqs' in params) == ('instance' in params):
            raise exception.Invalid('Object action delete failed because: '
                                    'Provide either an ARQ uuid list or an '
                                    'instance UUID')
        if 'instance' in params:
            _authorize_service('cyborg:arq:delete_bound')
            _release(db.delete_by_instance(
                base.require_uuid(params['instance'], 'instance'),
                _visible_project()))
        else:
            uuids = [base.require_uuid(u, 'accelerator request')
                     for u in params['arqs'].split(',') if u]
            if not uuids:
                raise exception.Invalid('arqs must list ARQ uuids')
            _delete_arqs(uuids)

    @pecan.expose()
    def _lookup(self, uuid, *remainder):
        return ARQController(uuid), remainder
