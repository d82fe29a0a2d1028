# SPDX-License-Identifier: Apache-2.0
"""Binding MIG instances: a request for fewer memory slices than the GPU
has names a MIG profile, for which a GPU instance + compute instance are
created at the placement the packing policy (mig.choose_start) picks,
and destroyed (CI, then GI) at unbind.

Ownership: which instances bindings hold comes from the DB (reconcile)
or from a prepare the DB has not recorded yet; any other instance is an
orphan, reported through the lifecycle. Instances that a reboot or GPU
reset destroyed are re-created at their recorded placement.
"""

import collections

from oslo_log import log

from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import mig
from cyborg.drivers.nvidia import resources
from cyborg.drivers.nvidia import state as state_mod

LOG = log.getLogger(__name__)


def mig_info(profile, instance):
    """The attach info a binding of `instance` records."""
    info = {'mig_profile': profile.name, 'mig_start': instance.start,
            'mig_gi': instance.gi_id}
    if instance.ci_ids:
        info['mig_ci'] = instance.ci_ids[0]
    if instance.mig_uuids:
        info['mig_uuid'] = instance.mig_uuids[0]
    return info


def vgpu_backed(info):
    """The instance of a binding holds a MIG-backed vGPU (no compute
    instance on the host).
    """
    return 'vgpu_type' in info or 'asked_type' in info


def _existing(profile, instances, info):
    """A re-driven bind finds the instance it made before."""
    if info.get('mig_profile') != profile.name or 'mig_start' not in info:
        return None
    start = int(info['mig_start'])
    return next((i for i in instances if i.profile_id == profile.id
                 and i.start == start), None)


