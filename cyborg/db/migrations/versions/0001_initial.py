# SPDX-License-Identifier: Apache-2.0
"""Initial schema: devices, deployables, attributes, control-path ids,
attach handles, device profiles and accelerator requests.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def _enum(name, *values):
    return sa.Enum(*values, name=name, native_enum=False,
                   create_constraint=True, length=16)


def _common():
    return [
        sa.Column('id', sa.Integer, primary_key=True, autoincrement=True),
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('created_at', sa.DateTime, nullable=False),
        sa.Column('updated_at', sa.DateTime),
    ]


def _table(name, *columns):
    op.create_table(
        name, *_common(), *columns,
        sa.PrimaryKeyConstraint('id', name='pk_' + name),
        sa.UniqueConstraint('uuid', name='uniq_%s0uuid' % name),
        mysql_engine='InnoDB', mysql_charset='utf8mb4')


def _fk(column, target, table, nullable=False, ondelete='RESTRICT'):
    return sa.Column(column, sa.Integer, sa.ForeignKey(
        target + '.id', name='fk_%s_%s' % (table, column),
        ondelete=ondelete), nullable=nullable)


def upgrade():
    _table('devices',
           sa.Column('type', _enum('device_type', 'GPU', 'FPGA', 'AICHIP',
                                   'QAT', 'NIC', 'SSD'), nullable=False),
           sa.Column('vendor', sa.String(255), nullable=False),
           sa.Column('model', sa.String(255), nullable=False),
           sa.Column('std_board_info', sa.Text),
           sa.Column('vendor_board_info', sa.Text),
           sa.Column('hostname', sa.String(255), nullable=False),
           sa.Column('status', _enum('device_status', 'enabled',
                                     'maintaining'), nullable=False))
    op.create_index('devices_type_idx', 'devices', ['type'])
    op.create_index('devices_vendor_idx', 'devices', ['vendor'])
    op.create_index('devices_hostname_idx', 'devices', ['hostname'])

    _table('deployables',
           _fk('parent_id', 'deployables', 'deployables', nullable=True,
               ondelete=None),
           _fk('root_id', 'deployables', 'deployables', nullable=True,
               ondelete=None),
           sa.Column('name', sa.String(255), nullable=False),
           sa.Column('num_accelerators', sa.Integer, nullable=False),
           _fk('device_id', 'devices', 'deployables'),
           sa.Column('rp_uuid', sa.String(36)),
           sa.Column('driver_name', sa.String(100)),
           sa.Column('bitstream_id', sa.String(36)),
           sa.CheckConstraint('num_accelerators >= 0',
                              name='ck_deployables_num_accelerators'))
    op.create_index('deployables_device_id_idx', 'deployables', ['device_id'])
    op.create_index('deployables_parent_id_idx', 'deployables', ['parent_id'])
    op.create_index('deployables_root_id_idx', 'deployables', ['root_id'])
    op.create_index('deployables_rp_uuid_idx', 'deployables', ['rp_uuid'])

    _table('attributes',
           _fk('deployable_id', 'deployables', 'attributes'),
           sa.Column('key', sa.String(255), nullable=False),
           sa.Column('value', sa.Text, nullable=False))
    op.create_index('attributes_deployable_id_key_idx', 'attributes',
                    ['deployable_id', 'key'])
    op.create_index('attributes_key_idx', 'attributes', ['key'])

    _table('controlpath_ids',
           sa.Column('hostname', sa.String(255), nullable=False),
           _fk('device_id', 'devices', 'controlpath_ids'),
           sa.Column('cpid_type', _enum('cpid_type', 'PCI'), nullable=False),
           sa.Column('cpid_info', sa.String(255), nullable=False),
           sa.UniqueConstraint(
               'hostname', 'cpid_type', 'cpid_info',
               name='uniq_controlpath_ids0host0type0info'))
    op.create_index('controlpath_ids_device_id_idx', 'controlpath_ids',
                    ['device_id'])

    _table('attach_handles',
           _fk('deployable_id', 'deployables', 'attach_handles'),
           _fk('cpid_id', 'controlpath_ids', 'attach_handles'),
           sa.Column('in_use', sa.Boolean, nullable=False),
           sa.Column('attach_type', _enum('attach_type', 'PCI', 'MDEV',
                                          'TEST_PCI'), nullable=False),
           sa.Column('attach_info', sa.String(255), nullable=False))
    op.create_index('attach_handles_deployable_id_in_use_idx',
                    'attach_handles', ['deployable_id', 'in_use'])
    op.create_index('attach_handles_cpid_id_idx', 'attach_handles',
                    ['cpid_id'])

    _table('device_profiles',
           sa.Column('name', sa.String(255).with_variant(
               mysql.VARCHAR(255, collation='utf8mb4_bin'), 'mysql',
               'mariadb'), nullable=False),
           sa.Column('profile_json', sa.Text, nullable=False),
           sa.Column('description', sa.Text),
           sa.UniqueConstraint('name', name='uniq_device_profiles0name'))

    arqs = 'extended_accelerator_requests'
    _table(arqs,
           sa.Column('project_id', sa.String(255)),
           sa.Column('state', _enum('arq_state', 'Initial', 'BindStarted',
                                    'Bound', 'Unbound', 'BindFailed',
                                    'UnbindFailed', 'Deleting'),
                     nullable=False),
           _fk('device_profile_id', 'device_profiles', arqs),
           sa.Column('device_profile_group_id', sa.Integer, nullable=False),
           sa.Column('hostname', sa.String(255)),
           sa.Column('device_rp_uuid', sa.String(36)),
           sa.Column('instance_uuid', sa.String(36)),
           _fk('attach_handle_id', 'attach_handles', arqs, nullable=True),
           _fk('deployable_id', 'deployables', arqs, nullable=True),
           sa.Column('bind_failure', sa.String(255)),
           sa.Column('event_pending', sa.Boolean, nullable=False),
           sa.UniqueConstraint('attach_handle_id',
                               name='uniq_arqs0attach_handle_id'),
           sa.CheckConstraint('device_profile_group_id >= 0',
                              name='ck_%s_group_id' % arqs))
    for column in ('project_id', 'instance_uuid', 'device_rp_uuid',
                   'device_profile_id', 'state', 'attach_handle_id',
                   'deployable_id', 'event_pending'):
        op.create_index('arqs_%s_idx' % column, arqs, [column])
