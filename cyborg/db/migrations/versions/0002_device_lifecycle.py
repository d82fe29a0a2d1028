# SPDX-License-Identifier: Apache-2.0
"""Device lifecycle: phase, management state, conditions, and the
operator's exclusion and reclaim requests.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from alembic import op
import sqlalchemy as sa

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def _enum(name, *values):
    return sa.Enum(*values, name=name, native_enum=False,
                   create_constraint=True, length=16)


def upgrade():
    with op.batch_alter_table('devices') as batch:
        batch.add_column(sa.Column('phase', _enum(
            'device_phase', 'Pending', 'Initializing', 'Ready',
            'Reconfiguring', 'Passthrough', 'Failed', 'Lost')))
        batch.add_column(sa.Column('management_state', _enum(
            'device_management_state', 'Managed', 'Excluded', 'Orphaned',
            'Unclaimed', 'Unknown')))
        batch.add_column(sa.Column('conditions', sa.Text))
        batch.add_column(sa.Column('excluded', sa.Boolean, nullable=False,
                                   server_default=sa.false()))
        batch.add_column(sa.Column('reclaim_requested_at', sa.DateTime))
    # The default was only there to fill existing rows; like every other
    # flag, new rows get theirs from the code.
    with op.batch_alter_table('devices') as batch:
        batch.alter_column('excluded', existing_type=sa.Boolean,
                           existing_nullable=False, server_default=None)
