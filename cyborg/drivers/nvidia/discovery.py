# SPDX-License-Identifier: Apache-2.0
"""Discovery: which GPUs this host has and how each looks to Placement.

It joins two views: sysfs (every NVIDIA function and the kernel driver
that holds it; VFs are never reported as GPUs) and NVML (identity,
memory, compute capability, MIG profiles and live GPU instances of the
GPUs bound to `nvidia`). A GPU handed to vfio-pci is invisible to NVML,
so its geometry comes from what NVML said before (geometry_cache). GPUs
someone else manages (Nova's [pci] device_spec, vGPU mdevs) are skipped.
Each GPU becomes one Device with one deployable (plus its share pool's,
see shares), the attach handles it can be bound through, and the phase
its hardware allows (phase).
"""

from oslo_log import log

from cyborg.conf import CONF
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import geometry_cache
from cyborg.drivers.nvidia import passthrough as passthrough_mod
from cyborg.drivers.nvidia import phase as phase_mod
from cyborg.drivers.nvidia import resources
from cyborg.drivers.nvidia import state as state_mod
from cyborg.drivers.nvidia import sysfs as sysfs_mod
from cyborg.drivers.nvidia import vgpu as vgpu_mod
from cyborg.drivers import pci as pci_driver
from cyborg.objects import device as records

LOG = log.getLogger(__name__)


def attach_handles(gpu):
    """A data-center GPU: the physical function for whole use (a VM); for
    MIG, one `MIG` handle per instance the GPU can hold, whose MIG UUID
    serves non-VM consumers (Nova ignores the type on purpose: a VM
    cannot use a MIG instance without the vGPU Manager).
    """
    handles = [records.AttachHandle('PCI', records.pci_info(gpu.address))]
    if not gpu.mig_capable:
        return handles
    most = max(p.max_instances for p in gpu.profiles)
    handles += [records.AttachHandle('MIG', dict(
        records.pci_info(gpu.address), mig_slot=str(n)))
        for n in range(most)]
    return handles


