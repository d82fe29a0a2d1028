"""The `nvidia` accelerator driver: one deployable per physical GPU.

Discovery joins two views: sysfs (every NVIDIA function and the kernel
driver that holds it; VFs are never reported as GPUs) and NVML (identity,
memory, compute capability, MIG profiles and live GPU instances of the GPUs
bound to `nvidia`). A GPU handed to vfio-pci is invisible to NVML, so its
geometry comes from what NVML said before.

Binding: a request for the whole provider takes the physical function's PCI
handle and needs the GPU on the passthrough driver (rebinding only behind
the safety gates); a request for fewer memory slices names a MIG profile,
for which a GPU instance + compute instance are created at a placement the
packing policy picks, and released (CI, then GI) at unbind.

Sharing by capacity: a GPU the operator put into a share mode (MPS or
time-slice) is also reported as a second deployable, `<address>_share`,
whose provider offers percent of the SMs, MiB of memory and client slots.
The agent makes the share pool exclusive with whole/MIG use in Placement
(cyborg.agent.share_pools); binding a share only records what it grants
(and, for VMs, the smallest vGPU type that fits).
"""

import collections
import json
import os
import re
import threading

from oslo_log import log

from cyborg.common import lifecycle
from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers import pci as pci_driver
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import health as health_mod
from cyborg.drivers.nvidia import mig
from cyborg.drivers.nvidia import models
from cyborg.drivers.nvidia import resources
from cyborg.drivers.nvidia import sysfs as sysfs_mod
from cyborg.objects import device as records

LOG = log.getLogger(__name__)


def _mode(driver):
    if driver == 'nvidia':
        return 'Compute'
    if driver == CONF.nvidia.passthrough_driver:
        return 'Passthrough'
    return 'Unbound' if driver is None else 'Unknown'


PrepareError = base.PrepareError
# UUID prefix of a GPU known only from the shipped capture of its product.
UNSEEN = 'unknown-'


def _is_whole(deployable_total, group):
    """A request for every memory slice of the provider is whole-GPU."""
    vector = resources.request_vector(group or {})
    return vector.get(resources.MEM_SLICE, deployable_total) \
        >= deployable_total


SHARE_SUFFIX = '_share'
_FRAMEBUFFER = re.compile(r'framebuffer=(\d+)M', re.I)
_TYPE_SIZE = re.compile(r'-(\d+)[A-Z]*$')


def share_name(address):
    return address + SHARE_SUFFIX


def _share_address(deployable_name):
    if deployable_name.endswith(SHARE_SUFFIX):
        return deployable_name[:-len(SHARE_SUFFIX)]
    return None


def _framebuffer_mb(vgpu_type):
    """MiB of a vGPU type: `framebuffer=NNNNM` in its description, else
    the GB size at the end of its name ('GRID H200-18C' → 18432)."""
    m = _FRAMEBUFFER.search(vgpu_type.get('description') or '')
    if m:
        return int(m.group(1))
    m = _TYPE_SIZE.search((vgpu_type.get('name') or '').strip())
    return int(m.group(1)) * 1024 if m else None


def smallest_vgpu_type(types, memory_mb):
    """The type id with the smallest framebuffer that holds memory_mb."""
    sized = sorted((fb, t['type']) for t in types
                   for fb in [_framebuffer_mb(t)] if fb is not None
                   and fb >= (memory_mb or 0))
    return sized[0][1] if sized else None


def _gpu_from_json(data):
    profiles = tuple(nvml.MigProfile(**dict(
        p, placements=tuple(p['placements']))) for p in data['profiles'])
    return nvml.Gpu(**dict(
        data, compute_capability=tuple(data['compute_capability']),
        processes=(), profiles=profiles))


def _info(handle):
    info = handle.get('attach_info') or {}
    return json.loads(info) if isinstance(info, str) else dict(info)


