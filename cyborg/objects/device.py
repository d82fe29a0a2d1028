# SPDX-License-Identifier: Apache-2.0
"""The device records drivers report.

A driver only describes hardware; the agent turns its records into
Placement providers and the conductor into DB rows. Records are plain
dataclasses that travel over RPC as dicts (`to_dict`/`from_dict`).
"""

import copy
import dataclasses
import json

from cyborg.common import plain_data


_FIELDS = {}


def _plain(value):
    """dataclasses.asdict's result, without its deepcopy of every scalar
    (an agent's report holds hundreds): immutable scalars are shared,
    containers and anything else copied as asdict copies them.
    """
    return plain_data.copy(value, _other)


def _other(value):
    kind = type(value)
    if hasattr(kind, '__dataclass_fields__'):
        names = _FIELDS.get(kind)
        if names is None:
            names = _FIELDS[kind] = tuple(
                f.name for f in dataclasses.fields(kind))
        return {n: _plain(getattr(value, n)) for n in names}
    return copy.deepcopy(value)


def canonical_json(value):
    """Stable JSON for fields that are compared and stored as strings."""
    return json.dumps(value, sort_keys=True, separators=(', ', ': '))


@dataclasses.dataclass
class AttachHandle:
    attach_type: str            # PCI | MDEV | MIG | MPS | TEST_PCI
    attach_info: dict           # e.g. {"domain","bus","device","function"}


@dataclasses.dataclass
class Deployable:
    name: str                   # unique on its host, e.g. a PCI address
    num_accelerators: int
    resource_class: str         # PGPU, FPGA, CUSTOM_*
    traits: list                # besides OWNER_CYBORG and vendor traits
    attach_handles: list        # [AttachHandle]
    driver_name: str = None
    attributes: dict = dataclasses.field(default_factory=dict)
    rp_uuid: str = None         # filled in by the agent before reporting
    # Several resource classes on one provider (e.g. a GPU's MIG slices and
    # engines): {rc: {total, reserved, max_unit, ...}}. When unset the
    # provider has `num_accelerators` of `resource_class`.
    inventories: dict = None

    def placement_inventories(self, fenced=False):
        if self.inventories:
            invs = {rc: dict(inv) for rc, inv in self.inventories.items()}
        else:
            total = self.num_accelerators
            invs = {self.resource_class: {'total': total, 'max_unit': total,
                                          'reserved': 0}}
        for inv in invs.values():
            inv.setdefault('max_unit', inv['total'])
            inv.setdefault('reserved', 0)
            if fenced:
                inv['reserved'] = inv['total']
        return invs


@dataclasses.dataclass
class Device:
    type: str                   # GPU | FPGA | AICHIP | QAT | NIC | SSD
    vendor: str                 # PCI vendor id, e.g. "10de"
    model: str
    controlpath_id: dict        # {"cpid_type": "PCI", "cpid_info": {...}}
    deployables: list           # [Deployable]
    product_id: str = None
    std_board_info: dict = None
    vendor_board_info: str = None
    # Lifecycle (cyborg.common.lifecycle): the driver proposes a phase and
    # fills `observations`; the agent settles phase, management state and
    # conditions before reporting.
    phase: str = None
    management_state: str = None
    conditions: list = None
    observations: dict = None

    @property
    def cpid_key(self):
        return cpid_key(self.controlpath_id['cpid_type'],
                        canonical_json(self.controlpath_id['cpid_info']))

    def to_dict(self):
        return _plain(self)

    @classmethod
    def from_dict(cls, data):
        data = dict(data)
        data['deployables'] = [
            Deployable(**dict(d, attach_handles=[
                AttachHandle(**h) for h in d['attach_handles']]))
            for d in data['deployables']]
        return cls(**data)


# Keys a driver's prepare() may add to a handle's attach info (a MIG
# instance, the driver to restore, what a GPU share grants). They describe
# the binding, not the handle: reports match handles without them, and
# freeing drops them.
PREPARED_KEYS = frozenset(('mig_uuid', 'mig_gi', 'mig_ci', 'mig_profile',
                           'mig_start', 'restore_driver', 'restore_group',
                           'restore_persistence', 'share_mode',
                           'share_memory_mb', 'share_percent', 'vgpu_type',
                           'asked_type', 'managed'))


def handle_identity(attach_info):
    """The attach info of a handle as its driver reports it."""
    info = json.loads(attach_info) if isinstance(attach_info, str) \
        else attach_info
    return {k: v for k, v in info.items() if k not in PREPARED_KEYS}


def handle_key(attach_info):
    """A stored attach info (JSON) as the driver reports it, for diffs."""
    if not any(k in attach_info for k in PREPARED_KEYS):
        return attach_info
    return canonical_json(handle_identity(attach_info))


def cpid_key(cpid_type, cpid_info):
    """How a device is recognised across reports: its control-path id."""
    return '%s:%s' % (cpid_type, cpid_info)


def pci_info(address):
    """'0000:1b:00.0' → Cyborg's PCI attach/cpid info dict."""
    domain, bus, rest = address.split(':')
    device, function = rest.split('.')
    return {'domain': domain, 'bus': bus, 'device': device,
            'function': function}


def pci_address(info):
    """Cyborg's PCI attach/cpid info dict → '0000:1b:00.4'."""
    return '%s:%s:%s.%s' % (info['domain'], info['bus'], info['device'],
                            info['function'])
