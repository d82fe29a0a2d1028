# SPDX-License-Identifier: Apache-2.0
"""The `nvidia` accelerator driver: one deployable per physical GPU.

The entry point (cyborg.accelerator.driver `nvidia`). It holds no logic
of its own: each hook of the driver contract (cyborg.drivers.base) goes
to the module of its concern, all sharing one state.HostState:

- discovery: GPUs from sysfs + NVML → Device records (phase: the phase
  the hardware allows; geometry_cache: what NVML said of GPUs it cannot
  see now);
- passthrough: whole-GPU binding (rebind to the passthrough driver);
- mig_binding: MIG instances made and destroyed for bindings, their
  ownership, re-created after a reboot;
- vgpu: the host kind, and vGPU types on the VFs of a vGPU-Manager GPU
  (a VF configured, and a GPU instance for MIG-backed types);
- shares: GPUs shared by capacity (MPS; no time-slice share), the `_share`
  deployable, offered only where something enforces it (mps: the MPS
  control daemon per GPU);
- reclaim (with occupancy): resetting a GPU nobody uses;
- telemetry and health: what metrics read, XID/ECC events.

prepare() and release() choose the binding concern from the host kind,
the request and the handle.
"""

from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import discovery
from cyborg.drivers.nvidia import geometry_cache
from cyborg.drivers.nvidia import health as health_mod
from cyborg.drivers.nvidia import mig_binding
from cyborg.drivers.nvidia import passthrough
from cyborg.drivers.nvidia import reclaim as reclaim_mod
from cyborg.drivers.nvidia import resources
from cyborg.drivers.nvidia import shares as shares_mod
from cyborg.drivers.nvidia import state as state_mod
from cyborg.drivers.nvidia import sysfs as sysfs_mod
from cyborg.drivers.nvidia import telemetry as telemetry_mod
from cyborg.drivers.nvidia import vgpu as vgpu_mod
from cyborg.objects import device as records


class NvidiaDriver(base.Driver):
    name = 'nvidia'
    inventory_follows_bindings = True

    def __init__(self, backend=None, sysfs=None, mps=None):
        self.backend = backend or nvml.PynvmlBackend()
        self.sysfs = sysfs or sysfs_mod.for_root(CONF.nvidia.sysfs_root)
        # Short event waits: an NVML restart (after a GPU comes back to
        # nvidia) waits for the one in progress.
        self.health = health_mod.HealthMonitor(
            self.backend, recovery_after=CONF.nvidia.health_recovery_after,
            wait_ms=250,
            reset_xids=[int(x) for x in CONF.nvidia.reset_xids])
        self.state = state_mod.HostState(
            self.backend, self.sysfs, geometry_cache.GeometryCache(),
            self.health)
        self.mig = mig_binding.MigBinding(self.state)
        self.shares = shares_mod.Shares(self.state, self.name, mps)
        self.passthrough = passthrough.Passthrough(self.state)
        self.vgpus = vgpu_mod.Vgpu(self.state, self.mig)
        self.discovery = discovery.Discovery(self.name, self.state,
                                             self.mig, self.shares,
                                             self.vgpus)

    def discover(self):
        return self.discovery.discover()

    def start(self):
        """Listen for XID/ECC events (the agent's service starts this)."""
        if CONF.nvidia.health_events:
            self.health.start()

    def stop(self):
        self.health.stop()

    def set_share_modes(self, modes):
        return self.shares.set_modes(modes)

    def reconcile(self, prepared):
        share_changed = self.shares.reconcile(prepared)
        gpus = {name: handles for name, handles in prepared.items()
                if shares_mod.share_address(name) is None}
        vgpu_changed = self.vgpus.reconcile(gpus)
        changed, updates = self.mig.reconcile(gpus)
        # After the GPU instances: a MIG-backed type needs its instance.
        restored = self.vgpus.restore(gpus)
        cleared = self.vgpus.clear_missed_releases()
        return (changed or share_changed or vgpu_changed or restored
                or cleared), updates

    @classmethod
    def pick_handles(cls, deployable, request_group, handles):
        if shares_mod.share_address(deployable['name']):
            return [h for h in handles
                    if 'share_slot' in state_mod.attach_info(h)]
        pf = records.pci_info(deployable['name'])
        if vgpu_mod.VGPU in resources.request_vector(request_group or {}):
            # A vGPU: a VF of a vGPU-Manager GPU (MDEV or PCI by layout).
            return [h for h in handles if h['attach_type'] in ('MDEV', 'PCI')
                    and state_mod.attach_info(h) != pf]
        whole = passthrough.is_whole(deployable['num_accelerators'],
                                     request_group)
        return [h for h in handles
                if (state_mod.attach_info(h) == pf) == whole]

    def prepare(self, deployable_name, handle):
        address = shares_mod.share_address(deployable_name)
        if address:
            with self.state.locks[address]:
                return self.shares.prepare(address, handle)
        address = deployable_name
        with self.state.locks[address]:
            gpu = self.state.geometry.get(address)
            if gpu is None:
                raise base.PrepareError('GPU %s is not known to the nvidia '
                                        'driver on this host' % address)
            total = resources.totals(gpu.profiles)[resources.MEM_SLICE]
            group = handle.get('request_group') or {}
            asks_vgpu = vgpu_mod.VGPU in resources.request_vector(group)
            if gpu.host_vgpu != asks_vgpu:
                raise base.PrepareError(
                    'GPU %s is run by the %s: it serves %s, and the request '
                    'asks for %s' % (
                        address, 'NVIDIA vGPU Manager' if gpu.host_vgpu
                        else 'data-center driver',
                        'vGPUs for VMs only' if gpu.host_vgpu
                        else 'whole GPUs and MIG instances, no vGPU',
                        'a vGPU' if asks_vgpu else 'no vGPU'))
            if asks_vgpu:
                return self.vgpus.prepare(gpu, group, handle)
            if passthrough.is_whole(total, group):
                return self.passthrough.prepare(gpu)
            return self.mig.prepare(gpu, group,
                                    state_mod.attach_info(handle))

    def release(self, deployable_name, handle):
        address = shares_mod.share_address(deployable_name)
        if address:
            with self.state.locks[address]:
                self.shares.release(address, handle)
            return
        address = deployable_name
        info = state_mod.attach_info(handle)
        with self.state.locks[address]:
            if vgpu_mod.vgpu_type_id(info) is not None:
                self.vgpus.release(address, info)
            elif 'mig_start' in info:
                self.mig.release(address, info)
            elif 'restore_driver' in info:
                self.passthrough.release(address, info)

    def reclaim(self, address):
        """Reset a GPU nobody uses (reclaim, or an admin's reset): check
        that no VM or process holds it, destroy its MIG instances, reset
        it, hand it back to the nvidia driver, forget its faults.
        """
        return reclaim_mod.reclaim(self.state, self.mig, self.passthrough,
                                   address)

    def telemetry(self, address):
        return telemetry_mod.telemetry(self.state, address)
