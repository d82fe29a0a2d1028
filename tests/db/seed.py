# SPDX-License-Identifier: Apache-2.0
"""Rows for DB tests, inserted straight into the tables of cyborg.db.models.

The service fills devices, deployables, control-path ids and attach handles
from agent reports; these tests need them without an agent, so each helper
is one INSERT on its own transaction and returns the row it wrote as a dict.
Every helper takes overrides for any column.
"""

import itertools

from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg.db import api
from cyborg.db import arqs
from cyborg.db import device_profiles
from cyborg.db import models

DEVICE = models.Device.__table__
DEPLOYABLE = models.Deployable.__table__
ATTRIBUTE = models.Attribute.__table__
CPID = models.ControlpathID.__table__
AH = models.AttachHandle.__table__
DP = models.DeviceProfile.__table__
ARQ = models.ExtendedAcceleratorRequest.__table__

_counter = itertools.count(1)

GROUPS = [{'resources:PGPU': '1', 'trait:CUSTOM_GPU_NVIDIA': 'required'}]


def insert(table, **values):
    """INSERT one row (a fresh uuid unless given) and return it as read."""
    values.setdefault('uuid', uuidutils.generate_uuid())
    with api.writer() as session:
        session.execute(table.insert().values(**values))
        return dict(session.execute(
            sa.select(table).where(table.c.uuid == values['uuid'])
        ).mappings().one())


def device(**values):
    n = next(_counter)
    return insert(DEVICE, **{'type': 'GPU', 'vendor': '10de',
                             'model': 'H200', 'hostname': 'host%d' % n,
                             'status': 'enabled', **values})


def deployable(device_id=None, **values):
    if device_id is None:
        device_id = device()['id']
    n = next(_counter)
    return insert(DEPLOYABLE, **{'name': 'gpu%d' % n, 'num_accelerators': 1,
                                 'device_id': device_id,
                                 'rp_uuid': uuidutils.generate_uuid(),
                                 'driver_name': 'fake', **values})


def attribute(deployable_id, key='rc', value='PGPU', **values):
    return insert(ATTRIBUTE, deployable_id=deployable_id, key=key,
                  value=value, **values)


def controlpath_id(device_id, **values):
    """A PCI address on the device's host."""
    n = next(_counter)
    if 'hostname' not in values and 'hostname' in CPID.c:
        (device_row,) = select(DEVICE, DEVICE.c.id == device_id)
        values['hostname'] = device_row['hostname']
    address = '0000:%02x:%02x.0' % (n // 32 % 256, n % 32)
    return insert(CPID, **{'device_id': device_id, 'cpid_type': 'PCI',
                           'cpid_info': address, **values})


def attach_handle(deployable_row=None, cpid_id=None, **values):
    """An attach handle on `deployable_row` (a new GPU when None)."""
    if deployable_row is None:
        deployable_row = deployable()
    if cpid_id is None:
        cpid_id = controlpath_id(deployable_row['device_id'])['id']
    n = next(_counter)
    return insert(AH, **{'deployable_id': deployable_row['id'],
                         'cpid_id': cpid_id, 'in_use': False,
                         'attach_type': 'PCI',
                         'attach_info': '{"bus": "%02x"}' % (n % 256),
                         **values})


def profile(name=None, groups=None, uuid=None):
    return device_profiles.create(
        uuid or uuidutils.generate_uuid(),
        name or 'dp%d' % next(_counter), groups or GROUPS)


def arq_requests(count=1, project_id='p1', dp=None):
    """`count` Initial ARQs on group 0 of `dp` (a new profile when None)."""
    dp = dp or profile()
    return arqs.create(dp['id'], [count], project_id)


def bind_handle(arq_uuid, handle):
    """Record `handle` against an ARQ as the conductor's bind would."""
    with api.writer() as session:
        session.execute(ARQ.update().where(ARQ.c.uuid == arq_uuid).values(
            state='Bound', attach_handle_id=handle['id'],
            deployable_id=handle['deployable_id']))
        session.execute(AH.update().where(AH.c.id == handle['id'])
                        .values(in_use=True))


def select(table, *where):
    with api.reader() as session:
        return [dict(r) for r in session.execute(
            sa.select(table).where(*where).order_by(table.c.id)).mappings()]
