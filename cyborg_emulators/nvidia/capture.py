# SPDX-License-Identifier: Apache-2.0
"""Read-only NVML capture of a real GPU host, as a JSON fixture.

Run on a host with an NVIDIA GPU and nvidia-ml-py installed::

    python -m cyborg_emulators.nvidia.capture > nvml-capture.json

It never changes device state (no SetMigMode, no Create*/Destroy*): it
only queries. Every call that fails is recorded as {"error":
"<NVMLError_* class>", "code": N}, so the fake NVML reproduces the
NotSupported/NoPermission/... matrix of that GPU and driver exactly.

The JSON is the format of the models the fake serves
(cyborg/drivers/nvidia/models/*.json; h200.json is such a capture) and
of tests/fixtures/nvml/, which test_fake_nvml checks the fake against by
running this capture over it.
"""

import argparse
import ctypes
import json
import sys

import pynvml as N

# Slots asked for when listing the GPU instances of a profile (a GPU has
# at most 7 MIG instances of one profile).
MAX_INSTANCES = 8
NVLINKS = 18


def to_py(value):
    """An NVML return value as JSON-able data; pointers are dropped."""
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode(errors='replace')
    if isinstance(value, (list, tuple)):
        return [to_py(v) for v in value]
    if hasattr(value, '_fields_'):
        out = {}
        for field in value._fields_:
            name = field[0]
            member = getattr(value, name)
            if isinstance(member, ctypes._Pointer) or \
                    'LP_' in type(member).__name__:
                continue
            out[name] = to_py(member)
        return out
    if hasattr(value, '__dict__'):       # nvmlFriendlyObject (processes)
        return {k: to_py(v) for k, v in vars(value).items()}
    return repr(value)


def _error(exc):
    return {'error': type(exc).__name__, 'code': exc.value}


def call(fn, *args):
    """fn(*args) as data, or the error it raised."""
    try:
        value = fn(*args)
    except N.NVMLError as e:
        return _error(e)
    except Exception as e:   # recorded too: the fixture says what broke
        return {'error': type(e).__name__, 'detail': str(e)}
    return to_py(value)