class Discovery:

    def __init__(self, driver_name, state, mig_binding, shares, vgpus):
        self.driver_name = driver_name
        self.state = state
        self.mig = mig_binding
        self.shares = shares
        self.vgpus = vgpus
        self._unavailable = None
        self._refreshed_for = set()     # unlisted GPUs NVML restarted for
        self._skipped = {}      # address → why it is not reported
        self._nova_specs = [pci_driver.DeviceSpec(spec) for spec in
                            CONF.pci_driver.nova_device_spec]

    def discover(self):
        """The [Device] of the GPUs present now.  Every NVIDIA GPU sysfs
        shows is listed, whatever NVML says: one NVML cannot see (NVML
        down, another kernel driver, none) carries the phase and the
        condition that say why (phase).
        """
        sysfs = self.state.sysfs
        functions = {f['address']: f for f in sysfs.nvidia_gpus()}
        gpus = self._nvml_gpus(functions)
        nvml_down = self._unavailable if gpus is None else None
        gpus = gpus or {}
        geometry = self.state.geometry
        iommu = sysfs.iommu_enabled()
        devices = []
        for address in sorted(set(gpus) | {a for a, f in functions.items()
                                           if f['physfn'] is None}):
            function = functions.get(address, {
                'address': address, 'driver': 'nvidia', 'vfs': [],
                'mdevs': [], 'numa_node': -1, 'vendor': '10de',
                'product': None})
            gpu = gpus.get(address)
            known = True
            view = phase_mod.LISTED
            if gpu is not None:
                geometry.remember(gpu)
                try:
                    instances = self.state.instances(gpu)
                except nvml.NvmlError as e:
                    LOG.warning('Cannot read the MIG instances of GPU %s: '
                                '%s', address, e)
                    instances, known = [], False
            else:
                gpu = (geometry.get(address)
                       or geometry_cache.shipped(function))
                if gpu is not None:
                    geometry.setdefault(address, gpu)
                else:
                    gpu = geometry_cache.placeholder(function)
                instances = None
                if function['driver'] == 'nvidia':
                    # NVML should see it and does not: nobody can tell
                    # what runs on it.
                    known = False
                    view = nvml_down or phase_mod.UNLISTED
            vgpu_state = None
            if gpu.host_vgpu:
                vgpu_state = self.vgpus.view(gpu, function['vfs'])
            if self._not_ours(function, functions, vgpu_state):
                continue
            device = self._device(gpu, function, instances, iommu,
                                  vgpu_state, view)
            device.observations['occupancy_known'] = known
            devices.append(device)
        return devices

    # NVML and health -------------------------------------------------------

    def _nvml_gpus(self, functions):
        """{address: Gpu} NVML lists, or None when NVML is down
        (self._unavailable says why).
        """
        backend = self.state.backend
        try:
            backend.open()
            gpus = {g.address: g for g in backend.gpus()}
            if self._lost(gpus) or self._new_on_nvidia(gpus, functions):
                # NVML enumerates at init: a GPU that came back (or moved
                # drivers) is only seen after starting over.
                backend.refresh()
                gpus = {g.address: g for g in backend.gpus()}
            self._watch_health(gpus.values())
        except (nvml.NvmlUnavailable, nvml.NvmlError) as e:
            if str(e) != self._unavailable:
                LOG.error('NVML is unavailable; GPUs on the nvidia driver '
                          'are reported Failed until it is back: %s', e)
                self._unavailable = str(e)
            return None
        if self._unavailable is not None:
            LOG.info('NVML is usable again')
            self._unavailable = None
        return gpus

    def _watched(self):
        """{address: Gpu} of the GPUs on nvidia that NVML has seen (their
        health is watched; one missing from NVML is lost or returning).
        """
        return {a: g for a, g in self.state.geometry.items()
                if not g.uuid.startswith(geometry_cache.UNSEEN)
                and self.state.sysfs.driver(a) == 'nvidia'}

    def _lost(self, gpus):
        """GPUs the nvidia driver holds that NVML did not list."""
        return [a for a in self._watched() if a not in gpus]

    def _new_on_nvidia(self, gpus, functions):
        """GPUs bound to nvidia that NVML has never listed (bound since
        NVML started): worth one re-enumeration each, not one per pass.
        """
        new = {a for a, f in functions.items()
               if f['physfn'] is None and f['driver'] == 'nvidia'
               and a not in gpus and a not in self._refreshed_for}
        self._refreshed_for = (self._refreshed_for | new) - set(gpus)
        return new

    def _watch_health(self, gpus):
        """XID/ECC events of the GPUs NVML sees, and a health probe of
        every GPU we know on nvidia (a lost one included: that is how it
        comes back).
        """
        if not CONF.nvidia.health_events:
            return
        health = self.state.health
        health.watch([g.uuid for g in gpus])
        for gpu in self._watched().values():
            health.observe(gpu.uuid,
                           self.state.backend.health_probe(gpu.uuid))

    # Ownership -------------------------------------------------------------

    def _not_ours(self, function, functions, vgpu_state=None):
        """A GPU that someone else manages must not be offered twice: its
        PF or a VF in Nova's [pci] device_spec, one carved into vGPUs
        (mdevs, or vGPU types on VFs) that no binding of ours holds, or
        one Nova's vGPU configuration ([devices] enabled_mdev_types,
        [mdev_*] device_addresses) names.
        """
        address = function['address']
        reason = None
        members = [function] + [functions[vf] for vf in function['vfs']
                                if vf in functions]
        if function['mdevs']:
            reason = ('it is carved into %d vGPU mdev(s) by another service'
                      % len(function['mdevs']))
        elif any(f['product'] and any(s.matches(f) for s in self._nova_specs)
                 for f in members):
            reason = "Nova's [pci] device_spec claims it"
        elif vgpu_state is not None and vgpu_state.foreign:
            reason = ('VF(s) %s hold vGPUs that no binding of ours holds '
                      '(Nova\'s vGPUs?)' % ', '.join(vgpu_state.foreign))
        elif vgpu_state is not None:
            reason = vgpu_mod.nova_claims(function, vgpu_state.views)
        if reason and self._skipped.get(address) != reason:
            LOG.warning('Not reporting GPU %s: %s', address, reason)
        if reason:
            self._skipped[address] = reason
        else:
            self._skipped.pop(address, None)
        return reason is not None

    # The device record -----------------------------------------------------

    def _device(self, gpu, function, instances, iommu, vgpu_state=None,
                view=phase_mod.LISTED):
        whole_in_use = instances is None
        kind = vgpu_mod.host_kind(gpu)
        slots = state_mod.slots(gpu, instances or [])
        orphans = self.mig.orphans(gpu, slots)
        if orphans:
            # Reported through the lifecycle (OrphanPending, then
            # Orphaned); claims may simply not have reached us yet.
            LOG.debug('GPU %s has MIG instances with no known claim: %s',
                      gpu.address, state_mod.describe(gpu, orphans))
        invs = resources.inventories(gpu.profiles, slots, orphans,
                                     whole_in_use)
        passthrough = kind == vgpu_mod.DATACENTER and iommu and \
            not function['vfs'] and (
                CONF.nvidia.rebind_for_passthrough or function['driver']
                in passthrough_mod.vfio_drivers())
        traits = (resources.static_traits(gpu, passthrough)
                  | resources.fit_traits(gpu.profiles, slots, whole_in_use)
                  | {vgpu_mod.HOST_TRAITS[kind]})
        if kind == vgpu_mod.VGPU_HOST:
            # vGPUs for VMs only: no whole GPU, no MIG for host processes.
            handles = self.vgpus.handles(vgpu_state)
            invs = self.vgpus.inventories(gpu, vgpu_state, invs, slots)
            traits |= self.vgpus.traits(gpu, vgpu_state, slots)
        else:
            handles = attach_handles(gpu)
            if gpu.mig_capable:
                traits.add(vgpu_mod.MIG_NON_VM)
        attributes = {'gpu_uuid': gpu.uuid}
        if orphans:
            attributes['mig_orphans'] = state_mod.describe(gpu, orphans)
        deployable = records.Deployable(
            name=gpu.address,
            num_accelerators=invs[resources.MEM_SLICE]['total'],
            resource_class=resources.MEM_SLICE, traits=sorted(traits),
            attach_handles=handles,
            driver_name=self.driver_name, attributes=attributes,
            inventories=invs)
        mode = phase_mod.mode(function['driver'])
        board = {'product_id': gpu.product_id,
                 'numa_node': function['numa_node'],
                 'driver': function['driver'], 'mode': mode,
                 'uuid': gpu.uuid,
                 'memory_mib': gpu.memory_total // (1 << 20),
                 'compute_capability': '%d.%d' % tuple(
                     gpu.compute_capability[:2]),
                 'mig_mode': gpu.mig_current}
        phase, conditions = phase_mod.phase(
            self.state.health, gpu, mode, function['driver'], view,
            self.state.change_under_way(gpu.address))
        observations = {
            'mode': mode, 'driver': function['driver'],
            'orphan_instances': len(orphans), 'conditions': conditions,
            'adopted': mode == 'Passthrough'
            and CONF.nvidia.adopt_passthrough}
        board['host_kind'] = kind
        deployables = [deployable]
        # On a vGPU-Manager host no share is offered; asking for one
        # still gets the Share condition saying why (shares.enforcer).
        share, observation = self.shares.deployable(gpu, mode, traits)
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
