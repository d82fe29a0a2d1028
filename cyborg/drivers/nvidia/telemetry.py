# SPDX-License-Identifier: Apache-2.0
"""What a metrics scrape shows of a GPU: the backend's readings plus its
MIG instances, each with the processes NVML attributes to it, and its
consumers: running vGPU instances (time-sliced or MIG-backed) and MPS
clients, each with what it uses.
"""

from oslo_log import log

from cyborg.conf import CONF
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import privileged

LOG = log.getLogger(__name__)


def share_handles(state, pids):
    """{pid: the share handle it carries, or None}, read through the
    privsep daemon (MPS clients run as other users). A failed read leaves
    every client unattributed, never the scrape failed; it is logged once
    per change of the reason (state.share_handles_failed), not on every
    scrape.
    """
    if not pids:
        return {}
    try:
        handles = privileged.share_handles(CONF.nvidia.proc_root,
                                           list(pids))
    except Exception as e:
        if str(e) != state.share_handles_failed:
            LOG.warning('Cannot read the share handles of MPS clients '
                        '%s: %s', ', '.join(str(p) for p in pids), e)
            state.share_handles_failed = str(e)
        return dict.fromkeys(pids)
    state.share_handles_failed = None
    return dict(zip(pids, handles))


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
        consumers = state.backend.consumer_telemetry(gpu.uuid)
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
    data['vgpus'] = consumers['vgpus']
    util = consumers['process_util']
    handles = share_handles(
        state, [pid for pid, _ in consumers['mps_clients']])
    data['mps_clients'] = [
        {'pid': pid, 'memory_used': used,
         'sm_util': util.get(pid, (None, None))[0],
         'mem_util': util.get(pid, (None, None))[1],
         'share_handle': handles.get(pid)}
        for pid, used in consumers['mps_clients']]
    return data
