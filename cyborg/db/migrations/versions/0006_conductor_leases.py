# SPDX-License-Identifier: Apache-2.0
"""Conductor failover: conductors heartbeat in the database, a bind
records which conductor holds it and when it started.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from alembic import op
import sqlalchemy as sa

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'conductors',
        sa.Column('name', sa.String(255), primary_key=True),
        sa.Column('heartbeat_at', sa.DateTime, nullable=False),
        sa.Column('created_at', sa.DateTime, nullable=False),
    )
    with op.batch_alter_table('extended_accelerator_requests') as batch:
        batch.add_column(sa.Column('bind_owner', sa.String(255)))
        batch.add_column(sa.Column('bind_started_at', sa.DateTime))
        batch.create_index('arqs_bind_owner_idx', ['bind_owner'])