class NvidiaDriver(base.Driver):
    name = 'nvidia'
    inventory_follows_bindings = True

    def __init__(self, backend=None, sysfs=None):
        self.backend = backend or nvml.PynvmlBackend()
        self.sysfs = sysfs or sysfs_mod.for_root(CONF.nvidia.sysfs_root)
        self._locks = collections.defaultdict(threading.Lock)
        self._geometry = self._load_geometry()   # address → Gpu
        self._claimed = {}    # address → {(profile name, start)} from the DB
        self._mine = collections.defaultdict(set)   # created, not yet in DB
        self._unavailable = None
        self._skipped = {}      # address → why it is not reported
        # Short event waits: an NVML restart (after a GPU comes back to
        # nvidia) waits for the one in progress.
        self.health = health_mod.HealthMonitor(
            self.backend, recovery_after=CONF.nvidia.health_recovery_after,
            wait_ms=250)
        self._nova_specs = [pci_driver.DeviceSpec(spec) for spec in
                            CONF.pci_driver.nova_device_spec]
        self._share_modes = {}    # address → {mode, slots} the operator set
        self._share_bound = {}    # address → share handles bindings hold
        self._share_slots = {}    # address → slots last reported

    def set_share_modes(self, modes):
        """The share modes operators asked for ({address: {mode, slots}};
        absent or mode 'none': no share pool). True when it changes."""
        wanted = {a: {'mode': m['mode'], 'slots': int(m.get('slots') or 10)}
                  for a, m in modes.items()
                  if m and m.get('mode') in resources.SHARE_MODES}
        changed = wanted != self._share_modes
        self._share_modes = wanted
        return changed

    # Discovery -------------------------------------------------------------

    def _nvml_gpus(self):
        try:
            self.backend.open()
            gpus = {g.address: g for g in self.backend.gpus()}
            if self._lost(gpus):
                # NVML enumerates at init: a GPU that came back (or moved
                # drivers) is only seen after starting over.
                self.backend.refresh()
                gpus = {g.address: g for g in self.backend.gpus()}
            self._watch_health(gpus.values())
        except (nvml.NvmlUnavailable, nvml.NvmlError) as e:
            if str(e) != self._unavailable:
                LOG.error('NVIDIA GPUs are not reported on this host: %s', e)
                self._unavailable = str(e)
            return None
        if self._unavailable is not None:
            LOG.info('NVML is usable again')
            self._unavailable = None
        return gpus

    def discover(self):
        gpus = self._nvml_gpus()
        if gpus is None:
            return []
        functions = {f['address']: f for f in self.sysfs.nvidia_gpus()}
        iommu = self.sysfs.iommu_enabled()
        devices = []
        for address in sorted(set(gpus) | {a for a, f in functions.items()
                                           if f['physfn'] is None}):
            function = functions.get(address, {
                'address': address, 'driver': 'nvidia', 'vfs': [],
                'mdevs': [], 'numa_node': -1, 'vendor': '10de',
                'product': None})
            if self._not_ours(function):
                continue
            gpu = gpus.get(address)
            known = True
            if gpu is not None:
                self._remember(gpu)
                try:
                    instances = self._instances(gpu)
                except nvml.NvmlError as e:
                    LOG.warning('Cannot read the MIG instances of GPU %s: '
                                '%s', address, e)
                    instances, known = [], False
            else:
                gpu = self._geometry.get(address) or self._shipped(function)
                if gpu is not None:
                    self._geometry.setdefault(address, gpu)
                instances = None
            if gpu is None:
                LOG.warning('GPU %s is bound to %s and NVML has never seen '
                            'it; skipping it until it is bound to nvidia '
                            'once', address, function['driver'] or 'nothing')
                continue
            device = self._device(gpu, function, instances, iommu)
            device.observations['occupancy_known'] = known
            devices.append(device)
        return devices

    def _watched(self):
        """{address: Gpu} of the GPUs on nvidia that NVML has seen (their
        health is watched; one missing from NVML is lost or returning)."""
        return {a: g for a, g in self._geometry.items()
                if not g.uuid.startswith(UNSEEN)
                and self.sysfs.driver(a) == 'nvidia'}

    def _lost(self, gpus):
        """GPUs the nvidia driver holds that NVML did not list."""
        return [a for a in self._watched() if a not in gpus]

    def _watch_health(self, gpus):
        """XID/ECC events of the GPUs NVML sees, and a health probe of
        every GPU we know on nvidia (a lost one included: that is how it
        comes back)."""
        if not CONF.nvidia.health_events:
            return
        self.health.watch([g.uuid for g in gpus])
        for gpu in self._watched().values():
            self.health.observe(gpu.uuid, self.backend.health_probe(gpu.uuid))

    def start(self):
        """Listen for XID/ECC events (the agent's service starts this)."""
        if CONF.nvidia.health_events:
            self.health.start()

    def stop(self):
        self.health.stop()

    def _shipped(self, function):
        """Geometry of a GPU NVML cannot see (bound to vfio-pci since boot),
        from the shipped capture of the same product, if there is one."""
        model = models.by_product_id(function.get('product'))
        if model is None:
            return None
        return nvml.Gpu(**dict(model, address=function['address'],
                               uuid=UNSEEN + function['address']))

    def _not_ours(self, function):
        """A GPU that someone else manages must not be offered twice: one
        in Nova's [pci] device_spec, or one carved into vGPUs (mdevs)."""
        address = function['address']
        reason = None
        if function['mdevs']:
            reason = ('it is carved into %d vGPU mdev(s) by another service'
                      % len(function['mdevs']))
        elif function['product'] and any(
                s.matches(function) for s in self._nova_specs):
            reason = "Nova's [pci] device_spec claims it"
        if reason and self._skipped.get(address) != reason:
            LOG.warning('Not reporting GPU %s: %s', address, reason)
        if reason:
            self._skipped[address] = reason
        else:
            self._skipped.pop(address, None)
        return reason is not None

    def _instances(self, gpu):
        if not gpu.mig_capable or gpu.mig_current != 1:
            return []
        return self.backend.instances(gpu.uuid)

    def _slots(self, gpu, instances):
        by_id = {p.id: p for p in gpu.profiles}
        return [mig.Slot(i.profile_id, i.start, i.size) for i in instances
                if i.profile_id in by_id]

    def _orphans(self, gpu, slots):
        names = {p.id: p.name for p in gpu.profiles}
        known = (self._claimed.get(gpu.address, set())
                 | self._mine[gpu.address])
        return [s for s in slots
                if (names[s.profile_id], s.start) not in known]

    def _device(self, gpu, function, instances, iommu):
        whole_in_use = instances is None
        slots = self._slots(gpu, instances or [])
        orphans = self._orphans(gpu, slots)
        if orphans:
            # Reported through the lifecycle (OrphanPending, then
            # Orphaned); claims may simply not have reached us yet.
            LOG.debug('GPU %s has MIG instances with no known claim: %s',
                      gpu.address, self._describe(gpu, orphans))
        invs = resources.inventories(gpu.profiles, slots, orphans,
                                     whole_in_use)
        passthrough = iommu and not function['vfs'] and (
            CONF.nvidia.rebind_for_passthrough or function['driver']
            == CONF.nvidia.passthrough_driver)
        traits = (resources.static_traits(gpu, passthrough)
                  | resources.fit_traits(gpu.profiles, slots, whole_in_use))
        attributes = {'gpu_uuid': gpu.uuid}
        if orphans:
            attributes['mig_orphans'] = self._describe(gpu, orphans)
        deployable = records.Deployable(
            name=gpu.address,
            num_accelerators=invs[resources.MEM_SLICE]['total'],
            resource_class=resources.MEM_SLICE, traits=sorted(traits),
            attach_handles=self._handles(gpu, function),
            driver_name=self.name, attributes=attributes, inventories=invs)
        mode = _mode(function['driver'])
        board = {'product_id': gpu.product_id,
                 'numa_node': function['numa_node'],
                 'driver': function['driver'], 'mode': mode,
                 'uuid': gpu.uuid,
                 'memory_mib': gpu.memory_total // (1 << 20),
                 'compute_capability': '%d.%d' % tuple(
                     gpu.compute_capability[:2]),
                 'mig_mode': gpu.mig_current}
        phase, conditions = self._phase(gpu, mode, instances)
        observations = {
            'mode': mode, 'driver': function['driver'],
            'orphan_instances': len(orphans), 'conditions': conditions,
            'adopted': mode == 'Passthrough'
            and CONF.nvidia.adopt_passthrough}
        deployables = [deployable]
        share, observation = self._share(gpu, mode, traits)
        if share is not None:
            deployables.append(share)
        if observation is not None:
            observations['share'] = observation
            board['share_mode'] = observation['mode']
        return records.Device(
            type='GPU', vendor=sysfs_mod.NVIDIA_VENDOR,
            product_id=gpu.product_id, model=gpu.name,
            controlpath_id={'cpid_type': 'PCI',
                            'cpid_info': records.pci_info(gpu.address)},
            deployables=deployables, std_board_info=board,
            vendor_board_info=gpu.uuid, phase=phase,
            observations=observations)

    def _share(self, gpu, mode, gpu_traits):
        """The `_share` deployable of a GPU in a share mode (or one that
        left it while bindings still hold shares: then fully reserved), and
        what the agent needs to know: {mode, slots, ready, draining, why}."""
        wanted = self._share_modes.get(gpu.address)
        bound = self._share_bound.get(gpu.address, 0)
        if wanted is None and not bound:
            self._share_slots.pop(gpu.address, None)
            return None, None
        slots = (wanted['slots'] if wanted
                 else self._share_slots.get(gpu.address, bound))
        slots = max(slots, bound)
        observation = {'mode': wanted['mode'] if wanted else 'none',
                       'slots': slots, 'draining': wanted is None,
                       'ready': True}
        if mode != 'Compute':
            observation.update(ready=False, why=(
                'GPU %s is bound to %s; sharing needs the nvidia driver'
                % (gpu.address, self.sysfs.driver(gpu.address)
                   or 'no driver')))
            if not bound:
                return None, observation
        invs = resources.share_inventories(
            gpu, slots, CONF.nvidia.share_memory_margin_mb,
            fenced=not (wanted and observation['ready']))
        share_mode = wanted['mode'] if wanted else None
        traits = {t for t in gpu_traits
                  if t.startswith(('CUSTOM_GPU_VENDOR_', 'CUSTOM_GPU_MODEL_',
                                   'CUSTOM_GPU_CC_', 'CUSTOM_GPU_NUMA_'))}
        if share_mode:
            traits.add(resources.SHARE_TRAITS[share_mode])
        pf = records.pci_info(gpu.address)
        self._share_slots[gpu.address] = slots
        return records.Deployable(
            name=share_name(gpu.address), num_accelerators=slots,
            resource_class=resources.SHARE_SLOT, traits=sorted(traits),
            attach_handles=[records.AttachHandle('MDEV', dict(
                pf, share_slot=str(n))) for n in range(slots)],
            driver_name=self.name,
            attributes={'gpu_uuid': gpu.uuid,
                        'share_mode': share_mode or 'none'},
            inventories=invs), observation

    def _phase(self, gpu, mode, instances):
        """The phase the hardware allows, with its conditions."""
        if mode == 'Unbound':
            return 'Pending', [lifecycle.condition(
                'DriverReady', 'False', 'NoDriver',
                'no kernel driver is bound to the GPU')]
        if mode == 'Passthrough':
            return 'Ready', [lifecycle.condition(
                'DriverReady', 'True', 'Passthrough',
                'bound to %s; NVML cannot watch it'
                % CONF.nvidia.passthrough_driver)]
        conditions = [lifecycle.condition('DriverReady', 'True', 'Nvml')]
        phase, why, message = self.health.verdict(gpu.uuid)
        conditions.append(lifecycle.condition(
            'Healthy', str(phase == 'Ready'), why, message))
        if phase != 'Ready':
            return phase, conditions
        if gpu.mig_capable and gpu.mig_pending != gpu.mig_current:
            conditions.append(lifecycle.condition(
                'MigMode', 'False', 'ResetRequired',
                'MIG mode %s is pending a GPU reset'
                % ('on' if gpu.mig_pending else 'off')))
            return 'Reconfiguring', conditions
        return 'Ready', conditions

    @staticmethod
    def _describe(gpu, slots):
        names = {p.id: p.name for p in gpu.profiles}
        return ','.join('%s@%d' % (names[s.profile_id], s.start)
                        for s in slots)

    @staticmethod
    def _handles(gpu, function):
        """The physical function for whole use; for MIG, one handle per
        instance the GPU can hold: its VFs when SR-IOV is on (what a
        hypervisor passes through for MIG-backed vGPU), else MDEV handles
        whose MIG UUID serves non-VM consumers."""
        handles = [records.AttachHandle('PCI', records.pci_info(gpu.address))]
        if not gpu.mig_capable:
            return handles
        most = max(p.max_instances for p in gpu.profiles)
        if function['vfs']:
            handles += [records.AttachHandle('PCI', records.pci_info(vf))
                        for vf in function['vfs'][:most]]
        else:
            handles += [records.AttachHandle('MDEV', dict(
                records.pci_info(gpu.address), mig_slot=str(n)))
                for n in range(most)]
        return handles

    # Geometry cache ----------------------------------------------------------

    def _remember(self, gpu):
        before = self._geometry.get(gpu.address)
        self._geometry[gpu.address] = gpu
        if CONF.nvidia.geometry_cache and (
                before is None or before.profiles != gpu.profiles
                or before.uuid != gpu.uuid):
            self._save_geometry()

    def _load_geometry(self):
        path = CONF.nvidia.geometry_cache
        if not path or not os.path.exists(path):
            return {}
        try:
            with open(path) as f:
                raw = json.load(f)
            return {a: _gpu_from_json(g) for a, g in raw.items()}
        except (OSError, ValueError, TypeError, KeyError) as e:
            LOG.warning('Ignoring unreadable GPU geometry cache %s: %s',
                        path, e)
            return {}

    def _save_geometry(self):
        path = CONF.nvidia.geometry_cache
        tmp = path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump({a: dict(vars(g), processes=[],
                               profiles=[vars(p) for p in g.profiles])
                       for a, g in self._geometry.items()}, f, indent=1,
                      default=list)
        os.replace(tmp, path)

    # Ownership from the DB -------------------------------------------------

    def reconcile(self, prepared):
        """Learn which MIG instances bound ARQs own ({deployable name:
        [handle {uuid, attach_info}]}); re-create those a reboot destroyed.
        Returns (changed, {handle uuid: new attach info}): changed when
        what the last discovery reported is out of date."""
        updates = {}
        claimed = {}
        share_bound = {_share_address(name): len(handles)
                       for name, handles in prepared.items()
                       if _share_address(name) and handles}
        share_changed = share_bound != self._share_bound
        self._share_bound = share_bound
        for address, handles in prepared.items():
            if _share_address(address):
                continue
            infos = [(h['uuid'], _info(h)) for h in handles]
            claimed[address] = {(i['mig_profile'], int(i['mig_start']))
                                for _, i in infos if 'mig_start' in i}
            with self._locks[address]:
                self._mine[address] -= claimed[address]
                updates.update(self._recreate_lost(address, infos))
        claimed = {a: c for a, c in claimed.items() if c}
        changed = bool(updates) or claimed != self._claimed or share_changed
        self._claimed = claimed
        return changed, updates

    def _recreate_lost(self, address, infos):
        gpu = self._geometry.get(address)
        wanted = [(u, i) for u, i in infos if 'mig_start' in i]
        if gpu is None or not wanted or self.sysfs.driver(address) != 'nvidia':
            return {}
        live = {(i.profile_id, i.start) for i in self._instances(gpu)}
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
                self._ensure_mig_mode(gpu)
                created = self.backend.create_instance(gpu.uuid, profile.id,
                                                       start)
            except (PrepareError, nvml.NvmlError) as e:
                LOG.error('Could not re-create MIG instance %s@%d on %s: %s',
                          profile.name, start, address, e)
                continue
            updates[handle_uuid] = self._mig_info(profile, created)
        return updates

    # Binding ---------------------------------------------------------------

    @classmethod
    def pick_handles(cls, deployable, request_group, handles):
        if _share_address(deployable['name']):
            return [h for h in handles if 'share_slot' in _info(h)]
        pf = records.pci_info(deployable['name'])
        whole = _is_whole(deployable['num_accelerators'], request_group)
        return [h for h in handles
                if (_info(h) == pf) == whole]

    def prepare(self, deployable_name, handle):
        if _share_address(deployable_name):
            return self._prepare_share(_share_address(deployable_name),
                                       handle)
        address = deployable_name
        with self._locks[address]:
            gpu = self._geometry.get(address)
            if gpu is None:
                raise PrepareError('GPU %s is not known to the nvidia driver '
                                   'on this host' % address)
            total = resources.totals(gpu.profiles)[resources.MEM_SLICE]
            group = handle.get('request_group') or {}
            if _is_whole(total, group):
                return self._prepare_whole(gpu)
            return self._prepare_mig(gpu, group, _info(handle))

    def release(self, deployable_name, handle):
        address = deployable_name
        info = _info(handle)
        with self._locks[address]:
            if 'mig_start' in info:
                self._release_mig(address, info)
            elif info.get('restore_driver'):
                self.sysfs.rebind(address, info['restore_driver'])
                self.backend.refresh()
                LOG.info('GPU %s returned to %s', address,
                         info['restore_driver'])

    # Shares ----------------------------------------------------------------

    def _prepare_share(self, address, handle):
        """What a share grants; Placement already counted it against the
        pool. Nothing is made on the GPU: MPS/time-slice consumers enforce
        (or not) their limits themselves. For VMs, the smallest vGPU type
        that holds the memory (when the host has the vGPU manager)."""
        wanted = self._share_modes.get(address)
        if wanted is None:
            raise PrepareError('GPU %s is not in a share mode' % address)
        vector = resources.request_vector(handle.get('request_group') or {})
        memory = vector.get(resources.MEMORY_MB)
        percent = vector.get(resources.CORE_PERCENT)
        if memory is None and percent is None:
            raise PrepareError('A share of GPU %s asks for neither %s nor %s'
                               % (address, resources.MEMORY_MB,
                                  resources.CORE_PERCENT))
        info = {'share_mode': wanted['mode']}
        if memory is not None:
            info['share_memory_mb'] = memory
        if percent is not None:
            info['share_percent'] = percent
        types = self.sysfs.mdev_types(address)
        if types:
            gpu = self._geometry.get(address)
            fit = memory or (gpu.memory_total // resources.MIB * percent
                             // 100 if gpu else 0)
            vgpu = smallest_vgpu_type(types, fit)
            if vgpu is None:
                raise PrepareError('No vGPU type of GPU %s holds %d MiB'
                                   % (address, fit))
            info['vgpu_type'] = vgpu
        return info

    # Reclaim ---------------------------------------------------------------

    def reclaim(self, address):
        """Reset a device nobody owns: destroy its MIG instances, hand it
        back to the nvidia driver, forget its faults. The agent has checked
        that no claim or allocation holds it; processes are checked here.
        Returns what was done; raises PrepareError when it must not."""
        with self._locks[address]:
            done = []
            if self.sysfs.driver(address) != 'nvidia':
                previous = self.sysfs.driver(address)
                try:
                    self.sysfs.rebind(address, 'nvidia')
                except sysfs_mod.RebindError as e:
                    raise PrepareError(str(e))
                self.backend.refresh()
                done.append('rebound from %s to nvidia'
                            % (previous or 'no driver'))
            gpu = self._live(self._geometry.get(address) or nvml.Gpu(
                uuid=None, address=address, name='', product_id='',
                memory_total=0, memory_reserved=0, compute_capability=()))
            if gpu.processes:
                raise PrepareError('%d processes use GPU %s'
                                   % (len(gpu.processes), address))
            for instance in self._instances(gpu):
                self.backend.destroy_instance(gpu.uuid, instance.gi_id)
                done.append('destroyed GPU instance %d@%d'
                            % (instance.gi_id, instance.start))
            self._mine[address].clear()
            self.health.reset(gpu.uuid)
            return '; '.join(done) or 'nothing to undo'

    # Whole GPU -------------------------------------------------------------

    def _prepare_whole(self, gpu):
        target = CONF.nvidia.passthrough_driver
        current = self.sysfs.driver(gpu.address)
        if current == target:
            return None
        blockers = self._rebind_blockers(gpu)
        if blockers:
            raise PrepareError('GPU %s is bound to %s, not %s, and cannot be '
                               'rebound: %s' % (gpu.address,
                                                current or 'no driver',
                                                target, '; '.join(blockers)))
        if not CONF.nvidia.rebind_for_passthrough:
            raise PrepareError('GPU %s is bound to %s, not %s; bind it to %s '
                               'or set [nvidia] rebind_for_passthrough'
                               % (gpu.address, current or 'no driver',
                                  target, target))
        try:
            self.sysfs.rebind(gpu.address, target)
        except sysfs_mod.RebindError as e:
            raise PrepareError(str(e))
        # No NVML restart: a GPU that left nvidia is simply no longer
        # listed (the way back, in release(), does restart it).
        LOG.info('GPU %s moved from %s to %s for passthrough', gpu.address,
                 current, target)
        return {'restore_driver': current or ''}

    def _rebind_blockers(self, gpu):
        """The safety gates in front of a rebind, as reasons."""
        blockers = []
        if not self.sysfs.iommu_enabled():
            blockers.append('the IOMMU is off')
        vfs = self.sysfs.sriov(gpu.address)['vfs']
        if vfs:
            blockers.append('%d SR-IOV VFs are enabled' % len(vfs))
        if self.sysfs.driver(gpu.address) == 'nvidia':
            live = self.backend.gpus()
            now = next((g for g in live if g.address == gpu.address), gpu)
            if now.processes:
                blockers.append('%d processes use it' % len(now.processes))
            if self._instances(now):
                blockers.append('it has MIG instances')
        return blockers

    # MIG -------------------------------------------------------------------

    def _prepare_mig(self, gpu, group, info):
        vector = resources.request_vector(group)
        if not gpu.mig_capable:
            raise PrepareError('GPU %s (%s) does not support MIG'
                               % (gpu.address, gpu.name))
        profile = mig.match_profile(
            gpu.profiles, vector.get(resources.MEM_SLICE),
            vector.get(resources.COMPUTE_SLICE), vector.get(resources.OFA))
        if profile is None:
            raise PrepareError(
                'No MIG profile of %s takes %s memory slices and %s compute '
                'slices' % (gpu.name, vector.get(resources.MEM_SLICE),
                            vector.get(resources.COMPUTE_SLICE, 'any')))
        if self.sysfs.driver(gpu.address) != 'nvidia':
            raise PrepareError('GPU %s is bound to %s; MIG needs the nvidia '
                               'driver' % (gpu.address,
                                           self.sysfs.driver(gpu.address)
                                           or 'no driver'))
        gpu = self._live(gpu)
        self._ensure_mig_mode(gpu)
        instances = self.backend.instances(gpu.uuid)
        existing = self._existing(profile, instances, info)
        if existing is not None:
            return self._mig_info(profile, existing)
        for _ in range(2):
            slots = self._slots(gpu, instances)
            start = mig.choose_start(profile, slots, gpu.profiles)
            if start is None:
                raise PrepareError(
                    'No free placement for MIG %s on GPU %s (taken: %s)'
                    % (profile.name, gpu.address,
                       self._describe(gpu, slots) or 'nothing'))
            try:
                created = self.backend.create_instance(gpu.uuid, profile.id,
                                                       start)
            except nvml.NvmlError as e:
                if e.kind != 'InsufficientResources':
                    raise PrepareError('Creating MIG %s@%d on %s failed: %s'
                                       % (profile.name, start, gpu.address,
                                          e))
                # Someone else took it meanwhile: look again.
                instances = self.backend.instances(gpu.uuid)
                continue
            self._mine[gpu.address].add((profile.name, start))
            LOG.info('Created MIG %s@%d on GPU %s (%s)', profile.name, start,
                     gpu.address, ','.join(created.mig_uuids))
            return self._mig_info(profile, created)
        raise PrepareError('MIG %s on GPU %s: placements kept changing'
                           % (profile.name, gpu.address))

    def _live(self, gpu):
        for now in self.backend.gpus():
            if now.address == gpu.address:
                self._remember(now)
                return now
        raise PrepareError('GPU %s is not visible to NVML' % gpu.address)

    @staticmethod
    def _existing(profile, instances, info):
        """A re-driven bind finds the instance it made before."""
        if info.get('mig_profile') != profile.name or 'mig_start' not in info:
            return None
        start = int(info['mig_start'])
        return next((i for i in instances if i.profile_id == profile.id
                     and i.start == start), None)

    def _ensure_mig_mode(self, gpu):
        if gpu.mig_current == 1:
            return
        if gpu.mig_pending == 1:
            raise PrepareError('MIG mode on GPU %s is pending a GPU reset'
                               % gpu.address)
        if not CONF.nvidia.enable_mig_on_demand:
            raise PrepareError('MIG mode is off on GPU %s and [nvidia] '
                               'enable_mig_on_demand is False' % gpu.address)
        if gpu.processes:
            raise PrepareError('Cannot turn MIG mode on for GPU %s: %d '
                               'processes use it' % (gpu.address,
                                                     len(gpu.processes)))
        try:
            current, _pending = self.backend.set_mig_mode(gpu.uuid, True)
        except nvml.NvmlError as e:
            raise PrepareError('Turning MIG mode on for GPU %s failed: %s'
                               % (gpu.address, e))
        if current != 1:
            raise PrepareError('MIG mode on GPU %s is pending a GPU reset'
                               % gpu.address)
        gpu.mig_current = 1
        LOG.info('MIG mode turned on for GPU %s', gpu.address)

    @staticmethod
    def _mig_info(profile, instance):
        info = {'mig_profile': profile.name, 'mig_start': instance.start,
                'mig_gi': instance.gi_id}
        if instance.ci_ids:
            info['mig_ci'] = instance.ci_ids[0]
        if instance.mig_uuids:
            info['mig_uuid'] = instance.mig_uuids[0]
        return info

    def _release_mig(self, address, info):
        gpu = self._geometry.get(address)
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
        for instance in self.backend.instances(gpu.uuid):
            if instance.profile_id == profile.id and instance.start == start:
                self.backend.destroy_instance(gpu.uuid, instance.gi_id)
                LOG.info('Destroyed MIG %s@%d on GPU %s', profile.name, start,
                         address)
                return
        LOG.info('MIG %s@%d on GPU %s was already gone', profile.name, start,
                 address)

    # Telemetry -------------------------------------------------------------

    def telemetry(self, address):
        """What a metrics scrape shows of the GPU at `address`: the
        backend's readings plus its MIG instances, each with the processes
        NVML attributes to it and their summed memory. None when NVML
        cannot see the GPU (vfio-pci, not known, NVML down, GPU lost)."""
        gpu = self._geometry.get(address)
        if gpu is None or self.sysfs.driver(address) != 'nvidia':
            return None
        try:
            self.backend.open()
            data = self.backend.telemetry(gpu.uuid)
            instances = self._instances(gpu)
        except (nvml.NvmlUnavailable, nvml.NvmlError) as e:
            LOG.debug('No telemetry for GPU %s: %s', address, e)
            return None
        names = {p.id: p.name for p in gpu.profiles}
        data['mig_instances'] = []
        for instance in instances:
            procs = [p for p in data['processes'] if p[2] == instance.gi_id]
            sizes = [p[1] for p in procs if p[1] is not None]
            data['mig_instances'].append({
                'profile': names.get(instance.profile_id,
                                     str(instance.profile_id)),
                'start': instance.start, 'gi': instance.gi_id,
                'mig_uuid': (instance.mig_uuids[0] if instance.mig_uuids
                             else None),
                'processes': procs,
                'memory_used': sum(sizes) if sizes or not procs else None})
        return data
