# SPDX-License-Identifier: Apache-2.0
"""The operator's reset request of a Failed or Lost device (API 2.6).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from alembic import op
import sqlalchemy as sa

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('devices') as batch:
        batch.add_column(sa.Column('reset_requested_at', sa.DateTime))
