# SPDX-License-Identifier: Apache-2.0
"""The fake NVML, driven only through the real nvidia-ml-py API.

If these pass, code written against pynvml sees the same structs, error
classes and MIG rules it would see on a GPU host; the H200 test pins the
fake to a real capture.
"""

import ctypes
import importlib.metadata
import json
import os
import threading
import time

import pynvml as N
import pytest

from cyborg.drivers.nvidia import models
from cyborg.drivers.nvidia.sysfs import RebindError
from cyborg.drivers import pci as pci_driver
from cyborg_emulators.nvidia import capture as nvml_capture
from cyborg_emulators.nvidia import fake_nvml
from cyborg_emulators.nvidia import fake_sysfs

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                        'fixtures', 'nvml')
CAPTURE = os.path.join(FIXTURES, 'h200-real-580.159.04.json')
MODELS = ('h200', 'h100-80gb', 'h100-pcie', 'a100-40gb', 'a100-80gb')
GPU_A = 'GPU-11111111-2222-3333-4444-555555555555'
GPU_B = 'GPU-66666666-7777-8888-9999-000000000000'
# nvidia-smi mig -lgipp, identical on A100/H100/H200: id -> (starts, size)
LGIPP = {19: ([0, 1, 2, 3, 4, 5, 6], 1), 20: ([0, 1, 2, 3, 4, 5, 6], 1),
         15: ([0, 2, 4, 6], 2), 14: ([0, 2, 4], 2), 9: ([0, 4], 4),
         5: ([0], 4), 0: ([0], 8)}
ENUM_IDS = {N.NVML_GPU_INSTANCE_PROFILE_1_SLICE: 19,
            N.NVML_GPU_INSTANCE_PROFILE_2_SLICE: 14,
            N.NVML_GPU_INSTANCE_PROFILE_3_SLICE: 9,
            N.NVML_GPU_INSTANCE_PROFILE_4_SLICE: 5,
            N.NVML_GPU_INSTANCE_PROFILE_7_SLICE: 0,
            N.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: 20,
            N.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: 15}
# GI profile id -> CI profile with the same SM slice count
CI_FOR_GI = {19: N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
             20: N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
             15: N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
             14: N.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
             9: N.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
             5: N.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
             0: N.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE}
NAMES = {'a100-40gb': 'MIG 1g.5gb', 'a100-80gb': 'MIG 1g.10gb',
         'h100-pcie': 'MIG 1g.10gb',
         'h100-80gb': 'MIG 1g.10gb', 'h200': 'MIG 1g.18gb'}
XID_ECC = (N.nvmlEventTypeXidCriticalError
           | N.nvmlEventTypeDoubleBitEccError
           | N.nvmlEventTypeSingleBitEccError)
# Wrappers our NVML backend and the fake's tests call: each C symbol they
# use must exist in the fake, or a pynvml upgrade silently broke it.
USED_WRAPPERS = (
    'nvmlInit', 'nvmlShutdown', 'nvmlSystemGetDriverVersion',
    'nvmlSystemGetNVMLVersion', 'nvmlSystemGetCudaDriverVersion',
    'nvmlDeviceGetCount', 'nvmlDeviceGetHandleByIndex',
    'nvmlDeviceGetHandleByUUID', 'nvmlDeviceGetHandleByPciBusId',
    'nvmlDeviceGetPciInfo', 'nvmlDeviceGetName', 'nvmlDeviceGetUUID',
    'nvmlDeviceGetSerial', 'nvmlDeviceGetMinorNumber',
    'nvmlDeviceGetMemoryInfo', 'nvmlDeviceGetBAR1MemoryInfo',
    'nvmlDeviceGetCudaComputeCapability', 'nvmlDeviceGetArchitecture',
    'nvmlDeviceGetBrand', 'nvmlDeviceGetMigMode', 'nvmlDeviceSetMigMode',
    'nvmlDeviceGetMaxMigDeviceCount', 'nvmlDeviceGetGpuInstanceProfileInfo',
    'nvmlDeviceGetGpuInstancePossiblePlacements',
    'nvmlDeviceGetGpuInstanceRemainingCapacity',
    'nvmlDeviceCreateGpuInstanceWithPlacement',
    'nvmlDeviceCreateGpuInstance', 'nvmlDeviceGetGpuInstances',
    'nvmlDeviceGetGpuInstanceById', 'nvmlGpuInstanceGetInfo',
    'nvmlGpuInstanceGetComputeInstanceProfileInfo',
    'nvmlGpuInstanceCreateComputeInstance',
    'nvmlGpuInstanceGetComputeInstances', 'nvmlComputeInstanceGetInfo',
    'nvmlComputeInstanceDestroy', 'nvmlGpuInstanceDestroy',
    'nvmlDeviceGetMigDeviceHandleByIndex', 'nvmlDeviceIsMigDeviceHandle',
    'nvmlDeviceGetGpuInstanceId', 'nvmlDeviceGetComputeInstanceId',
    'nvmlDeviceGetDeviceHandleFromMigDeviceHandle',
    'nvmlDeviceGetComputeRunningProcesses', 'nvmlDeviceGetNumaNodeId',
    'nvmlDeviceGetTemperature', 'nvmlDeviceGetUtilizationRates',
    'nvmlDeviceGetPowerUsage', 'nvmlDeviceGetEnforcedPowerLimit',
    'nvmlDeviceGetEccMode', 'nvmlDeviceGetTotalEccErrors',
    'nvmlDeviceGetRemappedRows', 'nvmlDeviceGetVirtualizationMode',
    'nvmlDeviceGetPersistenceMode', 'nvmlDeviceGetComputeMode',
    'nvmlDeviceGetCurrentClocksEventReasons', 'nvmlDeviceGetNvLinkState',
    'nvmlEventSetCreate', 'nvmlDeviceRegisterEvents',
    'nvmlDeviceGetSupportedEventTypes', 'nvmlEventSetWait_v2',
    'nvmlEventSetFree', 'nvmlErrorString')


@pytest.fixture
def start():
    """start(gpus, **kw) -> an installed, initialised FakeNvml."""
    fakes = []

    def _start(gpus, init=True, **kw):
        fake = fake_nvml.FakeNvml(gpus, **kw).install()
        fakes.append(fake)
        if init:
            N.nvmlInit()
        return fake

    yield _start
    for fake in fakes:
        fake.uninstall()


def gpu(model='h200', address='0000:1b:00.0', uuid=GPU_A, **kw):
    return dict(model=model, pci_address=address, uuid=uuid, **kw)


def placement(start, size):
    return ctypes.byref(N.c_nvmlGpuInstancePlacement_t(start, size))


def create(handle, profile_id, start, size=None):
    size = size or LGIPP[profile_id][1]
    return N.nvmlDeviceCreateGpuInstanceWithPlacement(
        handle, profile_id, placement(start, size))


def full_ci(gi):
    """A compute instance spanning the whole GPU instance."""
    enum = CI_FOR_GI[N.nvmlGpuInstanceGetInfo(gi).profileId]
    profile = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, enum, N.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
    return N.nvmlGpuInstanceCreateComputeInstance(gi, profile.id)


