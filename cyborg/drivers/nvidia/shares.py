# SPDX-License-Identifier: Apache-2.0
"""Sharing a GPU by capacity: MPS shares for host processes and containers.

A GPU the operator put into a share mode is also reported as a second
deployable, `<address>_share`, whose provider offers percent of the SMs,
MiB of memory and client slots. The agent makes the share pool exclusive
with whole/MIG use in Placement (cyborg.agent.share_pools).

A share is only offered where something enforces it (`enforcer()`):

- mps: the GPU's MPS control daemon (cyborg.drivers.nvidia.mps), started
  by the agent when the pool is offered, holds the ceiling; each bound
  share's own SM percent and memory go to its consumer as the MPS client
  environment. Needs host CUDA (a data-center-driver host: the vGPU
  Manager has none, contract gpu-to-vm.md §1), compute capability 7.0+
  and MIG mode off (in MIG mode CUDA sees only MIG devices). Its attach
  handles are of type `MPS`: a share is for processes and containers on
  the host, never a VM, so it is not `MDEV` (a VM attach type: Nova
  would make an mdev of it) and Nova's side refuses it, as it does `MIG`.
- time-slice: never offered by this driver. The two ways it could go:

  * re-based on the vGPU Manager's VF model (vgpu.py): a time-slice
    share would become "the time-sliced vGPU type holding the memory
    asked, on a free VF". That is what a vGPU device profile already
    asks for (`VGPU=1` + `CUSTOM_VGPU_<TYPE>`, counted on the GPU's own
    provider as 1/n of its slices), with a worse count: MiB and percent
    on a second provider cannot say that the vGPU Manager runs one
    time-sliced size per GPU (equal-size mode), that an ask takes the
    whole fixed framebuffer of the smallest type holding it, or that its
    scheduler shares SMs by equal or fixed share rather than by percent;
    and the share pool's consumer would lock the VFs away from vGPU
    profiles. Two Placement models of one vGPU Manager would disagree.
  * dropped where it duplicates vGPU for VMs (chosen): on a
    vGPU-Manager host a time-sliced vGPU type already is the enforced
    time slice of a VM (fixed framebuffer, scheduled SMs, contract §2),
    asked for with a vGPU profile (e.g. h200-vgpu-70c); on a
    data-center-driver host CUDA time-slicing limits neither a
    process's memory nor its SMs, so nothing would enforce a share.

  So a GPU asked for a time-slice share gets no share provider and the
  Share condition False/Unsupported with the reason for its host kind
  (on a vGPU-Manager host, the vGPU type traits to ask for instead),
  logged once per change. No vGPU type is read here: vgpu.py alone
  reads them, on the VFs (never the PF of an SR-IOV GPU). The API keeps
  the mode (API and database compatibility).
"""

import json

from oslo_log import log

from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers.nvidia import mps as mps_mod
from cyborg.drivers.nvidia import resources
from cyborg.drivers.nvidia import vgpu as vgpu_mod
from cyborg.objects import device as records

LOG = log.getLogger(__name__)
SHARE_SUFFIX = '_share'
MPS_ENFORCER = 'MPS control daemon'
# The attach handle type of a share: processes and containers on the
# host (its MPS client environment), not a VM.
HANDLE_TYPE = 'MPS'


def _info(handle):
    info = handle.get('attach_info') or {}
    if isinstance(info, str):
        try:
            info = json.loads(info)
        except ValueError:
            return {}
    return info


def share_name(address):
    return address + SHARE_SUFFIX


def share_address(deployable_name):
    """The GPU address of a share deployable; None for any other."""
    if deployable_name.endswith(SHARE_SUFFIX):
        return deployable_name[:-len(SHARE_SUFFIX)]
    return None


def share_limits(info):
    """(percent, MiB) an MPS share's attach info grants, or None."""
    if not isinstance(info, dict) or info.get('share_mode') != 'mps':
        return None
    try:
        return (int(info['share_percent']), int(info['share_memory_mb']))
    except (KeyError, TypeError, ValueError):
        return None


def default_daemons():
    return mps_mod.MpsDaemons(CONF.nvidia.mps_root,
                              CONF.nvidia.mps_control_command,
                              CONF.nvidia.mps_command_timeout)


