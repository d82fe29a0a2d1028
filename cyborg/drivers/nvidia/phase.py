# SPDX-License-Identifier: Apache-2.0
"""A GPU's mode and the phase its hardware allows, with the conditions
that say why (the lifecycle rules the agent settles are in
cyborg.common.lifecycle).
"""

from cyborg.common import lifecycle
from cyborg.conf import CONF
from cyborg.drivers.nvidia import passthrough


def mode(driver):
    """The mode a GPU is in, from the kernel driver that holds it."""
    if driver == 'nvidia':
        return 'Compute'
    if driver in passthrough.vfio_drivers():
        return 'Passthrough'
    return 'Unbound' if driver is None else 'Unknown'


def phase(health, gpu, mode):
    """(phase, [condition]) of a GPU in `mode`; `health` gives the
    verdict of a GPU NVML watches.
    """
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
    verdict, why, message = health.verdict(gpu.uuid)
    conditions.append(lifecycle.condition(
        'Healthy', str(verdict == 'Ready'), why, message))
    if verdict != 'Ready':
        return verdict, conditions
    if gpu.mig_capable and gpu.mig_pending != gpu.mig_current:
        conditions.append(lifecycle.condition(
            'MigMode', 'False', 'ResetRequired',
            'MIG mode %s is pending a GPU reset'
            % ('on' if gpu.mig_pending else 'off')))
        return 'Reconfiguring', conditions
    return 'Ready', conditions