def gi_ids(handle, profile_id):
    arr = (N.c_nvmlGpuInstance_t * 8)()
    count = ctypes.c_uint(0)
    N.nvmlDeviceGetGpuInstances(handle, profile_id, arr, ctypes.byref(count))
    return [N.nvmlGpuInstanceGetInfo(arr[i]).id for i in range(count.value)]


def placements(handle, profile_id):
    count = ctypes.c_uint(0)
    N.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None,
                                                 ctypes.byref(count))
    arr = (N.c_nvmlGpuInstancePlacement_t * count.value)()
    N.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, arr,
                                                 ctypes.byref(count))
    return [(p.start, p.size) for p in arr]


# -- the fake's contract with pynvml --------------------------------------

def test_private_pynvml_names_the_fake_patches_exist():
    for name in ('_LoadNvmlLibrary', '_nvmlGetFunctionPointer',
                 '_nvmlGetFunctionPointer_cache', 'nvmlLib',
                 '_nvmlLib_refcount', 'libLoadLock'):
        assert hasattr(N, name), name
    assert N.c_nvmlDevice_t._type_ is N.struct_c_nvmlDevice_t
    assert importlib.metadata.version('nvidia-ml-py')
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution('pynvml')  # the deprecated shim


@pytest.mark.parametrize('wrapper', USED_WRAPPERS)
def test_fake_implements_every_symbol_the_wrappers_use(wrapper):
    with fake_nvml.FakeNvml([]):
        N._LoadNvmlLibrary()
        for symbol in fake_nvml.c_symbols(wrapper):
            assert callable(N._nvmlGetFunctionPointer(symbol)), symbol


def test_quirky_symbol_names():
    """The versioned C symbols behind plain wrapper names."""
    expect = {
        'nvmlInit': {'nvmlInitWithFlags'},
        'nvmlDeviceGetCount': {'nvmlDeviceGetCount_v2'},
        'nvmlDeviceGetHandleByPciBusId': {'nvmlDeviceGetHandleByPciBusId_v2'},
        'nvmlDeviceGetPciInfo': {'nvmlDeviceGetPciInfo_v3'},
        'nvmlDeviceGetMemoryInfo': {'nvmlDeviceGetMemoryInfo',
                                    'nvmlDeviceGetMemoryInfo_v2'},
        'nvmlDeviceGetComputeRunningProcesses':
            {'nvmlDeviceGetComputeRunningProcesses_v3'},
        'nvmlComputeInstanceGetInfo': {'nvmlComputeInstanceGetInfo_v2'},
        'nvmlDeviceGetGpuInstancePossiblePlacements':
            {'nvmlDeviceGetGpuInstancePossiblePlacements_v2'},
        'nvmlEventSetWait': {'nvmlEventSetWait_v2'},
    }
    for wrapper, symbols in expect.items():
        assert fake_nvml.c_symbols(wrapper) == symbols, wrapper
    assert 'nvmlDeviceGetGpuInstanceProfileInfoV' in fake_nvml.c_symbols(
        'nvmlDeviceGetGpuInstanceProfileInfo')


def test_unknown_symbol_is_function_not_found(start):
    start([gpu()])
    with pytest.raises(N.NVMLError_FunctionNotFound):
        N.nvmlDeviceGetFanSpeed(N.nvmlDeviceGetHandleByIndex(0))


def test_uninstall_restores_pynvml():
    originals = (N._LoadNvmlLibrary, N._nvmlGetFunctionPointer)
    fake = fake_nvml.FakeNvml([gpu()]).install()
    try:
        N.nvmlInit()
        N.nvmlInit()
        assert N._nvmlLib_refcount == 2
        with pytest.raises(RuntimeError):
            fake_nvml.FakeNvml([gpu()]).install()
    finally:
        fake.uninstall()
    assert (N._LoadNvmlLibrary, N._nvmlGetFunctionPointer) == originals
    assert N._nvmlLib_refcount == 0 and N.nvmlLib is None
    assert not N._nvmlGetFunctionPointer_cache
    assert not fake.initialized


@pytest.mark.parametrize('code,cls', [
    (N.NVML_ERROR_LIBRARY_NOT_FOUND, N.NVMLError_LibraryNotFound),
    (N.NVML_ERROR_DRIVER_NOT_LOADED, N.NVMLError_DriverNotLoaded),
    (N.NVML_ERROR_LIB_RM_VERSION_MISMATCH, N.NVMLError_LibRmVersionMismatch),
    (N.NVML_ERROR_NO_PERMISSION, N.NVMLError_NoPermission)])
def test_init_errors(start, code, cls):
    fake = start([gpu()], init=False, init_error=code)
    with pytest.raises(cls):
        N.nvmlInit()
    fake.init_error = None
    N.nvmlInit()
    assert N.nvmlDeviceGetCount() == 1


def test_calls_before_init_are_uninitialized(start):
    start([gpu()], init=False)
    with pytest.raises(N.NVMLError_Uninitialized):
        N.nvmlDeviceGetCount()
    N.nvmlInit()
    N.nvmlShutdown()
    with pytest.raises(N.NVMLError_Uninitialized):
        N.nvmlSystemGetDriverVersion()


# -- identity: the H200 fake is the real capture ---------------------------

def test_h200_reproduces_the_real_capture(start):
    with open(CAPTURE) as f:
        capture = json.load(f)
    real = capture['devices'][0]
    start([gpu('h200', real['pci']['busIdLegacy'], real['uuid'])])
    assert N.nvmlSystemGetDriverVersion() == capture['driver_version']
    assert N.nvmlSystemGetNVMLVersion() == capture['nvml_version']
    assert N.nvmlSystemGetCudaDriverVersion() == \
        capture['cuda_driver_version']
    # The capture tool itself, run over the fake, as it wrote its JSON.
    taken = json.loads(json.dumps(nvml_capture.capture(), default=repr))
    for key in ('driver_version', 'nvml_version', 'cuda_driver_version',
                'topology_common_ancestor'):
        assert taken[key] == capture[key], key
    [fake] = taken['devices']
    assert set(fake) == set(real)
    for key in real:
        assert fake[key] == real[key], key


@pytest.mark.parametrize('model', MODELS)
def test_model_files_have_the_capture_shape(model):
    with open(CAPTURE) as f:
        capture = json.load(f)
    doc = models.load(model)
    assert doc['_source']
    assert set(doc) - {'_source'} == set(capture)
    assert set(doc['devices'][0]) == set(capture['devices'][0])


def test_numa_node_from_spec_else_model(start):
    start([gpu(numa_node=1), gpu(address='0000:43:00.0', uuid=GPU_B)])
    assert N.nvmlDeviceGetNumaNodeId(N.nvmlDeviceGetHandleByIndex(0)) == 1
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetNumaNodeId(N.nvmlDeviceGetHandleByIndex(1))