class Shares:
    """The share modes operators set and the shares bindings hold."""

    def __init__(self, state, driver_name, mps=None):
        self.state = state
        self.driver_name = driver_name
        self.mps = mps or default_daemons()
        self._modes = {}    # address → {mode, slots} the operator set
        self._bound = {}    # address → share handles bindings hold
        self._slots = {}    # address → slots last reported
        self._limits = {}   # address → {handle uuid: (percent, MiB)}
        self._daemons = {}  # address → GPU UUID whose MPS daemon we run
        self._refusals = {}  # address → (mode, why) last logged

    def set_modes(self, modes):
        """The share modes operators asked for ({address: {mode, slots}};
        absent or mode 'none': no share pool). True when it changes.
        """
        wanted = {a: {'mode': m['mode'], 'slots': int(m.get('slots') or 10)}
                  for a, m in modes.items()
                  if m and m.get('mode') in resources.SHARE_MODES}
        changed = wanted != self._modes
        self._modes = wanted
        return changed

    def reconcile(self, prepared):
        """How many share handles bindings hold per GPU, from what the
        conductor says is bound ({deployable name: [handle]}). True when
        it changed.
        """
        bound = {share_address(name): len(handles)
                 for name, handles in prepared.items()
                 if share_address(name) and handles}
        changed = bound != self._bound
        self._bound = bound
        limits = {}
        for name, handles in prepared.items():
            address = share_address(name)
            for handle in handles or ():
                granted = share_limits(_info(handle))
                if address and granted:
                    limits.setdefault(address, {})[handle.get('uuid')] = \
                        granted
        self._limits = limits
        return changed

    def enforcer(self, gpu, mode):
        """(what enforces a `mode` share of `gpu`, None) or (None, why
        no share of that mode can be offered there).
        """
        if gpu.host_vgpu:
            return None, _vgpu_host_refusal(gpu, mode)
        if mode == 'mps':
            why = mps_mod.supported(gpu.compute_capability)
            if why:
                return None, why
            if gpu.mig_current:
                return None, ('MIG mode is on: CUDA sees only MIG devices, '
                              'so MPS on the whole GPU cannot run')
            return MPS_ENFORCER, None
        return None, ('time-slice shares are not offered: on a '
                      'data-center-driver host nothing limits a '
                      'time-sliced process\'s memory or SMs (use mps); '
                      'VMs get enforced time slices as time-sliced vGPU '
                      'types on a vGPU-Manager host')

    def _refused(self, address, mode, why):
        """Log once per change why a share mode asked for a GPU is not
        offered (the Share condition says it on every report).
        """
        if why is None:
            self._refusals.pop(address, None)
        elif self._refusals.get(address) != (mode, why):
            self._refusals[address] = (mode, why)
            LOG.warning('Share mode %s asked for GPU %s is not offered: %s',
                        mode, address, why)

    def _ceiling(self, gpu, slots):
        """What any MPS client of the GPU may get at most: the largest
        share bound on it, or one slot's even share while none is.
        """
        granted = list(self._limits.get(gpu.address, {}).values())
        if granted:
            return (max(p for p, _ in granted), max(m for _, m in granted))
        memory = resources.share_memory_mb(
            gpu, CONF.nvidia.share_memory_margin_mb)
        return max(1, 100 // max(slots, 1)), max(1, memory // max(slots, 1))

    def _stop_daemon(self, address):
        gpu_uuid = self._daemons.pop(address, None)
        if gpu_uuid is None:
            return
        try:
            self.mps.stop(gpu_uuid)
        except mps_mod.MpsError as e:
            LOG.warning('Could not stop the MPS daemon of GPU %s: %s',
                        address, e)

    def deployable(self, gpu, mode, gpu_traits):
        """The `_share` deployable of a GPU in a share mode (or one that
        left it while bindings still hold shares: then fully reserved), and
        what the agent needs to know: {mode, slots, ready, draining, why}.
        """
        wanted = self._modes.get(gpu.address)
        bound = self._bound.get(gpu.address, 0)
        if wanted is None and not bound:
            self._slots.pop(gpu.address, None)
            self._refused(gpu.address, None, None)
            self._stop_daemon(gpu.address)
            return None, None
        slots = (wanted['slots'] if wanted
                 else self._slots.get(gpu.address, bound))
        slots = max(slots, bound)
        observation = {'mode': wanted['mode'] if wanted else 'none',
                       'slots': slots, 'draining': wanted is None,
                       'ready': True}
        if mode != 'Compute':
            observation.update(ready=False, why=(
                'GPU %s is bound to %s; sharing needs the nvidia driver'
                % (gpu.address, self.state.sysfs.driver(gpu.address)
                   or 'no driver')))
            if not bound:
                return None, observation
        elif wanted:
            enforcer, why = self.enforcer(gpu, wanted['mode'])
            if enforcer == MPS_ENFORCER:
                try:
                    self.mps.ensure(gpu.uuid, *self._ceiling(gpu, slots))
                    self._daemons[gpu.address] = gpu.uuid
                except mps_mod.MpsError as e:
                    enforcer, why = None, str(e)
            observation['enforcer'] = enforcer
            self._refused(gpu.address, wanted['mode'], why)
            if enforcer is None:
                observation.update(ready=False, why=why)
                if not bound:
                    return None, observation
        invs = resources.share_inventories(
            gpu, slots, CONF.nvidia.share_memory_margin_mb,
            fenced=not (wanted and observation['ready']))
        share_mode = wanted['mode'] if wanted else None
        traits = {t for t in gpu_traits
                  if t.startswith(('CUSTOM_GPU_VENDOR_', 'CUSTOM_GPU_MODEL_',
                                   'CUSTOM_GPU_CC_', 'CUSTOM_GPU_NUMA_'))}
        if share_mode in resources.SHARE_TRAITS:
            # A mode no share is offered in (time-slice) names no trait:
            # its pool, fenced, only keeps the shares still bound.
            traits.add(resources.SHARE_TRAITS[share_mode])
        pf = records.pci_info(gpu.address)
        self._slots[gpu.address] = slots
        return records.Deployable(
            name=share_name(gpu.address), num_accelerators=slots,
            resource_class=resources.SHARE_SLOT, traits=sorted(traits),
            attach_handles=[records.AttachHandle(HANDLE_TYPE, dict(
                pf, share_slot=str(n))) for n in range(slots)],
            driver_name=self.driver_name,
            attributes={'gpu_uuid': gpu.uuid,
                        'share_mode': share_mode or 'none'},
            inventories=invs), observation

    def prepare(self, address, handle):
        """What an MPS share grants (Placement already counted it against
        the pool): the client environment with the share's limits, and
        the daemon's ceiling raised to it if needed. Any other share is
        refused with the reason (see enforcer()).
        """
        wanted = self._modes.get(address)
        if wanted is None:
            raise base.PrepareError('GPU %s is not in a share mode'
                                    % address)
        vector = resources.request_vector(handle.get('request_group') or {})
        memory = vector.get(resources.MEMORY_MB)
        percent = vector.get(resources.CORE_PERCENT)
        if memory is None and percent is None:
            raise base.PrepareError(
                'A share of GPU %s asks for neither %s nor %s'
                % (address, resources.MEMORY_MB, resources.CORE_PERCENT))
        gpu = self.state.geometry.get(address)
        if gpu is None:
            raise base.PrepareError('GPU %s is not known to the nvidia '
                                    'driver on this host' % address)
        enforcer, why = self.enforcer(gpu, wanted['mode'])
        if enforcer is None:
            raise base.PrepareError('GPU %s: %s' % (address, why))
        return self._prepare_mps(gpu, address, handle, memory, percent)

    def _prepare_mps(self, gpu, address, handle, memory, percent):
        pool = resources.share_memory_mb(gpu,
                                         CONF.nvidia.share_memory_margin_mb)
        percent = 100 if percent is None else percent
        if memory is None:
            memory = max(1, pool * percent // 100)
        granted = self._limits.setdefault(address, {})
        granted[handle.get('uuid')] = (percent, memory)
        ceiling = self._ceiling(gpu, 1)
        try:
            self.mps.ensure(gpu.uuid, *ceiling)
            self._daemons[address] = gpu.uuid
            self.mps.set_ceiling(gpu.uuid, *ceiling)
        except mps_mod.MpsError as e:
            granted.pop(handle.get('uuid'), None)
            raise base.PrepareError(str(e))
        pipe, _ = self.mps.directories(gpu.uuid)
        return {'share_mode': 'mps', 'share_memory_mb': memory,
                'share_percent': percent, 'enforcer': MPS_ENFORCER,
                'mps_pipe_directory': pipe,
                'mps_client_env': self.mps.client_env(
                    gpu.uuid, percent, memory, handle.get('uuid'))}

    def release(self, address, handle):
        """A share is unbound: its limits no longer count toward the MPS
        ceiling (clients already connected keep theirs until they exit).
        """
        granted = self._limits.get(address, {})
        if granted.pop(handle.get('uuid'), None) is None:
            return
        gpu = self.state.geometry.get(address)
        gpu_uuid = self._daemons.get(address)
        if gpu is None or gpu_uuid is None:
            return
        try:
            self.mps.set_ceiling(gpu_uuid, *self._ceiling(
                gpu, self._slots.get(address, 1)))
        except mps_mod.MpsError as e:
            LOG.warning('Could not lower the MPS ceiling of GPU %s: %s',
                        address, e)


def _vgpu_host_refusal(gpu, mode):
    """Why a GPU the vGPU Manager runs offers no `mode` share."""
    if mode == 'mps':
        return ('GPU %s is run by the NVIDIA vGPU Manager: there is no host '
                'CUDA, so no MPS daemon can run (MPS shares are for '
                'processes and containers on a data-center-driver host)'
                % gpu.address)
    sliced = sorted(vgpu_mod.type_trait(t) for t in gpu.vgpu_types
                    if not t.mig_backed)
    return ('GPU %s is run by the NVIDIA vGPU Manager, whose time-sliced '
            'vGPU types already are the enforced time slices of VMs: ask '
            'for one with a vGPU device profile (%s) instead of a '
            'time-slice share' % (gpu.address, 'trait ' + ' or '.join(
                sliced) if sliced else 'this GPU lists no time-sliced '
                'vGPU type'))
