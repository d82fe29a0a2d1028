# SPDX-License-Identifier: Apache-2.0
"""Per-consumer telemetry of the fake NVML: running vGPU instances, MPS
clients and per-process utilisation samples (the C symbols, plus the
scenario controls that make them).

fake_nvml adds each symbol below to its library unless it defines one of
that name itself (vGPU *types* and host vGPU mode belong there). Every
behaviour follows NVML's API reference (docs.nvidia.com/deploy/nvml-api,
"vGPU Management", "vGPU Utilization and Accounting", "Device Queries"):

- nvmlDeviceGetActiveVgpus: vGPU instance ids of a GPU; NOT_SUPPORTED
  unless the GPU is in host vGPU mode; size query like every array getter
  (INSUFFICIENT_SIZE with the count, SUCCESS when it is zero).
- nvmlVgpuInstanceGet{UUID,VmID,Type,FbUsage,GpuInstanceId,MdevUUID}:
  NOT_FOUND for an id no GPU runs. FbUsage is `unsigned long long *` in
  nvml.h (nvidia-ml-py's wrapper passes a c_uint; the backend calls the
  symbol with a c_ulonglong). GpuInstanceId is INVALID (0xFFFFFFFF) for a
  time-sliced vGPU. VmID is the libvirt domain UUID (type UUID).
- nvmlDeviceGetVgpuUtilization: one sample per vGPU instance newer than
  lastSeenTimeStamp, values as unsigned int in nvmlValue_t, sampleValType
  NVML_VALUE_TYPE_UNSIGNED_INT; SUCCESS with count 0 when none.
- nvmlDeviceGetProcessUtilization: per-process SM/memory/encoder/decoder
  samples newer than lastSeenTimeStamp; NOT_FOUND when none; NOT_SUPPORTED
  in MIG mode (utilisation is not reported per MIG instance, dcgm-exporter
  #216).
- nvmlDeviceGetMPSComputeRunningProcesses_v3: the processes with an MPS
  compute context (clients of an MPS server), same layout as
  nvmlDeviceGetComputeRunningProcesses_v3.
"""

import time

import pynvml as N

INVALID_ID = 0xFFFFFFFF
_FIRST_INSTANCE = 10000       # vGPU instance ids are opaque handles
SYMBOLS = ('nvmlDeviceGetActiveVgpus', 'nvmlVgpuInstanceGetUUID',
           'nvmlVgpuInstanceGetVmID', 'nvmlVgpuInstanceGetType',
           'nvmlVgpuInstanceGetFbUsage', 'nvmlVgpuInstanceGetGpuInstanceId',
           'nvmlVgpuInstanceGetMdevUUID', 'nvmlVgpuTypeGetFramebufferSize',
           'nvmlVgpuTypeGetName', 'nvmlDeviceGetVgpuUtilization',
           'nvmlDeviceGetProcessUtilization',
           'nvmlDeviceGetMPSComputeRunningProcesses_v3')


def _now_us():
    return int(time.time() * 1e6)


def _consumers(gpu):
    """The per-consumer state of a fake GPU, made on first use."""
    state = getattr(gpu, 'consumers', None)
    if state is None:
        state = gpu.consumers = {'vgpus': {}, 'util': {}, 'mps': set()}
    return state


def _host_vgpu(gpu):
    return gpu.values.get('virtualization_mode') == \
        N.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU


def _instance(lib, instance_id):
    for gpu in lib.fake._gpus:
        vgpu = _consumers(gpu)['vgpus'].get(F._val(instance_id))
        if vgpu is not None:
            if gpu.lost:
                raise F._Return(N.NVML_ERROR_GPU_IS_LOST)
            return vgpu
    raise F._Return(N.NVML_ERROR_NOT_FOUND)


def _type(lib, type_id):
    for gpu in lib.fake._gpus:
        for vgpu in _consumers(gpu)['vgpus'].values():
            if vgpu['type_id'] == F._val(type_id):
                return vgpu
    raise F._Return(N.NVML_ERROR_INVALID_ARGUMENT)


