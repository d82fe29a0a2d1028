# SPDX-License-Identifier: Apache-2.0
"""What a metrics scrape shows of a GPU: the backend's readings plus its
MIG instances, each with the processes NVML attributes to it.
"""

from oslo_log import log

from cyborg.drivers.nvidia import backend as nvml

LOG = log.getLogger(__name__)


def telemetry(state, address):
    """The readings of the GPU at `address` and its MIG instances with
    their processes and summed memory. None when NVML cannot see the GPU
    (vfio-pci, not known, NVML down, GPU lost).
    """
    gpu = state.geometry.get(address)
    if gpu is None or state.sysfs.driver(address) != 'nvidia':
        return None
    try:
        state.backend.open()
        data = state.backend.telemetry(gpu.uuid)
        instances = state.instances(gpu)
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
