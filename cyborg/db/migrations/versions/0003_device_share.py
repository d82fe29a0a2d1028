# SPDX-License-Identifier: Apache-2.0
"""Sharing by capacity: the share mode (and slots) operators ask of a
device.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from alembic import op
import sqlalchemy as sa

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('devices') as batch:
        batch.add_column(sa.Column('share_mode', sa.Enum(
            'none', 'mps', 'time-slice', name='device_share_mode',
            native_enum=False, create_constraint=True, length=16)))
        batch.add_column(sa.Column('share_slots', sa.Integer))
