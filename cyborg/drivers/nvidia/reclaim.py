# SPDX-License-Identifier: Apache-2.0
"""Reclaim and reset: bring a GPU nobody uses back to a clean state on
the nvidia driver (the GPU-module glossary's reclaim; an admin's reset
of a Failed or Lost GPU is the same work).

Fail-closed and in this order - nothing is touched before the first
step has passed:
1. occupancy: no VM holds its VFIO group, no process runs on it
   (occupancy.check; the agent has checked claims and Placement);
2. its MIG instances are destroyed (a GPU on the nvidia driver);
3. the GPU is reset: the kernel's PCI reset (sysfs `reset`, FLR where
   the device supports it) with the GPU off the nvidia driver, else the
   nvidia driver's own GPU reset;
4. it goes back to the nvidia driver (persistence mode as it was), its
   faults are forgotten, and the agent's next discovery sees it afresh.
"""

from oslo_log import log

from cyborg.drivers import base
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import occupancy
from cyborg.drivers.nvidia import sysfs as sysfs_mod

LOG = log.getLogger(__name__)


def reclaim(state, mig_binding, passthrough, address):
    """Returns what was done, as a sentence; raises base.Busy before
    touching anything, PrepareError when a step fails.
    """
    with state.locks[address]:
        occupancy.check(state, address)
        try:
            return '; '.join(_reset(state, mig_binding, passthrough,
                                    address))
        except (sysfs_mod.RebindError, nvml.NvmlError) as e:
            raise base.PrepareError(str(e))


def _reset(state, mig_binding, passthrough, address):
    sysfs = state.sysfs
    done = []
    known = state.geometry.get(address)
    uuid = known.uuid if known is not None else None
    driver = sysfs.driver(address)
    persistence = False
    if driver == 'nvidia':
        gpu = _visible(state, address)
        if gpu is not None:
            uuid = gpu.uuid
            for instance in state.instances(gpu):
                state.backend.destroy_instance(gpu.uuid, instance.gi_id)
                done.append('destroyed GPU instance %d@%d'
                            % (instance.gi_id, instance.start))
            if state.backend.persistence_mode(gpu.uuid):
                state.backend.set_persistence_mode(gpu.uuid, False)
                persistence = True
    if sysfs.can_reset(address):
        if driver == 'nvidia':
            passthrough.move(address, None)
            done.append('unbound from nvidia')
        methods = sysfs.reset(address)
        done.append('PCI reset (%s)' % (methods or 'the kernel\'s method'))
    elif driver == 'nvidia':
        with state.backend.released():
            sysfs.driver_reset(address)
        done.append('GPU reset by the nvidia driver (no PCI reset)')
    else:
        raise base.PrepareError(
            'GPU %s offers no PCI reset and is on %s, not nvidia: nothing '
            'can reset it' % (address, driver or 'no driver'))
    if sysfs.driver(address) != 'nvidia':
        passthrough.move(address, 'nvidia')
        done.append('returned from %s to nvidia'
                    % (driver if driver != 'nvidia' else 'no driver'))
    else:
        state.backend.refresh()
    if persistence and uuid:
        state.backend.set_persistence_mode(uuid, True)
    mig_binding.forget_made(address)
    if uuid:
        state.health.reset(uuid)
    LOG.info('GPU %s reset: %s', address, '; '.join(done))
    return done


def _visible(state, address):
    """The GPU as NVML sees it now, or None (lost, not yet listed)."""
    try:
        return next((g for g in state.backend.gpus()
                     if g.address == address), None)
    except nvml.NvmlError:
        return None
