# SPDX-License-Identifier: Apache-2.0
"""A host's devices as the conductor keeps them: load, diff, apply.

`apply_report` compares an agent's report with the DB rows of that host in
one transaction: a handful of set-based queries to load, bulk statements to
write, and no statement at all when nothing changed.
"""

import json

from oslo_log import log
from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg.db import api
from cyborg.db import models
from cyborg.objects import device as records

LOG = log.getLogger(__name__)

DEVICE = models.Device.__table__
CPID = models.ControlpathID.__table__
DEPLOYABLE = models.Deployable.__table__
ATTRIBUTE = models.Attribute.__table__
HANDLE = models.AttachHandle.__table__
ARQ = models.ExtendedAcceleratorRequest.__table__

_DEVICE_FIELDS = ('type', 'vendor', 'model', 'std_board_info',
                  'vendor_board_info', 'phase', 'management_state',
                  'conditions')
_DEPLOYABLE_FIELDS = ('num_accelerators', 'driver_name', 'rp_uuid')


def _json(value):
    return records.canonical_json(value) if value is not None else None


def _wanted(device):
    """A reported Device as flat column values, keyed for the diff."""
    fields = {'type': device.type, 'vendor': device.vendor,
              'model': device.model,
              'std_board_info': _json(device.std_board_info),
              'vendor_board_info': device.vendor_board_info,
              'phase': device.phase,
              'management_state': device.management_state,
              'conditions': _json(device.conditions)}
    deployables = {}
    for dep in device.deployables:
        deployables[dep.name] = {
            'fields': {'num_accelerators': dep.num_accelerators,
                       'driver_name': dep.driver_name,
                       'rp_uuid': dep.rp_uuid},
            'attributes': {k: str(v) for k, v in dep.attributes.items()},
            'handles': {(h.attach_type, records.canonical_json(h.attach_info))
                        for h in dep.attach_handles},
        }
    cpid = device.controlpath_id
    return fields, deployables, (cpid['cpid_type'],
                                 records.canonical_json(cpid['cpid_info']))


def _load(session, hostname):
    """{cpid_key: {device, cpid, deployables: {name: {...}}}} from the DB."""
    devices = {r['id']: dict(r) for r in session.execute(
        sa.select(DEVICE).where(DEVICE.c.hostname == hostname)).mappings()}
    if not devices:
        return {}
    ids = list(devices)
    host = {}
    by_device = {}
    for cpid in session.execute(sa.select(CPID).where(
            CPID.c.device_id.in_(ids))).mappings():
        entry = {'device': devices[cpid['device_id']], 'cpid': dict(cpid),
                 'deployables': {}}
        host[records.cpid_key(cpid['cpid_type'], cpid['cpid_info'])] = entry
        by_device[cpid['device_id']] = entry
    deployables = {}
    for dep in session.execute(sa.select(DEPLOYABLE).where(
            DEPLOYABLE.c.device_id.in_(ids))).mappings():
        slot = {'row': dict(dep), 'attributes': {}, 'handles': {}}
        deployables[dep['id']] = slot
        if dep['device_id'] in by_device:
            by_device[dep['device_id']]['deployables'][dep['name']] = slot
    if deployables:
        dep_ids = list(deployables)
        for attr in session.execute(sa.select(ATTRIBUTE).where(
                ATTRIBUTE.c.deployable_id.in_(dep_ids))).mappings():
            deployables[attr['deployable_id']]['attributes'][attr['key']] = \
                dict(attr)
        for h in session.execute(sa.select(HANDLE).where(
                HANDLE.c.deployable_id.in_(dep_ids))).mappings():
            deployables[h['deployable_id']]['handles'][
                (h['attach_type'], records.handle_key(h['attach_info']))] = \
                dict(h)
    return host


def host_devices(hostname):
    with api.reader() as session:
        return _load(session, hostname)


class _Writes:
    """Rows to write, gathered during the diff and flushed in bulk."""

    def __init__(self):
        self.count = 0

    def run(self, session, statement, rows=None):
        if rows is None:
            session.execute(statement)
        elif rows:
            session.execute(statement, rows)
        else:
            return
        self.count += 1


_LOCK_HOST = api.Prepared(
    sa.select(DEVICE.c.id).where(DEVICE.c.hostname == sa.bindparam(
        'hostname')).order_by(DEVICE.c.id).with_for_update())


