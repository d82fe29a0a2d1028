# SPDX-License-Identifier: Apache-2.0
"""Reclaiming a GPU nobody owns: destroy its MIG instances, hand it back
to the nvidia driver, forget its faults. The agent has checked that no
claim or allocation holds it; processes are checked here.
"""

from cyborg.drivers import base
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import sysfs as sysfs_mod


def reclaim(state, mig_binding, address):
    """Returns what was done, as a sentence; raises PrepareError when it
    must not.
    """
    with state.locks[address]:
        done = []
        if state.sysfs.driver(address) != 'nvidia':
            previous = state.sysfs.driver(address)
            try:
                state.sysfs.rebind(address, 'nvidia')
            except sysfs_mod.RebindError as e:
                raise base.PrepareError(str(e))
            state.backend.refresh()
            done.append('rebound from %s to nvidia'
                        % (previous or 'no driver'))
        gpu = state.live(state.geometry.get(address) or nvml.Gpu(
            uuid=None, address=address, name='', product_id='',
            memory_total=0, memory_reserved=0, compute_capability=()))
        if gpu.processes:
            raise base.PrepareError('%d processes use GPU %s'
                                    % (len(gpu.processes), address))
        for instance in state.instances(gpu):
            state.backend.destroy_instance(gpu.uuid, instance.gi_id)
            done.append('destroyed GPU instance %d@%d'
                        % (instance.gi_id, instance.start))
        mig_binding.forget_made(address)
        state.health.reset(gpu.uuid)
        return '; '.join(done) or 'nothing to undo'