class MigBinding:

    def __init__(self, state):
        self.state = state
        self._claimed = {}    # address → {(profile name, start)} from the DB
        self._mine = collections.defaultdict(set)   # created, not yet in DB

    # Ownership -------------------------------------------------------------

    def orphans(self, gpu, slots):
        """The slots no binding is known to hold."""
        names = {p.id: p.name for p in gpu.profiles}
        known = (self._claimed.get(gpu.address, set())
                 | self._mine[gpu.address])
        return [s for s in slots
                if (names[s.profile_id], s.start) not in known]

    def forget_made(self, address):
        """Instances made here but not yet in the DB are gone (reclaim)."""
        self._mine[address].clear()

    def reconcile(self, prepared):
        """Learn which MIG instances bound ARQs own ({deployable name:
        [handle {uuid, attach_info}]}, GPU deployables only); re-create
        those a reboot destroyed. Returns (changed, {handle uuid: new
        attach info}): changed when what the last discovery reported is
        out of date.
        """
        updates = {}
        claimed = {}
        for address, handles in prepared.items():
            infos = [(h['uuid'], state_mod.attach_info(h)) for h in handles]
            claimed[address] = {(i['mig_profile'], int(i['mig_start']))
                                for _, i in infos if 'mig_start' in i}
            with self.state.locks[address]:
                self._mine[address] -= claimed[address]
                updates.update(self._recreate_lost(address, infos))
        claimed = {a: c for a, c in claimed.items() if c}
        changed = bool(updates) or claimed != self._claimed
        self._claimed = claimed
        return changed, updates

    def _recreate_lost(self, address, infos):
        gpu = self.state.geometry.get(address)
        wanted = [(u, i) for u, i in infos if 'mig_start' in i]
        if gpu is None or not wanted or \
                self.state.sysfs.driver(address) != 'nvidia':
            return {}
        live = {(i.profile_id, i.start) for i in self.state.instances(gpu)}
        by_name = {p.name: p for p in gpu.profiles}
        updates = {}
        for handle_uuid, info in wanted:
            profile = by_name.get(info['mig_profile'])
            start = int(info['mig_start'])
            if profile is None or (profile.id, start) in live:
                continue
            LOG.warning('MIG instance %s@%d of handle %s on %s is gone (GPU '
                        'reset or host reboot?); re-creating it',
                        profile.name, start, handle_uuid, address)
            try:
                self.ensure_mig_mode(gpu)
                created = self.state.backend.create_instance(
                    gpu.uuid, profile.id, start,
                    compute_instance=not vgpu_backed(info))
            except (base.PrepareError, nvml.NvmlError) as e:
                LOG.error('Could not re-create MIG instance %s@%d on %s: %s',
                          profile.name, start, address, e)
                continue
            updates[handle_uuid] = mig_info(profile, created)
        return updates

    # Binding ---------------------------------------------------------------

    def prepare(self, gpu, group, info):
        """Create (or find again) the instance a request group asks for;
        its attach info updates. The caller holds the GPU's lock.
        """
        vector = resources.request_vector(group)
        if not gpu.mig_capable:
            raise base.PrepareError('GPU %s (%s) does not support MIG'
                                    % (gpu.address, gpu.name))
        profile = mig.match_profile(
            gpu.profiles, vector.get(resources.MEM_SLICE),
            vector.get(resources.COMPUTE_SLICE), vector.get(resources.OFA))
        if profile is None:
            raise base.PrepareError(
                'No MIG profile of %s takes %s memory slices and %s compute '
                'slices' % (gpu.name, vector.get(resources.MEM_SLICE),
                            vector.get(resources.COMPUTE_SLICE, 'any')))
        return self.create(gpu, profile, info)

    def create(self, gpu, profile, info, compute_instance=True):
        """Create (or find again) a GPU instance of `profile` at the
        placement the packing policy picks; its attach info updates. No
        compute instance for a MIG-backed vGPU (the guest makes them).
        The caller holds the GPU's lock.
        """
        sysfs = self.state.sysfs
        if sysfs.driver(gpu.address) != 'nvidia':
            raise base.PrepareError(
                'GPU %s is bound to %s; MIG needs the nvidia driver'
                % (gpu.address, sysfs.driver(gpu.address) or 'no driver'))
        backend = self.state.backend
        gpu = self.state.live(gpu)
        self.ensure_mig_mode(gpu)
        instances = backend.instances(gpu.uuid)
        existing = _existing(profile, instances, info)
        if existing is not None:
            return mig_info(profile, existing)
        for _ in range(2):
            slots = state_mod.slots(gpu, instances)
            start = mig.choose_start(profile, slots, gpu.profiles)
            if start is None:
                raise base.PrepareError(
                    'No free placement for MIG %s on GPU %s (taken: %s)'
                    % (profile.name, gpu.address,
                       state_mod.describe(gpu, slots) or 'nothing'))
            try:
                created = backend.create_instance(
                    gpu.uuid, profile.id, start,
                    compute_instance=compute_instance)
            except nvml.NvmlError as e:
                if e.kind != 'InsufficientResources':
                    raise base.PrepareError(
                        'Creating MIG %s@%d on %s failed: %s'
                        % (profile.name, start, gpu.address, e))
                # Someone else took it meanwhile: look again.
                instances = backend.instances(gpu.uuid)
                continue
            self._mine[gpu.address].add((profile.name, start))
            LOG.info('Created MIG %s@%d on GPU %s (%s)', profile.name, start,
                     gpu.address, ','.join(created.mig_uuids))
            return mig_info(profile, created)
        raise base.PrepareError('MIG %s on GPU %s: placements kept changing'
                                % (profile.name, gpu.address))

    def ensure_mig_mode(self, gpu):
        """Turn MIG mode on where [nvidia] enable_mig_on_demand allows and
        it takes effect at once; PrepareError otherwise, saying what it
        waits for (NVML's activationStatus) and who holds the GPU.
        """
        if gpu.mig_current == 1:
            return
        if not CONF.nvidia.enable_mig_on_demand:
            if gpu.mig_pending == 1:
                raise base.PrepareError('MIG mode on GPU %s is pending a GPU '
                                        'reset' % gpu.address)
            raise base.PrepareError('MIG mode is off on GPU %s and [nvidia] '
                                    'enable_mig_on_demand is False'
                                    % gpu.address)
        if gpu.processes:
            raise base.PrepareError('Cannot turn MIG mode on for GPU %s: %d '
                                    'processes use it'
                                    % (gpu.address, len(gpu.processes)))
        backend = self.state.backend
        try:
            # Asking again is how a pending request is retried once the
            # GPU is idle (NVML: "idle the device and retry").
            with self.state.changing(gpu.address, 'MIG mode'):
                current, pending, activation = backend.set_mig_mode(
                    gpu.uuid, True)
        except nvml.NvmlError as e:
            hint = (' (MIG changes need root: the agent makes them through '
                    'its privileged helper)' if e.kind == 'NoPermission'
                    else '')
            raise base.PrepareError('Turning MIG mode on for GPU %s failed: '
                                    '%s%s' % (gpu.address, e, hint))
        gpu.mig_current, gpu.mig_pending = current, pending
        if current != 1:
            raise base.PrepareError(self._pending(gpu, activation))
        LOG.info('MIG mode turned on for GPU %s', gpu.address)

    def _pending(self, gpu, activation):
        """Why MIG mode did not apply, in operator terms."""
        if activation == 'InUse':
            try:
                holders = self.state.backend.holders(gpu.uuid)
            except nvml.NvmlError as e:
                holders = ['unknown: %s' % e]
            return ('MIG mode on GPU %s is pending: the GPU is in use by '
                    'other clients (%s); stop them (DCGM, '
                    'nvidia-persistenced, ...) and bind again'
                    % (gpu.address, ', '.join(holders) or 'not visible to '
                       'this user'))
        if activation == 'ResetRequired':
            return ('MIG mode on GPU %s is pending a GPU reset (a VM reboot '
                    'when this host is itself a pass-through VM)'
                    % gpu.address)
        return ('MIG mode on GPU %s is pending (NVML activation status: %s)'
                % (gpu.address, activation or 'none'))

    def release(self, address, info):
        """Destroy the instance a binding recorded. The caller holds the
        GPU's lock.
        """
        gpu = self.state.geometry.get(address)
        if gpu is None:
            return
        by_name = {p.name: p for p in gpu.profiles}
        profile = by_name.get(info['mig_profile'])
        start = int(info['mig_start'])
        self._mine[address].discard((info['mig_profile'], start))
        self._claimed.get(address, set()).discard((info['mig_profile'],
                                                   start))
        if profile is None:
            return
        # GI ids are reused after destroy: destroy only the instance at the
        # recorded placement, whatever its id is now.
        backend = self.state.backend
        for instance in backend.instances(gpu.uuid):
            if instance.profile_id == profile.id and instance.start == start:
                backend.destroy_instance(gpu.uuid, instance.gi_id)
                LOG.info('Destroyed MIG %s@%d on GPU %s', profile.name, start,
                         address)
                return
        LOG.info('MIG %s@%d on GPU %s was already gone', profile.name, start,
                 address)