def _array(array, count, items):
    """The size-query protocol of NVML's array getters."""
    n = F._out(count)
    if array is None or n.value < len(items):
        n.value = len(items)
        if items:
            raise F._Return(N.NVML_ERROR_INSUFFICIENT_SIZE)
        return False
    n.value = len(items)
    return True


# -- C symbols (called as methods of fake_nvml's library) -----------------

def nvmlDeviceGetActiveVgpus(lib, dev, count, instances):
    if not _host_vgpu(dev):
        raise F._Return(N.NVML_ERROR_NOT_SUPPORTED)
    ids = sorted(_consumers(dev)['vgpus'])
    if _array(instances, count, ids):
        for i, instance_id in enumerate(ids):
            instances[i] = instance_id


def nvmlVgpuInstanceGetUUID(lib, instance, buf, length):
    F._put_str(F._out(buf), length, _instance(lib, instance)['uuid'])


def nvmlVgpuInstanceGetVmID(lib, instance, buf, length, id_type):
    vgpu = _instance(lib, instance)
    F._put_str(F._out(buf), length, vgpu['vm_id'])
    F._out(id_type).value = N.NVML_VGPU_VM_ID_UUID


def nvmlVgpuInstanceGetMdevUUID(lib, instance, buf, length):
    vgpu = _instance(lib, instance)
    if vgpu['mdev_uuid'] is None:
        # vGPU 17+ on VFs configured through current_vgpu_type: no mdev.
        raise F._Return(N.NVML_ERROR_NOT_SUPPORTED)
    F._put_str(F._out(buf), length, vgpu['mdev_uuid'])


def nvmlVgpuInstanceGetType(lib, instance, out):
    F._out(out).value = _instance(lib, instance)['type_id']


def nvmlVgpuInstanceGetFbUsage(lib, instance, out):
    F._out(out).value = _instance(lib, instance)['fb_used']


def nvmlVgpuInstanceGetGpuInstanceId(lib, instance, out):
    gi = _instance(lib, instance)['gi_id']
    F._out(out).value = INVALID_ID if gi is None else gi


def nvmlVgpuTypeGetFramebufferSize(lib, type_id, out):
    F._out(out).value = _type(lib, type_id)['fb_size']


def nvmlVgpuTypeGetName(lib, type_id, buf, length):
    F._put_str(buf, F._out(length).value, _type(lib, type_id)['type_name'])


def nvmlDeviceGetVgpuUtilization(lib, dev, last_seen, value_type, count,
                                 samples):
    if not _host_vgpu(dev):
        raise F._Return(N.NVML_ERROR_NOT_SUPPORTED)
    F._out(value_type).value = N.NVML_VALUE_TYPE_UNSIGNED_INT
    fresh = [(i, v) for i, v in sorted(_consumers(dev)['vgpus'].items())
             if v['sampled_us'] > F._val(last_seen)]
    if _array(samples, count, fresh):
        for slot, (instance_id, v) in zip(samples, fresh):
            slot.vgpuInstance = instance_id
            slot.timeStamp = v['sampled_us']
            slot.smUtil.uiVal = v['sm_util']
            slot.memUtil.uiVal = v['mem_util']
            slot.encUtil.uiVal = 0
            slot.decUtil.uiVal = 0


def nvmlDeviceGetProcessUtilization(lib, dev, samples, count, last_seen):
    if dev.mig and dev.mig[0]:
        raise F._Return(N.NVML_ERROR_NOT_SUPPORTED)
    fresh = [(pid, u) for pid, u in sorted(_consumers(dev)['util'].items())
             if u['sampled_us'] > F._val(last_seen) and pid in dev.procs]
    if not fresh:
        raise F._Return(N.NVML_ERROR_NOT_FOUND)
    if _array(samples, count, fresh):
        for slot, (pid, u) in zip(samples, fresh):
            slot.pid = pid
            slot.timeStamp = u['sampled_us']
            slot.smUtil, slot.memUtil = u['sm_util'], u['mem_util']
            slot.encUtil = slot.decUtil = 0