def placements(handle, profile_id):
    """[{start, size}] NVML offers for a GPU instance profile."""
    count = ctypes.c_uint(0)
    try:
        N.nvmlDeviceGetGpuInstancePossiblePlacements(
            handle, profile_id, None, ctypes.byref(count))
        array = (N.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
        N.nvmlDeviceGetGpuInstancePossiblePlacements(
            handle, profile_id, array, ctypes.byref(count))
    except N.NVMLError as e:
        return _error(e)
    return [{'start': array[i].start, 'size': array[i].size}
            for i in range(count.value)]


def existing_instances(handle, profile_id):
    """The GPU instances of a profile that exist now."""
    count = ctypes.c_uint(0)
    array = (N.c_nvmlGpuInstance_t * MAX_INSTANCES)()
    try:
        N.nvmlDeviceGetGpuInstances(handle, profile_id, array,
                                    ctypes.byref(count))
    except N.NVMLError as e:
        return _error(e)
    out = []
    for i in range(count.value):
        info = N.nvmlGpuInstanceGetInfo(array[i])
        out.append({'id': info.id, 'profileId': info.profileId,
                    'placement': {'start': info.placement.start,
                                  'size': info.placement.size}})
    return out


# Key in the capture → (query, extra arguments after the handle).
READS = (
    ('name', N.nvmlDeviceGetName, ()),
    ('uuid', N.nvmlDeviceGetUUID, ()),
    ('serial', N.nvmlDeviceGetSerial, ()),
    ('minor', N.nvmlDeviceGetMinorNumber, ()),
    ('pci', N.nvmlDeviceGetPciInfo, ()),
    ('memory_v1', N.nvmlDeviceGetMemoryInfo, ()),
    ('memory_v2', N.nvmlDeviceGetMemoryInfo, (N.nvmlMemory_v2,)),
    ('bar1', N.nvmlDeviceGetBAR1MemoryInfo, ()),
    ('cuda_cc', N.nvmlDeviceGetCudaComputeCapability, ()),
    ('architecture', N.nvmlDeviceGetArchitecture, ()),
    ('brand', N.nvmlDeviceGetBrand, ()),
    ('mig_mode', N.nvmlDeviceGetMigMode, ()),
    ('max_mig_devices', N.nvmlDeviceGetMaxMigDeviceCount, ()),
    ('temperature', N.nvmlDeviceGetTemperature, (N.NVML_TEMPERATURE_GPU,)),
    ('utilization', N.nvmlDeviceGetUtilizationRates, ()),
    ('power_mw', N.nvmlDeviceGetPowerUsage, ()),
    ('power_limit_mw', N.nvmlDeviceGetEnforcedPowerLimit, ()),
    ('ecc_mode', N.nvmlDeviceGetEccMode, ()),
    ('ecc_volatile_uncorrected', N.nvmlDeviceGetTotalEccErrors,
     (N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC)),
    ('ecc_aggregate_uncorrected', N.nvmlDeviceGetTotalEccErrors,
     (N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_AGGREGATE_ECC)),
    ('ecc_volatile_corrected', N.nvmlDeviceGetTotalEccErrors,
     (N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC)),
    ('remapped_rows', N.nvmlDeviceGetRemappedRows, ()),
    ('processes', N.nvmlDeviceGetComputeRunningProcesses, ()),
    ('numa_node', N.nvmlDeviceGetNumaNodeId, ()),
    ('persistence_mode', N.nvmlDeviceGetPersistenceMode, ()),
    ('compute_mode', N.nvmlDeviceGetComputeMode, ()),
    ('virtualization_mode', N.nvmlDeviceGetVirtualizationMode, ()),
    ('clocks_event_reasons', N.nvmlDeviceGetCurrentClocksEventReasons, ()),
)


def device(handle, index):
    """Everything the fake needs of one GPU."""
    out = {'index': index}
    for key, query, args in READS:
        out[key] = call(query, handle, *args)
    out['nvlink_state'] = {link: call(N.nvmlDeviceGetNvLinkState, handle,
                                      link) for link in range(NVLINKS)}
    profiles = []
    for enum in range(N.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info = call(N.nvmlDeviceGetGpuInstanceProfileInfo, handle, enum)
        entry = {'enum': enum, 'info': info}
        if isinstance(info, dict) and 'error' not in info:
            entry['placements'] = placements(handle, info['id'])
            entry['remaining'] = call(
                N.nvmlDeviceGetGpuInstanceRemainingCapacity, handle,
                info['id'])
            entry['existing_gis'] = existing_instances(handle, info['id'])
        profiles.append(entry)
    out['gi_profiles'] = profiles
    return out


def capture():
    """The capture of this host's NVML, as a dict."""
    out = {'nvidia_ml_py': getattr(N, '__version__', None)}
    try:
        N.nvmlInit()
    except N.NVMLError as e:
        out['init_error'] = _error(e)
        return out
    try:
        out['driver_version'] = call(N.nvmlSystemGetDriverVersion)
        out['cuda_driver_version'] = call(N.nvmlSystemGetCudaDriverVersion)
        out['nvml_version'] = call(N.nvmlSystemGetNVMLVersion)
        handles = [N.nvmlDeviceGetHandleByIndex(i)
                   for i in range(N.nvmlDeviceGetCount())]
        out['devices'] = [device(h, i) for i, h in enumerate(handles)]
        out['topology_common_ancestor'] = {
            '%d-%d' % (i, j): call(N.nvmlDeviceGetTopologyCommonAncestor,
                                   handles[i], handles[j])
            for i in range(len(handles)) for j in range(i + 1, len(handles))}
    finally:
        N.nvmlShutdown()
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='python -m cyborg_emulators.nvidia.capture',
        description='Capture what NVML says of this host\'s GPUs (read '
                    'only) as JSON.')
    parser.add_argument('-o', '--output', default='-',
                        help='file to write (default: standard output)')
    args = parser.parse_args(argv)
    data = capture()
    if args.output == '-':
        json.dump(data, sys.stdout, indent=1, default=repr)
        sys.stdout.write('\n')
    else:
        with open(args.output, 'w') as f:
            json.dump(data, f, indent=1, default=repr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