def test_identity_and_index_order(start):
    start([gpu('a100-80gb', '0000:43:00.0', GPU_B),
           gpu('h200', '0000:1b:00.0', GPU_A)],
          driver_version='580.200.01')
    assert N.nvmlSystemGetDriverVersion() == '580.200.01'
    assert N.nvmlSystemGetNVMLVersion() == '13.580.200.01'
    first = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetUUID(first) == GPU_B   # spec order, not PCI
    assert N.nvmlDeviceGetName(first) == 'NVIDIA A100-SXM4-80GB'
    assert N.nvmlDeviceGetMinorNumber(first) == 1  # minors in PCI order
    pci = N.nvmlDeviceGetPciInfo(N.nvmlDeviceGetHandleByIndex(1))
    assert pci.busId == '00000000:1B:00.0'
    assert pci.busIdLegacy == '0000:1B:00.0'
    assert (pci.domain, pci.bus, pci.device) == (0, 0x1b, 0)
    assert pci.pciDeviceId == 0x233510DE
    for bus_id in ('0000:1b:00.0', '00000000:1B:00.0', '1b:00.0'):
        h = N.nvmlDeviceGetHandleByPciBusId(bus_id)
        assert N.nvmlDeviceGetUUID(h) == GPU_A
    assert N.nvmlDeviceGetUUID(N.nvmlDeviceGetHandleByUUID(GPU_A)) == GPU_A
    with pytest.raises(N.NVMLError_NotFound):
        N.nvmlDeviceGetHandleByUUID('GPU-nope')
    with pytest.raises(N.NVMLError_InvalidArgument):
        N.nvmlDeviceGetHandleByIndex(2)
    assert N.nvmlDeviceGetCudaComputeCapability(first) == (8, 0)
    assert N.nvmlDeviceGetArchitecture(first) == N.NVML_DEVICE_ARCH_AMPERE


def test_default_uuid_is_stable_per_address():
    one = fake_nvml.FakeNvml([{'pci_address': '0000:1b:00.0'}]).gpu_info()
    two = fake_nvml.FakeNvml([{'pci_address': '0000:1b:00.0'}]).gpu_info()
    assert one[0]['uuid'] == two[0]['uuid']
    assert one[0]['uuid'].startswith('GPU-')


