# SPDX-License-Identifier: Apache-2.0
"""Tables. Shapes follow Cyborg's schema (contract §5); constraints are
tightened so that invalid data cannot be stored, and every column an API
filter reads has an index.
"""

import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy import orm

from cyborg.common import lifecycle

DEVICE_TYPES = ('GPU', 'FPGA', 'AICHIP', 'QAT', 'NIC', 'SSD')
DEVICE_STATUSES = ('enabled', 'maintaining')
ATTACH_TYPES = ('PCI', 'MDEV', 'MIG', 'MPS', 'TEST_PCI')
CPID_TYPES = ('PCI',)
SHARE_MODES = ('none', 'mps', 'time-slice')
ARQ_STATES = ('Initial', 'BindStarted', 'Bound', 'Unbound', 'BindFailed',
              'UnbindFailed', 'Deleting')


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


class Base(orm.DeclarativeBase):
    metadata = sa.MetaData(naming_convention={
        'ix': '%(table_name)s_%(column_0_N_name)s_idx',
        'uq': 'uniq_%(table_name)s0%(column_0_N_name)s',
        'ck': 'ck_%(table_name)s_%(constraint_name)s',
        'fk': 'fk_%(table_name)s_%(column_0_name)s',
        'pk': 'pk_%(table_name)s',
    })


class _Common:
    """Integer key, public uuid and timestamps, as every Cyborg table has."""
    id = sa.Column(sa.Integer, primary_key=True, autoincrement=True)
    uuid = sa.Column(sa.String(36), nullable=False, unique=True)
    created_at = sa.Column(sa.DateTime, nullable=False, default=utcnow)
    updated_at = sa.Column(sa.DateTime, nullable=True, onupdate=utcnow)


def _enum(values, name):
    return sa.Enum(*values, name=name, native_enum=False,
                   create_constraint=True, length=16)


class Device(_Common, Base):
    __tablename__ = 'devices'
    __table_args__ = (
        sa.Index('devices_type_idx', 'type'),
        sa.Index('devices_vendor_idx', 'vendor'),
        sa.Index('devices_hostname_idx', 'hostname'),
    )
    type = sa.Column(_enum(DEVICE_TYPES, 'device_type'), nullable=False)
    vendor = sa.Column(sa.String(255), nullable=False)
    model = sa.Column(sa.String(255), nullable=False)
    std_board_info = sa.Column(sa.Text)
    vendor_board_info = sa.Column(sa.Text)
    hostname = sa.Column(sa.String(255), nullable=False)
    status = sa.Column(_enum(DEVICE_STATUSES, 'device_status'),
                       nullable=False, default='enabled')
    # Lifecycle as the device's agent last settled it (cyborg.common.
    # lifecycle), and what operators asked for.
    phase = sa.Column(_enum(lifecycle.PHASES, 'device_phase'))
    management_state = sa.Column(_enum(lifecycle.STATES,
                                       'device_management_state'))
    conditions = sa.Column(sa.Text)
    excluded = sa.Column(sa.Boolean, nullable=False, default=False)
    reclaim_requested_at = sa.Column(sa.DateTime)
    reset_requested_at = sa.Column(sa.DateTime)
    # Sharing by capacity the operator asked for (its agent sets it up).
    share_mode = sa.Column(_enum(SHARE_MODES, 'device_share_mode'))
    share_slots = sa.Column(sa.Integer)


class Deployable(_Common, Base):
    __tablename__ = 'deployables'
    __table_args__ = (
        sa.Index('deployables_device_id_idx', 'device_id'),
        sa.Index('deployables_parent_id_idx', 'parent_id'),
        sa.Index('deployables_root_id_idx', 'root_id'),
        sa.Index('deployables_rp_uuid_idx', 'rp_uuid'),
        sa.CheckConstraint('num_accelerators >= 0',
                           name='num_accelerators'),
    )
    parent_id = sa.Column(sa.Integer, sa.ForeignKey('deployables.id'))
    root_id = sa.Column(sa.Integer, sa.ForeignKey('deployables.id'))
    name = sa.Column(sa.String(255), nullable=False)
    num_accelerators = sa.Column(sa.Integer, nullable=False)
    device_id = sa.Column(sa.Integer,
                          sa.ForeignKey('devices.id', ondelete='RESTRICT'),
                          nullable=False)
    rp_uuid = sa.Column(sa.String(36))
    driver_name = sa.Column(sa.String(100))
    bitstream_id = sa.Column(sa.String(36))


class Attribute(_Common, Base):
    __tablename__ = 'attributes'
    __table_args__ = (
        sa.Index('attributes_deployable_id_key_idx', 'deployable_id', 'key'),
        sa.Index('attributes_key_idx', 'key'),
    )
    deployable_id = sa.Column(
        sa.Integer, sa.ForeignKey('deployables.id', ondelete='RESTRICT'),
        nullable=False)
    key = sa.Column(sa.String(255), nullable=False)
    value = sa.Column(sa.Text, nullable=False)


class ControlpathID(_Common, Base):
    __tablename__ = 'controlpath_ids'
    __table_args__ = (
        sa.Index('controlpath_ids_device_id_idx', 'device_id'),
        # A PCI address is unique on its host only.
        sa.UniqueConstraint('hostname', 'cpid_type', 'cpid_info',
                            name='uniq_controlpath_ids0host0type0info'),
    )
    hostname = sa.Column(sa.String(255), nullable=False)
    device_id = sa.Column(sa.Integer,
                          sa.ForeignKey('devices.id', ondelete='RESTRICT'),
                          nullable=False)
    cpid_type = sa.Column(_enum(CPID_TYPES, 'cpid_type'), nullable=False)
    cpid_info = sa.Column(sa.String(255), nullable=False)


