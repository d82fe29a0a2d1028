# SPDX-License-Identifier: Apache-2.0
"""vGPUs for VMs on a vGPU-Manager host (contract gpu-to-vm.md §1-§3).

A host is a data-center-driver host or a vGPU-Manager host; which one is
read per GPU (NVML virtualization mode HOST_VGPU), never configured. On a
vGPU-Manager host the GPU's SR-IOV VFs carry its vGPU types, in one of
two layouts: `mdev` (mdev_supported_types/nvidia-NNN under each VF; Nova
creates the mdev) or `vfio` (nvidia/creatable_vgpu_types and
nvidia/current_vgpu_type on each VF; the VF goes to the guest as a PCI
device with its type written). The type catalog comes from NVML.

Placement (see docs/nvidia-gpus.md): the GPU's provider keeps the MIG
slice model and gains `VGPU` = its VFs. A MIG-backed type takes its GPU
instance profile's slices and engines plus one VGPU; a time-sliced type
with at most n per GPU takes 1/n of the slices plus one VGPU. One
CUSTOM_VGPU_<TYPE> trait per type that can be placed now is published
after every change, so Placement never grants what the host cannot
place when claims come one after another; the bind checks again under
the GPU's lock.
"""

import collections
import time

from oslo_log import log

from cyborg.common import gpu_classes
from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers.nvidia import mig as mig_mod
from cyborg.drivers.nvidia import resources
from cyborg.drivers.nvidia import state as state_mod
from cyborg.drivers.nvidia import sysfs as sysfs_mod
from cyborg.objects import device as records

LOG = log.getLogger(__name__)
# Seconds a VF whose binding went waits for its release (a cast, run within
# milliseconds normally) before a reconcile clears it as a missed release:
# well past the RPC timeout, so a slow release is never taken for a lost one.
RELEASE_GRACE = 120.0

DATACENTER = 'datacenter'
VGPU_HOST = 'vgpu'
VGPU = gpu_classes.VGPU
HOST_TRAITS = {DATACENTER: 'CUSTOM_GPU_HOST_DATACENTER',
               VGPU_HOST: 'CUSTOM_GPU_HOST_VGPU'}
# MIG instances for host processes and containers (MIG UUID): only on a
# data-center host, and never required by a VM profile.
MIG_NON_VM = 'CUSTOM_GPU_MIG_NON_VM'
TYPE_TRAIT_PREFIX = 'CUSTOM_VGPU_'
_NAME_PREFIXES = ('NVIDIA ', 'GRID ')


def host_kind(gpu):
    return VGPU_HOST if gpu.host_vgpu else DATACENTER


def short_name(type_name):
    """'NVIDIA H200X-1-18C' → 'H200X-1-18C'."""
    for prefix in _NAME_PREFIXES:
        if type_name.startswith(prefix):
            return type_name[len(prefix):]
    return type_name


def type_trait(vgpu_type):
    return TYPE_TRAIT_PREFIX + resources.trait_part(short_name(
        vgpu_type.name))


def mdev_type(vgpu_type):
    """The mdev type directory name Nova creates an mdev of."""
    return 'nvidia-%d' % vgpu_type.id


