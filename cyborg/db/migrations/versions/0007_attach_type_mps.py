# SPDX-License-Identifier: Apache-2.0
"""Attach handle type MPS: a share of a GPU served by its MPS control
daemon, for host processes and containers (its client environment),
which Nova refuses on purpose. The nvidia driver's share handles were
`MDEV` (a VM attach type) before; the ones already stored become `MPS`.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

import json

from alembic import op
import sqlalchemy as sa

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


NAME = 'ck_attach_handles_attach_type'
NEW = "attach_type IN ('PCI', 'MDEV', 'MIG', 'MPS', 'TEST_PCI')"
SHARE_SUFFIX = '_share'     # cyborg.drivers.nvidia.shares.SHARE_SUFFIX

_handles = sa.table('attach_handles', sa.column('id', sa.Integer),
                    sa.column('deployable_id', sa.Integer),
                    sa.column('attach_type', sa.String),
                    sa.column('attach_info', sa.String))
_deployables = sa.table('deployables', sa.column('id', sa.Integer),
                        sa.column('name', sa.String),
                        sa.column('driver_name', sa.String))


def upgrade():
    """The CHECK constraint of the non-native enum is made again with the
    new value (SQLite: the table is rebuilt in batch mode), then the
    nvidia driver's share handles are retyped.
    """
    if op.get_bind().dialect.name == 'sqlite':
        with op.batch_alter_table('attach_handles', recreate='always') as b:
            b.drop_constraint(op.f(NAME), type_='check')
            b.create_check_constraint(op.f(NAME), sa.text(NEW))
    else:
        op.drop_constraint(op.f(NAME), 'attach_handles', type_='check')
        op.create_check_constraint(op.f(NAME), 'attach_handles',
                                   sa.text(NEW))
    _retype_share_handles(op.get_bind())


def _is_mps_share(attach_info):
    """A share slot handle, free or bound to an MPS share (not one a
    time-slice share bound on the former fake-only path).
    """
    try:
        info = json.loads(attach_info)
    except ValueError:
        return False
    return (isinstance(info, dict) and 'share_slot' in info
            and info.get('share_mode', 'mps') == 'mps')


def _retype_share_handles(connection):
    share = _deployables.c.name.endswith(SHARE_SUFFIX, autoescape=True)
    rows = connection.execute(
        sa.select(_handles.c.id, _handles.c.attach_info)
        .select_from(_handles.join(
            _deployables, _handles.c.deployable_id == _deployables.c.id))
        .where(_handles.c.attach_type == 'MDEV',
               _deployables.c.driver_name == 'nvidia', share)).all()
    ids = [row.id for row in rows if _is_mps_share(row.attach_info)]
    if ids:
        connection.execute(_handles.update()
                           .where(_handles.c.id.in_(ids))
                           .values(attach_type='MPS'))