def test_non_mig_model_is_not_supported(start):
    doc = models.load('h200')
    dev = doc['devices'][0]
    dev['mig_mode'] = {'error': 'NVMLError_NotSupported', 'code': 3}
    dev['gi_profiles'] = []
    start([gpu(model=doc)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    for call in (lambda: N.nvmlDeviceGetMigMode(h),
                 lambda: N.nvmlDeviceSetMigMode(h, 1),
                 lambda: N.nvmlDeviceGetGpuInstanceProfileInfo(h, 0)):
        with pytest.raises(N.NVMLError_NotSupported):
            call()


def test_scripted_failures(start):
    fake = start([gpu(), gpu(address='0000:43:00.0', uuid=GPU_B)])
    a, b = (N.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    fake.fail('nvmlDeviceGetMemoryInfo', N.NVML_ERROR_NO_PERMISSION,
              uuid=GPU_A)
    for version in (None, N.nvmlMemory_v2):
        with pytest.raises(N.NVMLError_NoPermission):
            N.nvmlDeviceGetMemoryInfo(a, version)
    N.nvmlDeviceGetMemoryInfo(b)
    fake.fail('nvmlDeviceGetTemperature', N.NVML_ERROR_UNKNOWN, times=1)
    with pytest.raises(N.NVMLError_Unknown):
        N.nvmlDeviceGetTemperature(b, N.NVML_TEMPERATURE_GPU)
    assert N.nvmlDeviceGetTemperature(b, N.NVML_TEMPERATURE_GPU) == 35
    fake.clear_failures()
    N.nvmlDeviceGetMemoryInfo(a)


# -- MIG geometry and rules --------------------------------------------------

@pytest.mark.parametrize('model', MODELS)
def test_profiles_and_placements_per_model(start, model):
    start([gpu(model, mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    for enum, profile_id in ENUM_IDS.items():
        info = N.nvmlDeviceGetGpuInstanceProfileInfo(h, enum)
        assert info.id == profile_id
        assert placements(h, profile_id) == [
            (s, LGIPP[profile_id][1]) for s in LGIPP[profile_id][0]]
    assert N.nvmlDeviceGetGpuInstanceProfileInfo(h, 0).name == NAMES[model]
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetGpuInstanceProfileInfo(
            h, N.NVML_GPU_INSTANCE_PROFILE_8_SLICE)
    with pytest.raises(N.NVMLError_InvalidArgument):
        N.nvmlDeviceGetGpuInstanceProfileInfo(h, 17)
    with pytest.raises(N.NVMLError_InvalidArgument):
        N.nvmlDeviceGetGpuInstancePossiblePlacements(
            h, 99, None, ctypes.byref(ctypes.c_uint()))
    assert N.nvmlDeviceGetMaxMigDeviceCount(h) == 7


def test_placement_array_too_small_is_a_crash_not_an_error(start):
    """A real H200 ignores the count passed in and writes all 7 entries
    past a 2-entry array (the probe process later segfaulted).
    """
    start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    count = ctypes.c_uint(2)
    arr = (N.c_nvmlGpuInstancePlacement_t * 2)()
    with pytest.raises(BufferError):
        N.nvmlDeviceGetGpuInstancePossiblePlacements(h, 19, arr,
                                                     ctypes.byref(count))


def test_mig_disabled_answers_like_a_real_h200(start):
    """Probed on an H200 with driver 580.159.04 and MIG disabled."""
    start([gpu(mig_mode=0)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    for profile_id, at in ((9, 0), (9, 2)):
        with pytest.raises(N.NVMLError_NotSupported):
            create(h, profile_id, at)
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceCreateGpuInstance(h, 9)
    with pytest.raises(N.NVMLError_InvalidArgument):   # profile first
        create(h, 99, 0, 4)
    for call in (lambda: N.nvmlDeviceGetGpuInstanceById(h, 1),
                 lambda: N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)):
        with pytest.raises(N.NVMLError_NotFound):
            call()
    for call in (N.nvmlDeviceGetGpuInstanceId,
                 N.nvmlDeviceGetComputeInstanceId,
                 N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle):
        with pytest.raises(N.NVMLError_InvalidArgument):
            call(h)
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetTopologyCommonAncestor(h, h)   # VM passthrough
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetNvLinkState(h, 18)
    memory = N.c_nvmlMemory_v2_t()
    memory.version = 0
    fn = N._nvmlGetFunctionPointer('nvmlDeviceGetMemoryInfo_v2')
    assert fn(h, ctypes.byref(memory)) == N.NVML_ERROR_FUNCTION_NOT_FOUND
    assert str(N.NVMLError(N.NVML_ERROR_INSUFFICIENT_RESOURCES)) == \
        'Insufficient Resources'
    # The mask the real H200 registered (health-check fixture).
    assert N.nvmlDeviceGetSupportedEventTypes(h) == XID_ECC


def test_overlap_is_insufficient_resources(start):
    start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    create(h, 9, 4)
    for profile_id, at in ((14, 4), (19, 5), (0, 0), (9, 4)):
        with pytest.raises(N.NVMLError_InsufficientResources):
            create(h, profile_id, at)
    create(h, 14, 2)
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19) == 2
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 5) == 0


def test_illegal_start_is_invalid_argument(start):
    start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    for profile_id, at, size in ((19, 7, 1), (14, 6, 2), (5, 4, 4),
                                 (9, 2, 4), (9, 0, 2), (0, 1, 8)):
        with pytest.raises(N.NVMLError_InvalidArgument):
            create(h, profile_id, at, size)


def test_by_value_placement_is_rejected(start):
    start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises((TypeError, ctypes.ArgumentError)):
        N.nvmlDeviceCreateGpuInstanceWithPlacement(
            h, 9, N.c_nvmlGpuInstancePlacement_t(0, 4))
    gi = N.nvmlDeviceCreateGpuInstanceWithPlacement(
        h, 9, ctypes.pointer(N.c_nvmlGpuInstancePlacement_t(0, 4)))
    assert N.nvmlGpuInstanceGetInfo(gi).placement.start == 0


def test_only_one_plus_me(start):
    start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    create(h, 20, 3)
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 20) == 0
    with pytest.raises(N.NVMLError_InsufficientResources):
        create(h, 20, 0)
    create(h, 19, 0)                 # plain 1g still fits beside it
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 0) == 0


def test_create_without_placement_takes_first_free_start(start):
    start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    create(h, 19, 0)
    gi = N.nvmlDeviceCreateGpuInstance(h, 19)
    assert N.nvmlGpuInstanceGetInfo(gi).placement.start == 1
    N.nvmlDeviceCreateGpuInstance(h, 9)   # 0 is taken: the 4-block at 4
    with pytest.raises(N.NVMLError_InsufficientResources):
        N.nvmlDeviceCreateGpuInstance(h, 9)


def _auto(h, profile_ids):
    """nvmlDeviceCreateGpuInstance for each profile: [(GI id, start)],
    stopping at the first error (returned as its class name).
    """
    out = []
    for profile_id in profile_ids:
        try:
            gi = N.nvmlDeviceCreateGpuInstance(h, profile_id)
        except N.NVMLError as e:
            out.append(type(e).__name__)
            break
        info = N.nvmlGpuInstanceGetInfo(gi)
        out.append((info.id, info.placement.start))
    return out


# MIG user guide, "Getting Started with MIG", instance geometry examples
# (A100-SXM4-40GB): nvidia-smi mig -cgi <ids> -> GI id and start each.
MIG_GUIDE_AUTOMATIC = {
    (19, 14, 5): [(13, 6), (5, 4), (1, 0)],
    (9, 19, 14, 19): [(2, 4), (7, 0), (4, 2), (8, 1)],
    (14, 19, 19, 19, 19, 19): [(5, 4), (13, 6), (7, 0), (8, 1), (9, 2),
                               (10, 3)],
    (19, 19, 14, 9): [(13, 6), (11, 4), (3, 0),
                      'NVMLError_InsufficientResources'],
}


@pytest.mark.parametrize('profiles', list(MIG_GUIDE_AUTOMATIC),
                         ids=[','.join(map(str, p))
                              for p in MIG_GUIDE_AUTOMATIC])
def test_automatic_placement_and_gi_ids_as_the_mig_guide(start, profiles):
    start([gpu('a100-40gb', mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert _auto(h, profiles) == MIG_GUIDE_AUTOMATIC[profiles]


def test_seven_1g_fill_from_the_top(start):
    """`nvidia-smi mig -cgi 19,19,19,19,19,19,19 -C` on H100 in public
    write-ups: GI 13, 11, 12, 7, 8, 9, 10.
    """
    start([gpu('h100-80gb', mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert [gi for gi, _ in _auto(h, [19] * 7)] == [13, 11, 12, 7, 8, 9, 10]
    assert _auto(h, [19]) == ['NVMLError_InsufficientResources']


def test_gi_id_is_the_slot_whatever_the_order(start):
    start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    for profile_id, at, gi_id in ((19, 3, 10), (14, 4, 5), (15, 6, 6),
                                  (14, 0, 3)):
        gi = create(h, profile_id, at)
        assert N.nvmlGpuInstanceGetInfo(gi).id == gi_id


SHARED = N.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
CI_SLICES = {N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
             N.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
             N.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
             N.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
             N.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
             N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1: '1r'}
# `mig -lcip` per GI profile (NVIDIA k8s-test-infra mock-nvml-config-
# h100.mig.yaml `compute_instances`): CI SM slices -> instance count.
H100_LCIP = {19: {1: 1, '1r': 1}, 15: {1: 1, '1r': 1},
             14: {1: 2, 2: 1, '1r': 2},
             9: {1: 3, 2: 1, 3: 1, '1r': 3},
             5: {1: 4, 2: 2, 4: 1, '1r': 4},
             0: {1: 7, 2: 3, 3: 2, 4: 1, 7: 1, '1r': 7}}


def _lcip(gi):
    out = {}
    for enum, slices in CI_SLICES.items():
        try:
            info = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, enum, SHARED)
        except N.NVMLError_NotSupported:
            continue
        out[slices] = info.instanceCount
    return out


@pytest.mark.parametrize('model', ['h100-80gb', 'h100-pcie', 'h200',
                                   'a100-80gb'])
def test_compute_instance_profile_sets_per_gi_size(start, model):
    start([gpu(model, mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    hopper = not model.startswith('a100')
    for profile_id, starts_sizes in LGIPP.items():
        if profile_id == 20:
            continue                   # the +me 1g offers what 1g does
        gi = create(h, profile_id, starts_sizes[0][0])
        want = dict(H100_LCIP[profile_id])
        if not hopper:
            want.pop('1r')             # REV1 CIs are a Hopper profile
        assert _lcip(gi) == want, profile_id
        N.nvmlGpuInstanceDestroy(gi)


def test_h100_pcie_model_is_the_public_capture(start):
    """nvidia-smi mig -lgip of an H100 PCIe (driver 570.169, see the
    model's _source): name, SMs and memory per profile.
    """
    start([gpu('h100-pcie', mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetName(h) == 'NVIDIA H100 PCIe'
    assert N.nvmlDeviceGetPciInfo(h).pciDeviceId >> 16 == 0x2331
    assert N.nvmlDeviceGetMemoryInfo(h).total == 81559 << 20
    rows = {}
    for enum in ENUM_IDS:
        info = N.nvmlDeviceGetGpuInstanceProfileInfo(h, enum)
        rows[info.name] = (info.multiprocessorCount, info.memorySizeMB,
                           info.decoderCount, info.ofaCount)
    assert rows == {'MIG 1g.10gb': (14, 9984, 1, 0),
                    'MIG 1g.10gb+me': (14, 9984, 1, 1),
                    'MIG 1g.20gb': (14, 20096, 1, 0),
                    'MIG 2g.20gb': (30, 20096, 2, 0),
                    'MIG 3g.40gb': (46, 40448, 3, 0),
                    'MIG 4g.40gb': (62, 40448, 4, 0),
                    'MIG 7g.80gb': (114, 81152, 7, 1)}


def test_a100_80gb_sizes_are_the_public_capture(start):
    """nvidia-smi mig -lgip of an A100 80GB PCIe (driver 515.86.01):
    9.50 / 19.50 / 39.25 / 39.25 / 79.00 GiB; SMs 14/28/42/56/98.
    """
    start([gpu('a100-80gb', mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    rows = {}
    for enum in ENUM_IDS:
        info = N.nvmlDeviceGetGpuInstanceProfileInfo(h, enum)
        rows[info.name] = (info.memorySizeMB, info.multiprocessorCount)
    del rows['MIG 1g.20gb']            # not in that (older) capture
    assert rows == {'MIG 1g.10gb': (9728, 14), 'MIG 1g.10gb+me': (9728, 14),
                    'MIG 2g.20gb': (19968, 28), 'MIG 3g.40gb': (40192, 42),
                    'MIG 4g.40gb': (40192, 56), 'MIG 7g.80gb': (80896, 98)}


def test_two_3g_fill_memory_but_strand_an_sm_slice(start):
    start([gpu('a100-40gb', mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    create(h, 9, 0)
    create(h, 9, 4)
    for profile_id in (19, 20, 15, 14):
        assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(
            h, profile_id) == 0
    assert sorted(gi_ids(h, 9)) == [1, 2]


def test_compute_instance_must_go_before_gpu_instance(start):
    start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    gi = create(h, 9, 0)
    ci = full_ci(gi)
    with pytest.raises(N.NVMLError_InUse):
        N.nvmlGpuInstanceDestroy(gi)
    N.nvmlComputeInstanceDestroy(ci)
    N.nvmlGpuInstanceDestroy(gi)
    assert gi_ids(h, 9) == []
    with pytest.raises(N.NVMLError_InvalidArgument):
        N.nvmlGpuInstanceGetInfo(gi)   # stale handle


def test_compute_instance_profiles(start):
    start([gpu(mig_mode=1)])
    gi = create(N.nvmlDeviceGetHandleByIndex(0), 9, 4)
    shared = N.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    full = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, N.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, shared)
    assert (full.id, full.name, full.multiprocessorCount) == (
        N.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 'MIG 3g.71gb', 60)
    one = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, shared)
    assert (one.name, one.instanceCount) == ('MIG 1c.3g.71gb', 3)
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, N.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, shared)
    cis = [N.nvmlGpuInstanceCreateComputeInstance(gi, one.id)
           for _ in range(3)]
    infos = [N.nvmlComputeInstanceGetInfo(ci) for ci in cis]
    assert [(i.id, i.placement.start) for i in infos] == [
        (0, 0), (1, 1), (2, 2)]
    with pytest.raises(N.NVMLError_InsufficientResources):
        N.nvmlGpuInstanceCreateComputeInstance(gi, one.id)
    arr = (N.c_nvmlComputeInstance_t * 4)()
    count = ctypes.c_uint()
    N.nvmlGpuInstanceGetComputeInstances(gi, one.id, arr,
                                         ctypes.byref(count))
    assert count.value == 3


def test_gi_ids_reused_and_mig_uuid_changes(start):
    start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    first = create(h, 19, 0)
    create(h, 19, 1)
    old_id = N.nvmlGpuInstanceGetInfo(first).id
    ci = full_ci(first)
    old_uuid = N.nvmlDeviceGetUUID(N.nvmlDeviceGetMigDeviceHandleByIndex(
        h, 0))
    N.nvmlComputeInstanceDestroy(ci)
    N.nvmlGpuInstanceDestroy(first)
    again = create(h, 19, 0)
    assert N.nvmlGpuInstanceGetInfo(again).id == old_id
    full_ci(again)
    mig = N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    new_uuid = N.nvmlDeviceGetUUID(mig)
    assert new_uuid.startswith('MIG-') and new_uuid != old_uuid
    gi = N.nvmlDeviceGetGpuInstanceById(h, old_id)
    assert N.nvmlGpuInstanceGetInfo(gi).placement.start == 0


def test_mig_device_handles(start):
    start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    gi = create(h, 9, 4)
    full_ci(gi)
    gi_id = N.nvmlGpuInstanceGetInfo(gi).id
    mig = N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert N.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    assert N.nvmlDeviceIsMigDeviceHandle(h).value == 0
    assert N.nvmlDeviceGetGpuInstanceId(mig) == gi_id
    assert N.nvmlDeviceGetComputeInstanceId(mig) == 0
    assert N.nvmlDeviceGetName(mig) == 'NVIDIA H200 MIG 3g.71gb'
    parent = N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert N.nvmlDeviceGetUUID(parent) == GPU_A
    by_uuid = N.nvmlDeviceGetHandleByUUID(N.nvmlDeviceGetUUID(mig))
    assert N.nvmlDeviceGetGpuInstanceId(by_uuid) == gi_id
    assert N.nvmlDeviceGetMemoryInfo(mig).total == 71424 << 20
    with pytest.raises(N.NVMLError_NotFound):
        N.nvmlDeviceGetMigDeviceHandleByIndex(h, 1)
    with pytest.raises(N.NVMLError_InvalidArgument):
        N.nvmlDeviceGetGpuInstanceId(h)
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetTemperature(mig, N.NVML_TEMPERATURE_GPU)


def test_orphans_created_before_the_agent(start):
    fake = start([gpu(mig_mode=1)], init=False)
    gi_id, mig_uuid = fake.create_gi(GPU_A, 14, 2)
    with pytest.raises(N.NVMLError_InsufficientResources):
        fake.create_gi(GPU_A, 9, 0)
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert gi_ids(h, 14) == [gi_id]
    mig = N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert N.nvmlDeviceGetUUID(mig) == mig_uuid


# -- MIG mode, reboot and resets -------------------------------------------

def test_hopper_mig_mode_is_immediate_and_lost_on_reboot(start):
    fake = start([gpu('h200', mig_mode=0)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE) == \
        N.NVML_SUCCESS
    assert N.nvmlDeviceGetMigMode(h) == [1, 1]
    gi = create(h, 9, 0)
    with pytest.raises(N.NVMLError_InUse):
        N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_DISABLE)
    fake.reboot()
    assert N.nvmlDeviceGetMigMode(h) == [0, 0]
    assert gi_ids(h, 9) == []
    with pytest.raises(N.NVMLError_InvalidArgument):
        N.nvmlGpuInstanceGetInfo(gi)


def test_ampere_mig_mode_pends_until_reset_in_a_passthrough_vm(start):
    """NVML reference: where reset is not exposed (pass-through
    virtualization) activationStatus is RESET_REQUIRED; the call itself
    succeeds.
    """
    fake = start([gpu('a100-40gb', mig_mode=0, virtualization_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    status = N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE)
    assert status == N.NVML_ERROR_RESET_REQUIRED
    assert N.nvmlDeviceGetMigMode(h) == [0, 1]
    with pytest.raises(N.NVMLError_NotSupported):
        create(h, 9, 0)
    fake.reboot()
    assert N.nvmlDeviceGetMigMode(h) == [1, 1]
    create(h, 9, 0)
    fake.reboot()                      # mode persists, instances do not
    assert N.nvmlDeviceGetMigMode(h) == [1, 1]
    assert gi_ids(h, 9) == []
    N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_DISABLE)
    assert N.nvmlDeviceGetMigMode(h) == [1, 0]
    fake.reset_gpu(GPU_A)
    assert N.nvmlDeviceGetMigMode(h) == [0, 0]


def test_ampere_bare_metal_applies_at_once_when_idle(start):
    """Contract §5: on bare metal the driver resets an idle A100 itself."""
    start([gpu('a100-80gb', mig_mode=0, virtualization_mode=0)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE) == \
        N.NVML_SUCCESS
    assert N.nvmlDeviceGetMigMode(h) == [1, 1]


@pytest.mark.parametrize('model,applied', [('a100-80gb', False),
                                           ('h200', True)])
def test_other_clients_keep_ampere_pending_not_hopper(start, model,
                                                      applied):
    """DCGM or nvidia-persistenced holding the GPU: activationStatus
    IN_USE and the mode pending on Ampere (contract §5); Hopper applies
    at once.
    """
    fake = start([gpu(model, mig_mode=0, virtualization_mode=0)])
    fake.hold(GPU_A, 'dcgm')
    h = N.nvmlDeviceGetHandleByIndex(0)
    status = N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE)
    assert status == (N.NVML_SUCCESS if applied else N.NVML_ERROR_IN_USE)
    assert N.nvmlDeviceGetMigMode(h) == ([1, 1] if applied else [0, 1])
    fake.let_go(GPU_A, 'dcgm')          # "idle the device and retry"
    assert N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE) == \
        N.NVML_SUCCESS
    assert N.nvmlDeviceGetMigMode(h) == [1, 1]


def test_mig_mode_change_with_processes_is_in_use_activation(start):
    """The call succeeds; activationStatus says IN_USE (NVML reference:
    "if device unbind fails because the device isn't idle").
    """
    fake = start([gpu(mig_mode=0)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    fake.add_process(GPU_A, 42, 1 << 30)
    assert N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE) == \
        N.NVML_ERROR_IN_USE
    assert N.nvmlDeviceGetMigMode(h) == [0, 1]
    fake.remove_process(GPU_A, 42)
    assert N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE) == \
        N.NVML_SUCCESS
    assert N.nvmlDeviceGetMigMode(h) == [1, 1]


def test_instances_block_turning_mig_off(start):
    start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    create(h, 19, 0)
    with pytest.raises(N.NVMLError_InUse):
        N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_DISABLE)


def test_non_root_callers_get_no_permission(start):
    """NVML reference: MIG mode and GI/CI changes "Require root user"."""
    fake = start([gpu(mig_mode=1)], privileged=False)
    h = N.nvmlDeviceGetHandleByIndex(0)
    for change in (lambda: N.nvmlDeviceSetMigMode(h, 0),
                   lambda: create(h, 19, 0),
                   lambda: N.nvmlDeviceCreateGpuInstance(h, 19)):
        with pytest.raises(N.NVMLError_NoPermission):
            change()
    assert N.nvmlDeviceGetMigMode(h) == [1, 1]     # reads still work
    fake.set_privileged(True)
    gi = create(h, 19, 0)
    ci = full_ci(gi)
    fake.set_privileged(False)
    with pytest.raises(N.NVMLError_NoPermission):
        N.nvmlComputeInstanceDestroy(ci)
    with pytest.raises(N.NVMLError_NoPermission):
        N.nvmlGpuInstanceDestroy(gi)


@pytest.mark.parametrize('model,mode_after', [('h200', [0, 0]),
                                              ('a100-80gb', [1, 1])])
def test_vfio_round_trip(start, model, mode_after):
    """Unbinding from nvidia destroys the GIs on every GPU; Hopper also
    comes back with MIG off (contract §5), Ampere keeps its mode.
    """
    bound = {'yes': True}
    fake = start([gpu(model, mig_mode=1, virtualization_mode=0)],
                 visible=lambda address: bound['yes'])
    h = N.nvmlDeviceGetHandleByIndex(0)
    create(h, 9, 0)
    N.nvmlShutdown()
    bound['yes'] = False               # to vfio-pci ...
    N.nvmlInit()
    assert N.nvmlDeviceGetCount() == 0
    N.nvmlShutdown()
    bound['yes'] = True                # ... and back
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetMigMode(h) == mode_after
    assert fake.to_state()['gpus'][GPU_A]['gpu_instances'] == []


# -- processes ----------------------------------------------------------------

def test_processes_and_memory(start):
    fake = start([gpu()])
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetComputeRunningProcesses(h) == []
    base = N.nvmlDeviceGetMemoryInfo(h, N.nvmlMemory_v2)
    fake.add_process(GPU_A, 100, 2 << 30)
    fake.add_process(GPU_A, 101, None)
    procs = N.nvmlDeviceGetComputeRunningProcesses(h)
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [
        (100, 2 << 30), (101, None)]
    assert procs[0].gpuInstanceId == fake_nvml.NA_ID
    mem = N.nvmlDeviceGetMemoryInfo(h, N.nvmlMemory_v2)
    assert (mem.used, mem.reserved) == (2 << 30, base.reserved)
    assert mem.free == base.free - (2 << 30)
    assert N.nvmlDeviceGetMemoryInfo(h).used == base.reserved + (2 << 30)
    fake.remove_process(GPU_A, 100)
    assert len(N.nvmlDeviceGetComputeRunningProcesses(h)) == 1


def test_processes_on_mig_devices_block_destroy(start):
    fake = start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    gi = create(h, 14, 0)
    ci = full_ci(gi)
    mig = N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    with pytest.raises(ValueError):
        fake.add_process(GPU_A, 7, 1)  # MIG on: a process needs a GI
    fake.add_process(N.nvmlDeviceGetUUID(mig), 7, 1 << 20)
    proc, = N.nvmlDeviceGetComputeRunningProcesses(h)
    assert (proc.gpuInstanceId, proc.computeInstanceId) == (
        N.nvmlGpuInstanceGetInfo(gi).id, 0)
    assert [p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(mig)] \
        == [7]
    with pytest.raises(N.NVMLError_InUse):
        N.nvmlComputeInstanceDestroy(ci)
    fake.remove_process(N.nvmlDeviceGetUUID(mig), 7)
    N.nvmlComputeInstanceDestroy(ci)
    N.nvmlGpuInstanceDestroy(gi)


# -- events and health --------------------------------------------------------

def events_on(handle, mask=XID_ECC):
    es = N.nvmlEventSetCreate()
    N.nvmlDeviceRegisterEvents(handle, mask, es)
    return es


def test_xid_events_and_timeout(start):
    fake = start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    es = events_on(h)
    began = time.monotonic()
    with pytest.raises(N.NVMLError_Timeout):
        N.nvmlEventSetWait_v2(es, 50)
    assert time.monotonic() - began >= 0.045
    fake.inject_xid(GPU_A, 43, gi_id=1, ci_id=0)
    data = N.nvmlEventSetWait_v2(es, 1000)
    assert (data.eventType, data.eventData) == (
        N.nvmlEventTypeXidCriticalError, 43)
    assert (data.gpuInstanceId, data.computeInstanceId) == (1, 0)
    assert N.nvmlDeviceGetUUID(data.device) == GPU_A
    fake.ecc_error(GPU_A)
    data = N.nvmlEventSetWait(es, 1000)
    assert data.eventType == N.nvmlEventTypeDoubleBitEccError
    assert data.gpuInstanceId == fake_nvml.NA_ID
    assert N.nvmlDeviceGetTotalEccErrors(
        h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC) == 1
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 1, 1, 0)
    N.nvmlEventSetFree(es)


def test_event_wait_is_woken_by_an_injected_event(start):
    fake = start([gpu()])
    es = events_on(N.nvmlDeviceGetHandleByIndex(0))
    threading.Timer(0.05, fake.inject_xid, (GPU_A, 31)).start()
    began = time.monotonic()
    assert N.nvmlEventSetWait_v2(es, 10000).eventData == 31
    assert time.monotonic() - began < 5


def test_unsupported_event_types_and_unregistered_sets(start):
    doc = models.load('h200')
    doc['devices'][0]['supported_event_types'] = XID_ECC
    fake = start([gpu(model=doc), gpu(address='0000:43:00.0', uuid=GPU_B)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetSupportedEventTypes(h) == XID_ECC
    with pytest.raises(N.NVMLError_NotSupported):
        events_on(h, N.nvmlEventTypeAll)
    es = events_on(h, N.nvmlEventTypeXidCriticalError)
    fake.inject_xid(GPU_B, 13)         # another GPU: not delivered
    fake.ecc_error(GPU_A, uncorrected=False)   # not registered for it
    with pytest.raises(N.NVMLError_Timeout):
        N.nvmlEventSetWait_v2(es, 10)


def test_fallen_off_the_bus_until_recovered(start):
    fake = start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    es = events_on(h)
    create(h, 19, 0)
    fake.fall_off_bus(GPU_A)
    assert N.nvmlEventSetWait_v2(es, 1000).eventData == 79
    for call in (lambda: N.nvmlDeviceGetUUID(h),
                 lambda: N.nvmlDeviceGetMemoryInfo(h),
                 lambda: N.nvmlDeviceGetHandleByIndex(0),
                 lambda: N.nvmlEventSetWait_v2(es, 10)):
        with pytest.raises(N.NVMLError_GpuIsLost):
            call()
    assert N.nvmlDeviceGetCount() == 1
    fake.recover(GPU_A)
    assert N.nvmlDeviceGetUUID(N.nvmlDeviceGetHandleByIndex(0)) == GPU_A
    assert gi_ids(h, 19) == []


def test_concurrent_callers_share_one_consistent_state(start):
    fake = start([gpu(mig_mode=1)])
    h = N.nvmlDeviceGetHandleByIndex(0)
    errors = []

    def churn(at):
        try:
            for _ in range(30):
                N.nvmlGpuInstanceDestroy(create(h, 19, at))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=churn, args=(at,))
               for at in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert fake.to_state()['gpus'][GPU_A]['gpu_instances'] == []


# -- state across an agent restart --------------------------------------------

def test_state_round_trip(start):
    spec = [gpu(mig_mode=1), gpu('a100-40gb', '0000:43:00.0', GPU_B)]
    fake = start(spec)
    h = N.nvmlDeviceGetHandleByIndex(0)
    full_ci(create(h, 9, 4))
    create(h, 19, 0)
    mig_uuid = N.nvmlDeviceGetUUID(N.nvmlDeviceGetMigDeviceHandleByIndex(
        h, 0))
    fake.add_process(mig_uuid, 5, 1 << 20)
    fake.ecc_error(GPU_B)
    fake.hold(GPU_B, 'dcgm')           # keeps the A100's mode pending
    N.nvmlDeviceSetMigMode(N.nvmlDeviceGetHandleByIndex(1), 1)
    state = json.loads(json.dumps(fake.to_state()))
    fake.uninstall()

    again = start(spec)
    again.load_state(state)
    assert again.to_state() == state
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert sorted(gi_ids(h, 9) + gi_ids(h, 19)) == [2, 7]   # by slot
    mig = N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert N.nvmlDeviceGetUUID(mig) == mig_uuid
    assert N.nvmlDeviceGetComputeRunningProcesses(mig)[0].pid == 5
    assert N.nvmlDeviceGetMigMode(N.nvmlDeviceGetHandleByIndex(1)) == [0, 1]


# -- fake sysfs and the fake host ---------------------------------------------

# A vGPU-Manager host (VFs are enabled only there, contract gpu-to-vm.md
# §1) with one GPU passed through whole on vfio-pci.
HOST = {'nvidia': {'iommu': True, 'gpus': [
    {'model': 'h200', 'pci_address': '0000:43:00.0', 'uuid': GPU_B,
     'numa_node': 1, 'driver': 'nvidia', 'sriov_vfs': 3,
     'vgpu_manager': {'layout': 'vfio'}, 'iommu_group': 40},
    {'model': 'a100-80gb', 'pci_address': '0000:1b:00.0', 'uuid': GPU_A,
     'driver': 'vfio-pci'},
]}}


@pytest.fixture
def host(tmp_path):
    made = []

    def _host(spec=HOST, **kw):
        fake = fake_sysfs.FakeGpuHost(spec, str(tmp_path / 'sys'), **kw)
        made.append(fake)
        return fake

    yield _host
    for fake in made:
        fake.uninstall()


def test_sysfs_tree_reads_back(host):
    fake = host()
    by_addr = {f['address']: f for f in pci_driver.scan(fake.root)}
    pf = by_addr['0000:43:00.0']
    assert (pf['vendor'], pf['product'], pf['class']) == (
        '10de', '2335', '030200')
    assert (pf['numa_node'], pf['driver'], pf['iommu_group']) == (
        1, 'nvidia', '40')
    assert by_addr['0000:1b:00.0']['driver'] == 'vfio-pci'
    assert by_addr['0000:1b:00.0']['product'] == '20b2'
    assert by_addr['0000:1b:00.0']['numa_node'] == -1
    vfs = ['0000:43:00.4', '0000:43:00.5', '0000:43:00.6']
    for vf in vfs:
        assert by_addr[vf]['is_vf'] and by_addr[vf]['driver'] == 'nvidia'
    assert len({f['iommu_group'] for f in by_addr.values()}) == 5
    sriov = fake.sysfs.sriov('0000:43:00.0')
    assert sriov == {'vfs': vfs, 'sriov_totalvfs': 3, 'physfn': None,
                     'mdevs': []}
    assert fake.sysfs.sriov(vfs[0])['physfn'] == '0000:43:00.0'
    assert len(fake.sysfs.nvidia_gpus()) == 5
    assert fake.sysfs.iommu_enabled()


@pytest.mark.parametrize('gpu,words', [
    ({'mdevs': 2}, 'mdevs on the physical function are not modelled'),
    ({'vgpu_types': ['nvidia-1']},
     'vGPU types on the physical function are not modelled'),
    ({'mdevs': 2, 'sriov_vfs': 2, 'vgpu_manager': {'layout': 'mdev'}},
     'create an mdev on a VF'),
    ({'sriov_vfs': 16}, 'SR-IOV VFs without the vGPU Manager are not '
     'modelled'),
])
def test_host_states_no_real_host_is_in_are_refused(tmp_path, gpu, words):
    """Ampere and Hopper offer vGPU types (and so mdevs) on VFs only, and
    only the vGPU Manager enables VFs (contract gpu-to-vm.md §1-§2).
    """
    spec = {'nvidia': {'gpus': [dict(
        {'model': 'h200', 'pci_address': '0000:1b:00.0'}, **gpu)]}}
    with pytest.raises(ValueError, match=words):
        fake_sysfs.FakeGpuHost(spec, str(tmp_path / 'sys'))
    assert not os.path.exists(str(tmp_path / 'sys'))


def test_vf_addresses_roll_over_device_numbers():
    assert fake_sysfs.vf_address('0000:1b:00.0', 4) == '0000:1b:01.0'
    assert fake_sysfs.vf_address('0000:1b:00.0', 15) == '0000:1b:02.3'


def test_no_iommu_means_no_groups(host):
    spec = {'nvidia': {'iommu': False, 'gpus': [
        {'pci_address': '0000:1b:00.0'}]}}
    fake = host(spec)
    assert not fake.sysfs.iommu_enabled()
    assert not os.path.exists(os.path.join(fake.root, 'kernel'))
    assert all(f['iommu_group'] is None
               for f in pci_driver.scan(fake.root))


def test_vfio_bound_gpu_is_invisible_until_rebound(host):
    fake = host().install()
    N.nvmlInit()
    assert N.nvmlDeviceGetCount() == 1
    with pytest.raises(N.NVMLError_NotFound):
        N.nvmlDeviceGetHandleByPciBusId('0000:1b:00.0')
    fake.sysfs.rebind('0000:1b:00.0', 'nvidia')
    assert fake.sysfs.driver('0000:1b:00.0') == 'nvidia'
    assert fake.sysfs.rebinds == [('0000:1b:00.0', 'vfio-pci', 'nvidia')]
    N.nvmlShutdown()
    N.nvmlInit()                       # NVML enumerates at init
    assert N.nvmlDeviceGetCount() == 2
    h = N.nvmlDeviceGetHandleByPciBusId('0000:1b:00.0')
    assert N.nvmlDeviceGetUUID(h) == GPU_A
    # The nvidia driver lets go only once nothing holds the GPU: NVML's
    # session or persistence mode (nv-pci.c waits in its remove).
    with pytest.raises(RebindError, match='did not finish within'):
        fake.sysfs.rebind('0000:1b:00.0', 'vfio-pci', timeout=0.2)
    assert fake.sysfs.blocked_unbinds == ['0000:1b:00.0']
    fake.nvml.set_persistence_mode(GPU_A, False)
    N.nvmlShutdown()
    # The blocked unbind completes then (the kernel finishes it), leaving
    # the GPU with no driver; the next rebind probes it to vfio-pci.
    fake.sysfs.rebind('0000:1b:00.0', 'vfio-pci')
    assert fake.sysfs.driver('0000:1b:00.0') == 'vfio-pci'
    N.nvmlInit()
    with pytest.raises(N.NVMLError_GpuIsLost):
        N.nvmlDeviceGetUUID(h)


def test_rebind_refusals(host):
    fake = host()
    with pytest.raises(RebindError):
        fake.sysfs.rebind('0000:43:00.0', 'nouveau')
    assert fake.sysfs.driver('0000:43:00.0') == 'nvidia'
    fake.sysfs.refuse_bind.add('0000:43:00.0')
    with pytest.raises(RebindError, match='no driver'):
        fake.sysfs.rebind('0000:43:00.0', 'vfio-pci')  # post-condition
    assert len(fake.sysfs.rebinds) == 2


def test_host_state_file_survives_restart(host, tmp_path):
    state_file = str(tmp_path / 'nvml.json')
    fake = host(state_file=state_file).install()
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    N.nvmlDeviceSetMigMode(h, 1)
    full_ci(create(h, 9, 0))
    with open(state_file) as f:
        saved = json.load(f)
    assert saved == fake.to_state()
    fake.uninstall()

    again = host(state_file=state_file).install()   # same root: restart
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert gi_ids(h, 9) == [1]
    assert again.to_state() == saved
    assert again.sysfs.driver('0000:1b:00.0') == 'vfio-pci'


def test_quick_vfio_round_trip_between_nvml_sessions_loses_hopper_mig(host):
    """A GPU that leaves the nvidia driver and comes back while no NVML
    session is open is still a GPU that left it: the fake sysfs tells the
    fake NVML at the unbind, so Hopper comes back with MIG off and no GPU
    instances (contract §5) even though NVML never saw it missing.
    """
    spec = {'nvidia': {'iommu': True, 'gpus': [
        {'model': 'h200', 'pci_address': '0000:43:00.0', 'uuid': GPU_B,
         'driver': 'nvidia', 'mig_mode': 1, 'iommu_group': 40}]}}
    fake = host(spec).install()
    fake.nvml.set_persistence_mode(GPU_B, False)
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetMigMode(h) == [1, 1]
    create(h, 19, 0)
    N.nvmlShutdown()
    fake.sysfs.rebind('0000:43:00.0', 'vfio-pci')
    fake.sysfs.rebind('0000:43:00.0', 'nvidia')
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetMigMode(h) == [0, 0]
    assert fake.nvml.to_state()['gpus'][GPU_B]['gpu_instances'] == []


def test_backend_reads_instances_again_when_one_goes_meanwhile(
        start, monkeypatch):
    """Another process (the privsep daemon releasing a binding) destroys
    a GPU instance between the agent listing the instances and reading
    one's details: NVML answers that handle INVALID_ARGUMENT; the backend
    reads the instances again instead of failing the whole GPU's
    discovery (which once put a warning on cyborg-aio's terminal).
    """
    from cyborg.drivers.nvidia import backend as nvml

    fake = start([gpu(mig_mode=1)])
    fake.create_gi(GPU_A, 19, 6, compute_instance=False)
    fake.create_gi(GPU_A, 19, 5, compute_instance=False)
    backend = nvml.PynvmlBackend()
    backend.open()
    real = N.nvmlGpuInstanceGetInfo
    gone = []

    def destroyed_meanwhile(gi):
        if not gone:
            gone.append(real(gi).placement.start)
            N.nvmlGpuInstanceDestroy(gi)
        return real(gi)

    monkeypatch.setattr(N, 'nvmlGpuInstanceGetInfo', destroyed_meanwhile)
    [left] = backend.instances(GPU_A)
    assert gone and left.start == {5: 6, 6: 5}[gone[0]]

    def always_invalid(gi):
        raise N.NVMLError(N.NVML_ERROR_INVALID_ARGUMENT)

    monkeypatch.setattr(N, 'nvmlGpuInstanceGetInfo', always_invalid)
    with pytest.raises(nvml.NvmlError) as raised:
        backend.instances(GPU_A)
    assert raised.value.kind == 'InvalidArgument'