def type_vector(gpu, vgpu_type):
    """What one vGPU of the type takes from the GPU's provider."""
    if vgpu_type.mig_backed:
        profile = next((p for p in gpu.profiles
                        if p.id == vgpu_type.gi_profile_id), None)
        if profile is None:
            return None
        vector = resources.profile_vector(profile)
    else:
        totals = resources.totals(gpu.profiles)
        n = max(1, vgpu_type.max_instances)
        vector = {resources.MEM_SLICE: max(1, totals[resources.MEM_SLICE]
                                           // n),
                  resources.COMPUTE_SLICE: max(
                      1, totals[resources.COMPUTE_SLICE] // n)}
    vector[VGPU] = 1
    return vector


def requested_type(gpu, group):
    """The vGPU type a request group names by its required trait;
    PrepareError with the valid names otherwise.
    """
    by_trait = {type_trait(t): t for t in gpu.vgpu_types}
    named = [key.split(':', 1)[1] for key, value in group.items()
             if key.startswith('trait') and value == 'required'
             and key.split(':', 1)[1].startswith(TYPE_TRAIT_PREFIX)]
    if len(named) == 1 and named[0] in by_trait:
        return by_trait[named[0]]
    raise base.PrepareError(
        'The request names %s; a vGPU request on GPU %s must require '
        'exactly one of: %s' % (', '.join(named) or 'no vGPU type',
                                gpu.address, ', '.join(sorted(by_trait))))


class VgpuState:
    """What is on a vGPU GPU now: type id per VF in use (configured by
    the vGPU Manager, or bound by us and not yet configured) and the VFs
    someone else configured.
    """

    def __init__(self, gpu, vfs, views, bound, known=True):
        """known: the bindings are known (the agent reconciled once);
        before that, a configured VF no binding names is in use, not
        someone else's (an agent restart on a host with our vGPUs).
        """
        self.gpu = gpu
        self.vfs = vfs
        self.views = views
        self.layout = next((v['layout'] for v in views.values()
                            if v['layout']), None)
        self.in_use = {}        # VF → type id
        self.foreign = []       # VFs configured by someone else
        self.unknown = []       # configured, bindings not known yet
        for vf in vfs:
            view = views[vf]
            configured = view['current'] or next(
                iter(view['mdevs'].values()), None)
            if vf in bound:
                self.in_use[vf] = bound[vf]
            elif configured:
                self.in_use[vf] = configured
                (self.foreign if known else self.unknown).append(vf)

    def counts(self):
        return collections.Counter(self.in_use.values())


class Vgpu:
    """vGPU types on the VFs of vGPU-Manager GPUs: what Placement is told
    and binding a vGPU (a VF, and a GPU instance for MIG-backed types).
    """

    def __init__(self, state, mig_binding):
        self.state = state
        self.mig = mig_binding
        # GPU address → {VF: type id} held by bindings (from the DB, and
        # prepared here before the DB knows).
        self._bound = collections.defaultdict(dict)
        self._mine = collections.defaultdict(dict)
        # GPU address → {VF: (type id, since)}: VFs whose binding went
        # (unbind, delete) and whose release has not cleared them yet. The
        # agent learns the binding is gone before its release runs; until
        # then the VF is still configured, and ours, not someone else's
        # vGPU (which would take the whole GPU off Placement). One still
        # here release_grace seconds later missed its release (a lost
        # cast): the next reconcile clears it.
        self._releasing = collections.defaultdict(dict)
        self.release_grace = RELEASE_GRACE
        self._reconciled = False    # the bindings are not known yet

    # What bindings hold ------------------------------------------------------

    def reconcile(self, prepared):
        """Learn the VFs bound ARQs hold ({deployable: [handle]}).
        Returns True when that changed.
        """
        bound = collections.defaultdict(dict)
        for address, handles in prepared.items():
            for handle in handles:
                info = state_mod.attach_info(handle)
                type_id = vgpu_type_id(info)
                if type_id is not None:
                    bound[address][records.pci_address(info)] = type_id
        for address, vfs in bound.items():
            for vf in vfs:
                self._mine[address].pop(vf, None)
                self._releasing[address].pop(vf, None)
        now = time.monotonic()
        for address, vfs in self._bound.items():
            for vf, type_id in vfs.items():
                if vf not in bound.get(address, {}):
                    self._releasing[address][vf] = (type_id, now)
        changed = dict(bound) != {a: v for a, v in self._bound.items() if v}
        changed |= not self._reconciled
        self._bound = bound
        self._reconciled = True
        return changed

    def bound(self, address):
        held = {vf: type_id for vf, (type_id, _) in
                self._releasing.get(address, {}).items()}
        held.update(self._bound.get(address, {}))
        held.update(self._mine[address])
        return held

    def clear_missed_releases(self):
        """Clear the vGPU type of each VF whose binding went more than
        release_grace seconds ago and whose release never came (a lost
        cast). True when one was cleared.
        """
        cleared = False
        due = time.monotonic() - self.release_grace
        for address, releasing in list(self._releasing.items()):
            if not any(since <= due for _, since in releasing.values()):
                continue
            with self.state.locks[address]:
                for vf, (type_id, since) in sorted(releasing.items()):
                    if since > due:
                        continue
                    LOG.warning('VF %s of GPU %s still holds vGPU type %s '
                                'of a binding that went (missed release); '
                                'clearing it', vf, address, type_id)
                    self._clear_type(vf, type_id)
                    del releasing[vf]
                    cleared = True
        return cleared

    def _clear_type(self, vf, type_id):
        try:
            if self.state.sysfs.vf_vgpu(vf)['current'] == type_id:
                self.state.sysfs.set_vgpu_type(vf, 0)
        except (OSError, sysfs_mod.VgpuError) as e:
            LOG.error('Could not clear the vGPU type of VF %s: %s', vf, e)

    def restore(self, prepared):
        """Write again the vGPU type of each VF a bound ARQ holds that lost
        it (vfio layout): a host reboot leaves no VF configured (the vGPU
        Manager keeps none; NVIDIA's vgpu-device-manager re-applies its
        configuration at every boot), as it leaves no GPU instance. Called
        after the GPU instances were re-created (MigBinding.reconcile).
        Returns True when a VF was configured again.
        """
        restored = False
        sysfs = self.state.sysfs
        for address, handles in prepared.items():
            wanted = {}
            for handle in handles:
                info = state_mod.attach_info(handle)
                if 'managed' in info and vgpu_type_id(info) is not None:
                    wanted[records.pci_address(info)] = vgpu_type_id(info)
            if not wanted or sysfs.driver(address) != 'nvidia':
                continue
            with self.state.locks[address]:
                for vf, type_id in sorted(wanted.items()):
                    restored |= self._restore(address, vf, type_id)
        return restored

    def _restore(self, address, vf, type_id):
        if self._bound.get(address, {}).get(vf) != type_id:
            return False        # released since the ARQs were listed
        try:
            view = self.state.sysfs.vf_vgpu(vf)
        except OSError as e:
            LOG.error('Cannot read the vGPU type of VF %s: %s', vf, e)
            return False
        if view['layout'] != 'vfio' or view['current'] == type_id:
            return False
        if view['current']:
            LOG.error('VF %s of GPU %s holds vGPU type %s, its binding '
                      'type %s; leaving it', vf, address, view['current'],
                      type_id)
            return False
        LOG.warning('VF %s of GPU %s lost its vGPU type %s (host reboot?); '
                    'writing it again', vf, address, type_id)
        try:
            self.state.sysfs.set_vgpu_type(vf, type_id)
        except sysfs_mod.VgpuError as e:
            LOG.error('Could not configure VF %s again: %s', vf, e)
            return False
        return True

    def view(self, gpu, vfs):
        views = self.state.sysfs.vfs_vgpu(vfs)
        return VgpuState(gpu, vfs, views, self.bound(gpu.address),
                         known=self._reconciled)

    # Placement -------------------------------------------------------------

    def handles(self, vgpu_state):
        kind = 'MDEV' if vgpu_state.layout == 'mdev' else 'PCI'
        return [records.AttachHandle(kind, records.pci_info(vf))
                for vf in vgpu_state.vfs]

    def placeable(self, gpu, vgpu_state, slots):
        """The vGPU types one more vGPU of could be placed now."""
        if not vgpu_state.layout:
            return []
        free_vfs = len(vgpu_state.vfs) - len(vgpu_state.in_use)
        if free_vfs <= 0:
            return []
        counts = vgpu_state.counts()
        by_id = {t.id: t for t in gpu.vgpu_types}
        live = {by_id[t] for t in counts if t in by_id}
        sliced_live = {t.id for t in live if not t.mig_backed}
        fitting = mig_mod.fitting(slots, gpu.profiles) if gpu.profiles \
            else set()
        out = []
        for t in gpu.vgpu_types:
            if t.mig_backed:
                ok = not sliced_live and t.gi_profile_id in fitting
            else:
                ok = (not slots and not any(x.mig_backed for x in live)
                      and counts[t.id] < t.max_instances
                      and (gpu.vgpu_heterogeneous
                           or sliced_live <= {t.id}))
                if ok and gpu.vgpu_heterogeneous:
                    ok = self._sliced_room(gpu, counts, by_id, t)
            if ok:
                out.append(t)
        return out

    @staticmethod
    def _sliced_room(gpu, counts, by_id, wanted):
        """Mixed sizes: the time-sliced vGPUs' slices still fit."""
        total = resources.totals(gpu.profiles)[resources.MEM_SLICE]
        used = sum(type_vector(gpu, by_id[t])[resources.MEM_SLICE] * n
                   for t, n in counts.items() if t in by_id)
        return used + type_vector(gpu, wanted)[resources.MEM_SLICE] <= total

    def inventories(self, gpu, vgpu_state, invs, slots):
        """The GPU's slice inventories plus VGPU, fenced where a
        time-sliced type reached its count (equal-size mode).
        """
        invs = dict(invs)
        invs[VGPU] = {'total': len(vgpu_state.vfs), 'reserved': len(
            vgpu_state.foreign), 'min_unit': 1, 'max_unit': 1,
            'step_size': 1, 'allocation_ratio': 1.0}
        counts = vgpu_state.counts()
        by_id = {t.id: t for t in gpu.vgpu_types}
        full = [t for t, n in counts.items()
                if t in by_id and not by_id[t].mig_backed
                and not gpu.vgpu_heterogeneous
                and n >= by_id[t].max_instances]
        if full or not self.placeable(gpu, vgpu_state, slots):
            mem = dict(invs[resources.MEM_SLICE])
            mem['reserved'] = mem['total']
            invs[resources.MEM_SLICE] = mem
        return invs

    def traits(self, gpu, vgpu_state, slots):
        return {type_trait(t) for t in self.placeable(gpu, vgpu_state,
                                                      slots)}

    # Binding ---------------------------------------------------------------

    def prepare(self, gpu, group, handle):
        """Configure the handle's VF for the type the group names; the
        attach info updates. The caller holds the GPU's lock.
        """
        info = state_mod.attach_info(handle)
        vf = records.pci_address(info)
        vgpu_type = requested_type(gpu, group)
        sysfs = self.state.sysfs
        functions = sysfs.sriov(gpu.address)
        if vf not in functions['vfs']:
            raise base.PrepareError(
                'VF %s of GPU %s is gone (SR-IOV VFs: %d); the vGPU Manager '
                'must enable them (sriov-manage -e)'
                % (vf, gpu.address, len(functions['vfs'])))
        view = sysfs.vf_vgpu(vf)
        if view['layout'] is None:
            raise base.PrepareError(
                'VF %s of GPU %s shows no vGPU types: is the NVIDIA vGPU '
                'Manager loaded?' % (vf, gpu.address))
        bound = self.bound(gpu.address)
        if vgpu_type_id(info) == vgpu_type.id and (
                vf in self._bound.get(gpu.address, {})
                or vf in self._mine[gpu.address]):
            return None         # a re-driven bind: done before
        if view['current'] or view['mdevs']:
            raise base.PrepareError('VF %s of GPU %s already holds a vGPU'
                                    % (vf, gpu.address))
        gpu = self.state.live(gpu)
        slots = state_mod.slots(gpu, self.state.instances(gpu))
        vgpu_state = VgpuState(gpu, functions['vfs'],
                               sysfs.vfs_vgpu(functions['vfs']), bound)
        if vgpu_type not in self.placeable(gpu, vgpu_state, slots):
            raise base.PrepareError(
                'vGPU type %s cannot be placed on GPU %s now (in use: %s; '
                'MIG instances: %s)' % (
                    short_name(vgpu_type.name), gpu.address,
                    _describe_use(gpu, vgpu_state) or 'nothing',
                    state_mod.describe(gpu, slots) or 'none'))
        updates = {}
        if vgpu_type.mig_backed:
            profile = next(p for p in gpu.profiles
                           if p.id == vgpu_type.gi_profile_id)
            updates.update(self.mig.create(gpu, profile, info,
                                           compute_instance=False))
        elif gpu.mig_capable:
            self._mig_off(gpu)
        # Ours before it is configured: a report pass running meanwhile
        # (it does not take the GPU's lock) must not see a configured VF
        # that no binding holds and take the GPU for someone else's.
        self._mine[gpu.address][vf] = vgpu_type.id
        self._releasing[gpu.address].pop(vf, None)
        try:
            if view['layout'] == 'vfio':
                sysfs.set_vgpu_type(vf, vgpu_type.id)
                updates.update(managed='no', vgpu_type=str(vgpu_type.id))
            else:
                updates['asked_type'] = mdev_type(vgpu_type)
        except sysfs_mod.VgpuError as e:
            self._mine[gpu.address].pop(vf, None)
            if 'mig_start' in updates:
                self.mig.release(gpu.address, updates)
            raise base.PrepareError(str(e))
        LOG.info('vGPU %s on VF %s of GPU %s (%s layout)',
                 short_name(vgpu_type.name), vf, gpu.address,
                 view['layout'])
        return updates

    def _mig_off(self, gpu):
        """Time-sliced vGPUs need MIG mode off: turn it off on a GPU with
        no GPU instance.
        """
        if gpu.mig_current != 1:
            return
        try:
            with self.state.changing(gpu.address, 'MIG mode'):
                current, _, activation = self.state.backend.set_mig_mode(
                    gpu.uuid, False)
        except Exception as e:
            raise base.PrepareError('Turning MIG mode off for GPU %s '
                                    'failed: %s' % (gpu.address, e))
        if current != 0:
            raise base.PrepareError('MIG mode off on GPU %s is pending (NVML '
                                    'activation status: %s)'
                                    % (gpu.address, activation))
        gpu.mig_current = 0

    def release(self, address, info):
        """Undo prepare(): clear the VF's type (vfio layout; Nova removes
        its mdev), destroy the GPU instance. The caller holds the GPU's
        lock.
        """
        vf = records.pci_address(info)
        if 'vgpu_type' in info:
            self._clear_type(vf, int(info['vgpu_type']))
        # Forgotten once cleared: a discovery meanwhile sees it ours.
        self._mine[address].pop(vf, None)
        self._bound.get(address, {}).pop(vf, None)
        self._releasing[address].pop(vf, None)
        if 'mig_start' in info:
            self.mig.release(address, info)


def vgpu_type_id(info):
    """The type id a binding's attach info records, else None."""
    if 'vgpu_type' in info and 'managed' in info:
        return int(info['vgpu_type'])
    if 'asked_type' in info:
        return int(info['asked_type'].rsplit('-', 1)[1])
    return None


def _describe_use(gpu, vgpu_state):
    names = {t.id: short_name(t.name) for t in gpu.vgpu_types}
    return ', '.join('%d × %s' % (n, names.get(t, t))
                     for t, n in sorted(vgpu_state.counts().items()))


def nova_claims(function, vf_views):
    """Why Nova's vGPU configuration claims a GPU, or None: one of its
    functions is in [nvidia] nova_mdev_device_addresses, or it offers a
    type of nova_enabled_mdev_types that no device_addresses narrows.
    """
    narrowed = {}
    for entry in CONF.nvidia.nova_mdev_device_addresses:
        name, _, addresses = entry.partition('=')
        narrowed[name.strip()] = {a.strip() for a in addresses.split(',')
                                  if a.strip()}
    functions = {function['address'], *function['vfs']}
    for name, addresses in narrowed.items():
        if functions & addresses:
            return ("Nova's [mdev_%s] device_addresses name its functions"
                    % name)
    offered = {mdev_type_name for view in vf_views.values()
               for mdev_type_name in ('nvidia-%d' % t for t in view['types'])}
    for name in CONF.nvidia.nova_enabled_mdev_types:
        if name in offered and name not in narrowed:
            return "Nova's [devices] enabled_mdev_types has %s" % name
    return None
