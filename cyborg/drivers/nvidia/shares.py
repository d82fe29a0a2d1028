# SPDX-License-Identifier: Apache-2.0
"""Sharing a GPU by capacity (MPS or time-slice).

A GPU the operator put into a share mode is also reported as a second
deployable, `<address>_share`, whose provider offers percent of the SMs,
MiB of memory and client slots. The agent makes the share pool exclusive
with whole/MIG use in Placement (cyborg.agent.share_pools); binding a
share only records what it grants (and, for VMs, the smallest vGPU type
that fits).
"""

import re

from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers.nvidia import resources
from cyborg.objects import device as records

SHARE_SUFFIX = '_share'
_FRAMEBUFFER = re.compile(r'framebuffer=(\d+)M', re.I)
_TYPE_SIZE = re.compile(r'-(\d+)[A-Z]*$')


def share_name(address):
    return address + SHARE_SUFFIX


def share_address(deployable_name):
    """The GPU address of a share deployable; None for any other."""
    if deployable_name.endswith(SHARE_SUFFIX):
        return deployable_name[:-len(SHARE_SUFFIX)]
    return None


def _framebuffer_mb(vgpu_type):
    """MiB of a vGPU type: `framebuffer=NNNNM` in its description, else
    the GB size at the end of its name ('GRID H200-18C' → 18432).
    """
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


class Shares:
    """The share modes operators set and the shares bindings hold."""

    def __init__(self, state, driver_name):
        self.state = state
        self.driver_name = driver_name
        self._modes = {}    # address → {mode, slots} the operator set
        self._bound = {}    # address → share handles bindings hold
        self._slots = {}    # address → slots last reported

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
        return changed

    def deployable(self, gpu, mode, gpu_traits):
        """The `_share` deployable of a GPU in a share mode (or one that
        left it while bindings still hold shares: then fully reserved), and
        what the agent needs to know: {mode, slots, ready, draining, why}.
        """
        wanted = self._modes.get(gpu.address)
        bound = self._bound.get(gpu.address, 0)
        if wanted is None and not bound:
            self._slots.pop(gpu.address, None)
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
        self._slots[gpu.address] = slots
        return records.Deployable(
            name=share_name(gpu.address), num_accelerators=slots,
            resource_class=resources.SHARE_SLOT, traits=sorted(traits),
            attach_handles=[records.AttachHandle('MDEV', dict(
                pf, share_slot=str(n))) for n in range(slots)],
            driver_name=self.driver_name,
            attributes={'gpu_uuid': gpu.uuid,
                        'share_mode': share_mode or 'none'},
            inventories=invs), observation

    def prepare(self, address, handle):
        """What a share grants; Placement already counted it against the
        pool. Nothing is made on the GPU: MPS/time-slice consumers enforce
        (or not) their limits themselves. For VMs, the smallest vGPU type
        that holds the memory (when the host has the vGPU manager).
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
        info = {'share_mode': wanted['mode']}
        if memory is not None:
            info['share_memory_mb'] = memory
        if percent is not None:
            info['share_percent'] = percent
        types = self.state.sysfs.mdev_types(address)
        if types:
            gpu = self.state.geometry.get(address)
            fit = memory or (gpu.memory_total // resources.MIB * percent
                             // 100 if gpu else 0)
            vgpu = smallest_vgpu_type(types, fit)
            if vgpu is None:
                raise base.PrepareError('No vGPU type of GPU %s holds %d MiB'
                                        % (address, fit))
            info['vgpu_type'] = vgpu
        return info