def nvmlDeviceGetMPSComputeRunningProcesses_v3(lib, dev, count, procs):
    found = [(pid, p) for pid, p in dev.processes()
             if pid in _consumers(dev)['mps']]
    n = F._out(count)
    if procs is None or n.value < len(found):
        n.value = len(found)
        if found:
            raise F._Return(N.NVML_ERROR_INSUFFICIENT_SIZE)
        return
    for slot, (pid, p) in zip(procs, found):
        slot.pid = pid
        slot.usedGpuMemory = (F.NOT_AVAILABLE if p['used_bytes'] is None
                              else p['used_bytes'])
        slot.gpuInstanceId = slot.computeInstanceId = INVALID_ID
    n.value = len(found)


# -- scenario controls ------------------------------------------------------

def host_vgpu_mode(fake, uuid):
    """Put a fake GPU in host vGPU mode (what the vGPU Manager's driver
    reports); fake host specs that model a vGPU host set it themselves.
    """
    with fake._lock:
        fake._gpu(uuid).values['virtualization_mode'] = \
            N.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU


def add_vgpu(fake, uuid, vm_id, type_id, type_name, fb_size, fb_used=0,
             gi_id=None, mdev_uuid=None, sm_util=0, mem_util=0):
    """A vGPU instance running for a VM on a GPU in host vGPU mode (a
    MIG-backed one names its GPU instance). Returns its instance id.
    """
    with fake._lock:
        gpu = fake._gpu(uuid)
        if not _host_vgpu(gpu):
            raise ValueError('%s is not in host vGPU mode' % uuid)
        if gi_id is not None and gi_id not in gpu.gis:
            raise ValueError('no GPU instance %s on %s' % (gi_id, uuid))
        vgpus = _consumers(gpu)['vgpus']
        instance_id = max([_FIRST_INSTANCE - 1] + [
            i for g in fake._gpus for i in _consumers(g)['vgpus']]) + 1
        vgpus[instance_id] = {
            'uuid': str(F.uuidlib.uuid5(F.uuidlib.NAMESPACE_URL,
                                        'vgpu:%d:%s' % (instance_id, vm_id))),
            'vm_id': vm_id,
            'type_id': type_id, 'type_name': type_name, 'fb_size': fb_size,
            'fb_used': fb_used, 'gi_id': gi_id, 'mdev_uuid': mdev_uuid,
            'sm_util': sm_util, 'mem_util': mem_util,
            'sampled_us': _now_us()}
        return instance_id


def remove_vgpu(fake, instance_id):
    with fake._lock:
        for gpu in fake._gpus:
            _consumers(gpu)['vgpus'].pop(instance_id, None)


def vgpu_load(fake, instance_id, fb_used=None, sm_util=None, mem_util=None):
    """New readings of a vGPU instance (a new utilisation sample)."""
    with fake._lock:
        for gpu in fake._gpus:
            vgpu = _consumers(gpu)['vgpus'].get(instance_id)
            if vgpu is None:
                continue
            for key, value in (('fb_used', fb_used), ('sm_util', sm_util),
                               ('mem_util', mem_util)):
                if value is not None:
                    vgpu[key] = value
            vgpu['sampled_us'] = _now_us()
            return
        raise ValueError('no vGPU instance %s' % instance_id)


def add_mps_client(fake, uuid, pid, used_bytes):
    """An MPS client process on a GPU (an MPS compute context)."""
    fake.add_process(uuid, pid, used_bytes)
    with fake._lock:
        _consumers(fake._gpu(uuid))['mps'].add(pid)


def process_utilization(fake, uuid, pid, sm_util, mem_util):
    """A utilisation sample of a process running on a GPU."""
    with fake._lock:
        _consumers(fake._gpu(uuid))['util'][pid] = {
            'sm_util': sm_util, 'mem_util': mem_util,
            'sampled_us': _now_us()}


# Last: fake_nvml adds the symbols above to its library when it loads.
from cyborg_emulators.nvidia import fake_nvml as F  # noqa: E402