def apply_report(hostname, devices):
    """Make the DB rows of `hostname` match `devices` ([records.Device]).

    Returns (number of write statements, {cpid_key: what operators asked
    of the device: status, excluded, reclaim_requested_at,
    reset_requested_at, share}).
    """
    with api.writer() as session:
        # Two reports of one host at once (two conductors, an agent's
        # retry) take turns here: on PostgreSQL and MariaDB the second
        # waits for the first to commit, then loads what it wrote, instead
        # of diffing a stale view (a deployable the first removed got
        # handles from the second: a foreign key error). SQLite writers
        # take turns already (BEGIN IMMEDIATE); a first report has no row
        # to lock and adds devices only.
        session.execute(_LOCK_HOST, {'hostname': hostname}).all()
        current = _load(session, hostname)
        writes = _Writes()
        wanted = {}
        for device in devices:
            fields, deps, (cpid_type, cpid_info) = _wanted(device)
            wanted[records.cpid_key(cpid_type, cpid_info)] = (
                fields, deps, cpid_type, cpid_info)
        new_devices = [k for k in wanted if k not in current]
        _add_devices(session, writes, hostname,
                     [wanted[k] for k in new_devices])
        for key in set(wanted) & set(current):
            _update_device(session, writes, current[key], *wanted[key][:2])
        for key in set(current) - set(wanted):
            _remove_device(session, writes, current[key])
        states = {k: _operator_state(r['device'])
                  for k, r in current.items() if k in wanted}
        states.update({k: _operator_state({}) for k in new_devices})
        return writes.count, states


def _operator_state(row):
    """What operators asked of a device, for its agent."""
    return {'status': row.get('status', 'enabled'),
            'excluded': bool(row.get('excluded')),
            'reclaim_requested_at': requested_at(row),
            'reset_requested_at': requested_at(row, 'reset'),
            'share': ({'mode': row['share_mode'],
                       'slots': row.get('share_slots') or 10}
                      if row.get('share_mode') not in (None, 'none')
                      else None)}


def _add_devices(session, writes, hostname, entries):
    if not entries:
        return
    device_rows = []
    for fields, _, _, _ in entries:
        device_rows.append(dict(fields, uuid=uuidutils.generate_uuid(),
                                hostname=hostname, status='enabled'))
    writes.run(session, DEVICE.insert(), device_rows)
    ids = _ids(session, DEVICE, [r['uuid'] for r in device_rows])
    writes.run(session, CPID.insert(), [
        {'uuid': uuidutils.generate_uuid(), 'device_id': ids[row['uuid']],
         'hostname': hostname, 'cpid_type': cpid_type,
         'cpid_info': cpid_info}
        for row, (_, _, cpid_type, cpid_info) in zip(device_rows, entries)])
    cpids = {r['device_id']: r['id'] for r in session.execute(
        sa.select(CPID.c.id, CPID.c.device_id).where(
            CPID.c.device_id.in_(list(ids.values())))).mappings()}
    for row, (_, deps, _, _) in zip(device_rows, entries):
        device_id = ids[row['uuid']]
        _add_deployables(session, writes, device_id, cpids[device_id], deps)


def _ids(session, table, uuids):
    return {r['uuid']: r['id'] for r in session.execute(
        sa.select(table.c.id, table.c.uuid).where(
            table.c.uuid.in_(uuids))).mappings()}


def _add_deployables(session, writes, device_id, cpid_id, deps):
    if not deps:
        return
    rows = [dict(d['fields'], uuid=uuidutils.generate_uuid(), name=name,
                 device_id=device_id) for name, d in deps.items()]
    writes.run(session, DEPLOYABLE.insert(), rows)
    ids = _ids(session, DEPLOYABLE, [r['uuid'] for r in rows])
    attributes, handles = [], []
    for row in rows:
        dep = deps[row['name']]
        dep_id = ids[row['uuid']]
        attributes += [{'uuid': uuidutils.generate_uuid(),
                        'deployable_id': dep_id, 'key': k, 'value': v}
                       for k, v in sorted(dep['attributes'].items())]
        handles += [{'uuid': uuidutils.generate_uuid(),
                     'deployable_id': dep_id, 'cpid_id': cpid_id,
                     'in_use': False, 'attach_type': t, 'attach_info': i}
                    for t, i in sorted(dep['handles'])]
    writes.run(session, ATTRIBUTE.insert(), attributes)
    writes.run(session, HANDLE.insert(), handles)


def requested_at(row, action='reclaim'):
    """A device's pending reclaim (or reset) request as the agent echoes
    it back.
    """
    value = row.get(action + '_requested_at')
    return value.isoformat() if value is not None else None


def _answered(device, conditions, action):
    """The agent reported an outcome for the pending reclaim or reset
    request (a condition of type Reclaim or Reset).
    """
    pending = requested_at(device, action)
    if pending is None or not conditions:
        return False
    return any(c.get('type') == action.capitalize()
               and c.get('reason') != 'Held'
               and c.get('requested_at') == pending
               for c in json.loads(conditions))


