# SPDX-License-Identifier: Apache-2.0
"""Attach handle type MIG: a MIG instance for host processes and
containers (its MIG UUID), which Nova ignores on purpose.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from alembic import op
import sqlalchemy as sa

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


NAME = 'ck_attach_handles_attach_type'
NEW = "attach_type IN ('PCI', 'MDEV', 'MIG', 'TEST_PCI')"


def upgrade():
    """The CHECK constraint of the non-native enum is made again with the
    new value (SQLite: the table is rebuilt in batch mode).
    """
    if op.get_bind().dialect.name == 'sqlite':
        with op.batch_alter_table('attach_handles', recreate='always') as b:
            b.drop_constraint(op.f(NAME), type_='check')
            b.create_check_constraint(op.f(NAME), sa.text(NEW))
        return
    op.drop_constraint(op.f(NAME), 'attach_handles', type_='check')
    op.create_check_constraint(op.f(NAME), 'attach_handles', sa.text(NEW))