class AttachHandle(_Common, Base):
    __tablename__ = 'attach_handles'
    __table_args__ = (
        sa.Index('attach_handles_deployable_id_in_use_idx',
                 'deployable_id', 'in_use'),
        sa.Index('attach_handles_cpid_id_idx', 'cpid_id'),
    )
    deployable_id = sa.Column(
        sa.Integer, sa.ForeignKey('deployables.id', ondelete='RESTRICT'),
        nullable=False)
    cpid_id = sa.Column(
        sa.Integer, sa.ForeignKey('controlpath_ids.id', ondelete='RESTRICT'),
        nullable=False)
    in_use = sa.Column(sa.Boolean, nullable=False, default=False)
    attach_type = sa.Column(_enum(ATTACH_TYPES, 'attach_type'),
                            nullable=False)
    attach_info = sa.Column(sa.String(255), nullable=False)


class DeviceProfile(_Common, Base):
    __tablename__ = 'device_profiles'
    __table_args__ = (
        sa.UniqueConstraint('name', name='uniq_device_profiles0name'),
    )
    # Compared byte for byte on every backend: MySQL's default collation
    # would make "GPU" and "gpu" one profile.
    name = sa.Column(sa.String(255).with_variant(
        mysql.VARCHAR(255, collation='utf8mb4_bin'), 'mysql', 'mariadb'),
        nullable=False)
    profile_json = sa.Column(sa.Text, nullable=False)
    description = sa.Column(sa.Text)


def _only_where(condition):
    """An index's WHERE on SQLite and PostgreSQL (MariaDB has no partial
    indexes: there it indexes every row).
    """
    return {'sqlite_where': sa.text(condition),
            'postgresql_where': sa.text(condition)}


# Indexes of ARQ columns that a new ARQ leaves empty (NULL, or false for
# event_pending) and that are only ever looked up by a value (`=`, `IN`,
# a join, IS NOT NULL, event_pending = 1): each holds only the rows that
# have one. Every index a row is in is one more B-tree page written, and
# on SQLite one more page in the log each commit fsyncs; an ARQ's create
# wrote to twelve B-trees on SQLite, now six. The lookups use them as
# before (SQLite and PostgreSQL use a partial index for `column = value`,
# which implies NOT NULL: tests/db/test_arq_indexes.py). (name, column,
# dialect options; migration 0008 made them.)
ARQ_PARTIAL_INDEXES = (
    ('arqs_instance_uuid_idx', 'instance_uuid',
     _only_where('instance_uuid IS NOT NULL')),
    ('arqs_device_rp_uuid_idx', 'device_rp_uuid',
     _only_where('device_rp_uuid IS NOT NULL')),
    ('arqs_deployable_id_idx', 'deployable_id',
     _only_where('deployable_id IS NOT NULL')),
    # As the re-drive's query says it (sa.true(): 1 on SQLite, true on
    # PostgreSQL), which SQLite needs word for word.
    ('arqs_event_pending_idx', 'event_pending',
     {'sqlite_where': sa.text('event_pending = 1'),
      'postgresql_where': sa.text('event_pending = true')}),
    ('arqs_bind_owner_idx', 'bind_owner',
     _only_where('bind_owner IS NOT NULL')),
)


class ExtendedAcceleratorRequest(_Common, Base):
    __tablename__ = 'extended_accelerator_requests'
    __table_args__ = (
        sa.Index('arqs_project_id_idx', 'project_id'),
        sa.Index('arqs_device_profile_id_idx', 'device_profile_id'),
        sa.Index('arqs_state_idx', 'state'),
        *(sa.Index(name, column, **where)
          for name, column, where in ARQ_PARTIAL_INDEXES),
        # One attach handle serves at most one ARQ: a second binder cannot
        # take a handle that is already recorded against another request.
        # (Its index is the one every lookup by handle uses.)
        sa.UniqueConstraint('attach_handle_id',
                            name='uniq_arqs0attach_handle_id'),
        sa.CheckConstraint('device_profile_group_id >= 0',
                           name='group_id'),
    )
    project_id = sa.Column(sa.String(255))
    state = sa.Column(_enum(ARQ_STATES, 'arq_state'), nullable=False,
                      default='Initial')
    device_profile_id = sa.Column(
        sa.Integer, sa.ForeignKey('device_profiles.id', ondelete='RESTRICT'),
        nullable=False)
    device_profile_group_id = sa.Column(sa.Integer, nullable=False, default=0)
    hostname = sa.Column(sa.String(255))
    device_rp_uuid = sa.Column(sa.String(36))
    instance_uuid = sa.Column(sa.String(36))
    attach_handle_id = sa.Column(
        sa.Integer, sa.ForeignKey('attach_handles.id', ondelete='RESTRICT'))
    deployable_id = sa.Column(
        sa.Integer, sa.ForeignKey('deployables.id', ondelete='RESTRICT'))
    bind_failure = sa.Column(sa.String(255))
    # The bind outcome still has to reach Nova (survives restarts).
    event_pending = sa.Column(sa.Boolean, nullable=False, default=False)
    # The conductor driving the bind (cyborg.db.conductors names it; a
    # peer takes the bind over when that conductor stops heartbeating),
    # and when Nova asked for it (the bind's deadline counts from here).
    bind_owner = sa.Column(sa.String(255))
    bind_started_at = sa.Column(sa.DateTime)


class Conductor(Base):
    """A running conductor and its last heartbeat (cyborg.db.conductors)."""
    __tablename__ = 'conductors'
    name = sa.Column(sa.String(255), primary_key=True)
    heartbeat_at = sa.Column(sa.DateTime, nullable=False)
    created_at = sa.Column(sa.DateTime, nullable=False, default=utcnow)
