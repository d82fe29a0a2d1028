# SPDX-License-Identifier: Apache-2.0
"""ARQ indexes a new ARQ is not in: on SQLite and PostgreSQL the indexes
of the columns a new ARQ leaves empty hold only the rows that have a
value, and on every backend the plain index of attach_handle_id, which
its unique constraint's index duplicated, is dropped.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06
"""

from alembic import op
import sqlalchemy as sa

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

ARQS = 'extended_accelerator_requests'
# (index, column, its WHERE on SQLite, on PostgreSQL), as of this
# revision (cyborg.db.models.ARQ_PARTIAL_INDEXES declares them).
PARTIAL = (
    ('arqs_instance_uuid_idx', 'instance_uuid',
     'instance_uuid IS NOT NULL', 'instance_uuid IS NOT NULL'),
    ('arqs_device_rp_uuid_idx', 'device_rp_uuid',
     'device_rp_uuid IS NOT NULL', 'device_rp_uuid IS NOT NULL'),
    ('arqs_deployable_id_idx', 'deployable_id',
     'deployable_id IS NOT NULL', 'deployable_id IS NOT NULL'),
    ('arqs_event_pending_idx', 'event_pending',
     'event_pending = 1', 'event_pending = true'),
    ('arqs_bind_owner_idx', 'bind_owner',
     'bind_owner IS NOT NULL', 'bind_owner IS NOT NULL'),
)


def upgrade():
    op.drop_index('arqs_attach_handle_id_idx', table_name=ARQS)
    if op.get_bind().dialect.name not in ('sqlite', 'postgresql'):
        return
    for name, column, sqlite_where, postgresql_where in PARTIAL:
        op.drop_index(name, table_name=ARQS)
        op.create_index(name, ARQS, [column],
                        sqlite_where=sa.text(sqlite_where),
                        postgresql_where=sa.text(postgresql_where))
