# SPDX-License-Identifier: Apache-2.0
"""A GPU's mode and the phase its hardware allows, with the conditions
that say why (the lifecycle rules the agent settles are in
cyborg.common.lifecycle; docs/gpu-lifecycle.md is the table).

- Passthrough: any GPU on a VFIO driver, claimed or not (it is no CUDA
  device any more; whether it is ours is the management state's
  business).
- Pending: no kernel driver bound (nothing can use it until one is).
- Failed: a driver we cannot use (nouveau, ...), NVML down, or the nvidia
  driver holding a GPU NVML does not list; plus the health monitor's
  fatal faults.  Lost: fallen off the bus.
- Initializing: the agent is changing its MIG mode or kernel driver now.
- Reconfiguring: a MIG mode change waits for something outside the agent
  (a GPU reset, other NVML clients letting go).
"""

from cyborg.common import lifecycle
from cyborg.drivers.nvidia import passthrough

# How discovery saw the GPU through NVML.
LISTED = 'listed'          # NVML lists it
UNLISTED = 'unlisted'      # NVML works but does not list it


def is_vfio(driver):
    """A VFIO driver: one configured for passthrough ([nvidia]
    passthrough_driver(s)), or any vendor variant of vfio-pci
    (nvgrace-gpu-vfio-pci on GH200).
    """
    return bool(driver) and (driver in passthrough.vfio_drivers()
                             or driver.endswith('vfio-pci'))


def mode(driver):
    """The mode a GPU is in, from the kernel driver that holds it."""
    if driver == 'nvidia':
        return 'Compute'
    if is_vfio(driver):
        return 'Passthrough'
    return 'Unbound' if driver is None else 'Unknown'


def _driver(mode, driver):
    """(phase, [condition]) a GPU's kernel driver alone decides, or
    (None, [condition]) when NVML must be asked.
    """
    if mode == 'Unbound':
        return 'Pending', [lifecycle.condition(
            'DriverReady', 'False', 'NoDriver',
            'no kernel driver is bound to the GPU')]
    if mode == 'Passthrough':
        return 'Passthrough', [lifecycle.condition(
            'DriverReady', 'True', 'Passthrough',
            'bound to %s for a VM; NVML cannot watch it' % driver)]
    if mode == 'Unknown':
        return 'Failed', [lifecycle.condition(
            'DriverReady', 'False', 'ForeignDriver',
            'bound to %s, which NVML cannot use: bind it to nvidia (and '
            'blacklist %s) to use it' % (driver, driver))]
    return None, []


def phase(health, gpu, mode, driver=None, nvml=LISTED, change=None):
    """(phase, [condition]) of a GPU in `mode`.

    `health` gives the verdict of a GPU NVML watches; `nvml` is LISTED,
    UNLISTED or, when NVML is down, why it is; `change` is what the agent
    is changing on the GPU right now (None, 'MIG mode', 'kernel driver').
    """
    if change == 'kernel driver':
        return 'Initializing', [lifecycle.condition(
            'DriverReady', 'False', 'Rebinding',
            'the kernel driver of the GPU is being changed')]
    decided, conditions = _driver(mode, driver)
    if decided is not None:
        return decided, conditions
    if nvml not in (LISTED, UNLISTED):
        return 'Failed', [lifecycle.condition(
            'DriverReady', 'False', 'NvmlUnavailable', nvml)]
    verdict, why, message = health.verdict(gpu.uuid)
    if nvml == UNLISTED and verdict == 'Ready':
        return 'Failed', [lifecycle.condition(
            'DriverReady', 'False', 'NotInNvml',
            'bound to nvidia but NVML does not list it (did the driver '
            'fail to initialise it? see the kernel log)')]
    conditions = [lifecycle.condition('DriverReady', 'True', 'Nvml')]
    conditions.append(lifecycle.condition(
        'Healthy', str(verdict == 'Ready'), why, message))
    if verdict != 'Ready':
        return verdict, conditions
    if change == 'MIG mode':
        conditions.append(lifecycle.condition(
            'MigMode', 'False', 'Changing', 'MIG mode is being changed'))
        return 'Initializing', conditions
    if gpu.mig_capable and gpu.mig_pending != gpu.mig_current:
        conditions.append(lifecycle.condition(
            'MigMode', 'False', 'ResetRequired',
            'MIG mode %s is pending: a GPU reset applies it, or asking '
            'again once other clients let go of the GPU'
            % ('on' if gpu.mig_pending else 'off')))
        return 'Reconfiguring', conditions
    return 'Ready', conditions