def _update_device(session, writes, current, fields, deps):
    device = current['device']
    changed = {k: v for k, v in fields.items() if device[k] != v}
    for action in ('reclaim', 'reset'):
        if _answered(device, fields['conditions'], action):
            changed[action + '_requested_at'] = None
            device[action + '_requested_at'] = None
    if changed:
        writes.run(session, DEVICE.update().where(
            DEVICE.c.id == device['id']).values(**changed))
    have = current['deployables']
    _add_deployables(session, writes, device['id'], current['cpid']['id'],
                     {n: d for n, d in deps.items() if n not in have})
    for name in set(have) - set(deps):
        _remove_deployable(session, writes, have[name])
    for name in set(have) & set(deps):
        _update_deployable(session, writes, have[name], deps[name],
                           current['cpid']['id'])


def _update_deployable(session, writes, have, want, cpid_id):
    row = have['row']
    changed = {k: v for k, v in want['fields'].items() if row[k] != v}
    if changed:
        writes.run(session, DEPLOYABLE.update().where(
            DEPLOYABLE.c.id == row['id']).values(**changed))
    attrs = have['attributes']
    gone = [a['id'] for k, a in attrs.items() if k not in want['attributes']]
    if gone:
        writes.run(session, ATTRIBUTE.delete().where(
            ATTRIBUTE.c.id.in_(gone)))
    writes.run(session, ATTRIBUTE.insert(), [
        {'uuid': uuidutils.generate_uuid(), 'deployable_id': row['id'],
         'key': k, 'value': v}
        for k, v in sorted(want['attributes'].items()) if k not in attrs])
    for key, value in want['attributes'].items():
        if key in attrs and attrs[key]['value'] != value:
            writes.run(session, ATTRIBUTE.update().where(
                ATTRIBUTE.c.id == attrs[key]['id']).values(value=value))
    handles = have['handles']
    stale = [h['id'] for k, h in handles.items()
             if k not in want['handles'] and not h['in_use']]
    if stale:
        writes.run(session, HANDLE.delete().where(HANDLE.c.id.in_(stale)))
    writes.run(session, HANDLE.insert(), [
        {'uuid': uuidutils.generate_uuid(), 'deployable_id': row['id'],
         'cpid_id': cpid_id, 'in_use': False, 'attach_type': t,
         'attach_info': i}
        for t, i in sorted(want['handles'] - set(handles))])


def _in_use(session, deployable_ids):
    """Deployables that bound ARQs or in-use handles still hold."""
    if not deployable_ids:
        return set()
    held = {r[0] for r in session.execute(sa.select(ARQ.c.deployable_id).where(
        ARQ.c.deployable_id.in_(deployable_ids)))}
    held |= {r[0] for r in session.execute(
        sa.select(HANDLE.c.deployable_id).where(
            HANDLE.c.deployable_id.in_(deployable_ids),
            HANDLE.c.in_use == sa.true()))}
    return held


def _remove_deployable(session, writes, dep):
    dep_id = dep['row']['id']
    if _in_use(session, [dep_id]):
        LOG.warning('Deployable %s vanished from its host but is still in '
                    'use; keeping it until it is released',
                    dep['row']['name'])
        return False
    writes.run(session, ATTRIBUTE.delete().where(
        ATTRIBUTE.c.deployable_id == dep_id))
    writes.run(session, HANDLE.delete().where(
        HANDLE.c.deployable_id == dep_id))
    writes.run(session, DEPLOYABLE.delete().where(DEPLOYABLE.c.id == dep_id))
    return True


def _remove_device(session, writes, current):
    removed = [_remove_deployable(session, writes, d)
               for d in current['deployables'].values()]
    if not all(removed):
        return
    device_id = current['device']['id']
    writes.run(session, CPID.delete().where(CPID.c.device_id == device_id))
    writes.run(session, DEVICE.delete().where(DEVICE.c.id == device_id))


def in_use_handles(hostname):
    """{deployable name: [{uuid, attach_info, arq_uuid, instance_uuid}]} of
    the host's handles that bindings hold: what its agent must treat as
    owned (e.g. MIG instances).
    """
    query = (sa.select(HANDLE.c.uuid, HANDLE.c.attach_info,
                       DEPLOYABLE.c.name, ARQ.c.uuid.label('arq_uuid'),
                       ARQ.c.instance_uuid)
             .select_from(HANDLE.join(DEPLOYABLE, HANDLE.c.deployable_id
                                      == DEPLOYABLE.c.id)
                          .join(DEVICE, DEPLOYABLE.c.device_id
                                == DEVICE.c.id)
                          .outerjoin(ARQ, ARQ.c.attach_handle_id
                                     == HANDLE.c.id))
             .where(DEVICE.c.hostname == hostname,
                    HANDLE.c.in_use == sa.true()))
    out = {}
    with api.reader() as session:
        for row in session.execute(query).mappings():
            out.setdefault(row['name'], []).append(
                {k: row[k] for k in ('uuid', 'attach_info', 'arq_uuid',
                                     'instance_uuid')})
    return out
