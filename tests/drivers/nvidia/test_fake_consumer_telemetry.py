# SPDX-License-Identifier: Apache-2.0
"""The fake NVML's per-consumer telemetry through the real nvidia-ml-py
wrappers: vGPU instances, vGPU and process utilisation samples, MPS
clients, and the errors NVML's reference gives for each."""

import ctypes

import pynvml as N
import pytest

from cyborg_emulators.nvidia import fake_consumer_telemetry as consumers
from cyborg_emulators.nvidia import fake_nvml

GIB = 1 << 30


@pytest.fixture
def nvml():
    fake = fake_nvml.FakeNvml([
        {'model': 'h200', 'pci_address': '0000:1b:00.0', 'mig_mode': 0},
        {'model': 'h200', 'pci_address': '0000:43:00.0', 'mig_mode': 1}])
    with fake:
        N.nvmlInit()
        yield fake
        N.nvmlShutdown()


def _handle(index):
    h = N.nvmlDeviceGetHandleByIndex(index)
    return h, N.nvmlDeviceGetUUID(h)


def _code(call, *args):
    with pytest.raises(N.NVMLError) as e:
        call(*args)
    return e.value.value


def test_vgpu_instances_need_host_vgpu_mode(nvml):
    h, uuid = _handle(0)
    assert _code(N.nvmlDeviceGetActiveVgpus, h) == N.NVML_ERROR_NOT_SUPPORTED
    assert _code(N.nvmlDeviceGetVgpuUtilization, h, 0) == \
        N.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(ValueError, match='host vGPU mode'):
        consumers.add_vgpu(nvml, uuid, 'vm', 1, 't', GIB)
    consumers.host_vgpu_mode(nvml, uuid)
    assert N.nvmlDeviceGetActiveVgpus(h) == []
    assert N.nvmlDeviceGetVgpuUtilization(h, 0) == []


def test_vgpu_instance_readings(nvml):
    h, uuid = _handle(0)
    consumers.host_vgpu_mode(nvml, uuid)
    inst = consumers.add_vgpu(nvml, uuid, 'vm-1', 1101, 'GRID H200-18C',
                              18 * GIB, fb_used=6 * GIB,
                              mdev_uuid='m-1', sm_util=40, mem_util=10)
    [found] = N.nvmlDeviceGetActiveVgpus(h)
    assert found == inst
    assert N.nvmlVgpuInstanceGetVmID(inst) == (b'vm-1',
                                               N.NVML_VGPU_VM_ID_UUID)
    assert N.nvmlVgpuInstanceGetMdevUUID(inst) == 'm-1'
    assert N.nvmlVgpuInstanceGetGpuInstanceId(inst) == 0xFFFFFFFF
    assert N.nvmlVgpuTypeGetFramebufferSize(
        N.nvmlVgpuInstanceGetType(inst)) == 18 * GIB
    # nvml.h's out-parameter is 64 bits: 6 GiB fits only there.
    used = ctypes.c_ulonglong()
    fn = N._nvmlGetFunctionPointer('nvmlVgpuInstanceGetFbUsage')
    assert fn(ctypes.c_uint(inst), ctypes.byref(used)) == N.NVML_SUCCESS
    assert used.value == 6 * GIB
    [sample] = N.nvmlDeviceGetVgpuUtilization(h, 0)
    assert (sample.vgpuInstance, sample.smUtil.uiVal,
            sample.memUtil.uiVal) == (inst, 40, 10)
    # Only samples newer than the last one seen.
    assert N.nvmlDeviceGetVgpuUtilization(h, sample.timeStamp) == []
    consumers.remove_vgpu(nvml, inst)
    assert _code(N.nvmlVgpuInstanceGetUUID, inst) == N.NVML_ERROR_NOT_FOUND


def test_mig_backed_vgpu_names_its_gpu_instance(nvml):
    h, uuid = _handle(1)
    consumers.host_vgpu_mode(nvml, uuid)
    gi, _ = nvml.create_gi(uuid, 19, 6)
    with pytest.raises(ValueError, match='no GPU instance'):
        consumers.add_vgpu(nvml, uuid, 'vm', 1180, 't', GIB, gi_id=gi + 1)
    inst = consumers.add_vgpu(nvml, uuid, 'vm', 1180, 'GRID H200-1-18C',
                              17 * GIB, gi_id=gi)
    assert N.nvmlVgpuInstanceGetGpuInstanceId(inst) == gi
    # No mdev on the vendor-specific VFIO layout.
    assert _code(N.nvmlVgpuInstanceGetMdevUUID, inst) == \
        N.NVML_ERROR_NOT_SUPPORTED


def test_process_utilization_and_mps_clients(nvml):
    h, uuid = _handle(0)
    assert _code(N.nvmlDeviceGetProcessUtilization, h, 0) == \
        N.NVML_ERROR_NOT_FOUND
    nvml.add_process(uuid, 10, GIB)                 # not an MPS client
    consumers.add_mps_client(nvml, uuid, 11, 2 * GIB)
    consumers.process_utilization(nvml, uuid, 11, 30, 7)
    assert [(p.pid, p.usedGpuMemory)
            for p in N.nvmlDeviceGetMPSComputeRunningProcesses_v3(h)] == [
        (11, 2 * GIB)]
    [sample] = N.nvmlDeviceGetProcessUtilization(h, 0)
    assert (sample.pid, sample.smUtil, sample.memUtil) == (11, 30, 7)
    # Not reported per MIG instance.
    h2, _ = _handle(1)
    assert _code(N.nvmlDeviceGetProcessUtilization, h2, 0) == \
        N.NVML_ERROR_NOT_SUPPORTED
