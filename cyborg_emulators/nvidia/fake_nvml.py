# SPDX-License-Identifier: Apache-2.0
"""A fake libnvidia-ml under the real nvidia-ml-py bindings.

Why at the C level: pynvml's own wrappers keep running, so struct layouts,
byref out-parameters, bytes decoding and the NVMLError_* class mapping are
exercised exactly as on a GPU host.  Only `pynvml._LoadNvmlLibrary` and
`pynvml._nvmlGetFunctionPointer` are replaced; every C symbol is a Python
callable that takes the ctypes arguments the wrapper passes and returns an
nvmlReturn_t.

Static device data comes from model files (models/*.json, the output format
of cyborg_emulators.nvidia.capture).  Any value a model records as an error is
returned as that error, so a capture from a real host reproduces its
NotSupported matrix.  MIG geometry, instances, processes, ECC counters and
events are simulated; the scenario methods on FakeNvml drive them.
"""

import collections
import ctypes
import inspect
import re
import threading
import time
import uuid as uuidlib

import pynvml as N

from cyborg.common import pci
from cyborg.drivers.nvidia import models
from cyborg_emulators.nvidia import fake_vgpu
from cyborg_emulators.nvidia import mig_rules

NA_ID = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId outside MIG
NOT_AVAILABLE = N.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
XID_FALLEN_OFF_BUS = 79
# The event types a model supports unless its capture records
# `supported_event_types`: XID, double- and single-bit ECC (0xB), the mask
# the real H200 registered (tests/fixtures/nvml/h200-real-health-check.json
# event_mask 11).  That capture did not record the full supported mask;
# tools/nvidia_host_check.py now does (`supported_event_types`).
DEFAULT_EVENT_TYPES = (N.nvmlEventTypeXidCriticalError
                       | N.nvmlEventTypeDoubleBitEccError
                       | N.nvmlEventTypeSingleBitEccError)

# What one GI uses of the whole GPU; the 7g row holds the totals.
_BUDGETS = ('sliceCount', 'copyEngineCount', 'decoderCount',
            'encoderCount', 'jpegCount', 'ofaCount')
# SM slices of a compute instance -> NVML_COMPUTE_INSTANCE_PROFILE_* id.
_CI_PROFILES = {1: N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                2: N.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
                3: N.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                4: N.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
                7: N.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE}

# C symbol -> capture key whose recorded error the symbol returns.
_RECORDED = {
    'nvmlDeviceGetName': 'name', 'nvmlDeviceGetUUID': 'uuid',
    'nvmlDeviceGetSerial': 'serial', 'nvmlDeviceGetMinorNumber': 'minor',
    'nvmlDeviceGetPciInfo_v3': 'pci',
    'nvmlDeviceGetMemoryInfo': 'memory_v1',
    'nvmlDeviceGetMemoryInfo_v2': 'memory_v2',
    'nvmlDeviceGetBAR1MemoryInfo': 'bar1',
    'nvmlDeviceGetCudaComputeCapability': 'cuda_cc',
    'nvmlDeviceGetArchitecture': 'architecture',
    'nvmlDeviceGetBrand': 'brand', 'nvmlDeviceGetMigMode': 'mig_mode',
    'nvmlDeviceGetMaxMigDeviceCount': 'max_mig_devices',
    'nvmlDeviceGetTemperature': 'temperature',
    'nvmlDeviceGetUtilizationRates': 'utilization',
    'nvmlDeviceGetPowerUsage': 'power_mw',
    'nvmlDeviceGetEnforcedPowerLimit': 'power_limit_mw',
    'nvmlDeviceGetEccMode': 'ecc_mode',
    'nvmlDeviceGetRemappedRows': 'remapped_rows',
    'nvmlDeviceGetComputeRunningProcesses_v3': 'processes',
    'nvmlDeviceGetNumaNodeId': 'numa_node',
    'nvmlDeviceGetPersistenceMode': 'persistence_mode',
    'nvmlDeviceGetComputeMode': 'compute_mode',
    'nvmlDeviceGetVirtualizationMode': 'virtualization_mode',
    'nvmlDeviceGetCurrentClocksEventReasons': 'clocks_event_reasons',
}
# Getters that write one model value into one out-parameter.
_SCALARS = {
    'nvmlDeviceGetMinorNumber': 'minor',
    'nvmlDeviceGetArchitecture': 'architecture',
    'nvmlDeviceGetBrand': 'brand', 'nvmlDeviceGetPowerUsage': 'power_mw',
    'nvmlDeviceGetEnforcedPowerLimit': 'power_limit_mw',
    'nvmlDeviceGetNumaNodeId': 'numa_node',
    'nvmlDeviceGetPersistenceMode': 'persistence_mode',
    'nvmlDeviceGetComputeMode': 'compute_mode',
    'nvmlDeviceGetVirtualizationMode': 'virtualization_mode',
    'nvmlDeviceGetCurrentClocksEventReasons': 'clocks_event_reasons',
}
# Calls that answer on a MIG device handle; the rest are NotSupported
# there, like most telemetry on real MIG devices.
_MIG_OK = {
    'nvmlDeviceGetName', 'nvmlDeviceGetUUID', 'nvmlDeviceGetPciInfo_v3',
    'nvmlDeviceGetMemoryInfo', 'nvmlDeviceGetMemoryInfo_v2',
    'nvmlDeviceGetArchitecture', 'nvmlDeviceGetBrand',
    'nvmlDeviceGetCudaComputeCapability', 'nvmlDeviceIsMigDeviceHandle',
    'nvmlDeviceGetGpuInstanceId', 'nvmlDeviceGetComputeInstanceId',
    'nvmlDeviceGetDeviceHandleFromMigDeviceHandle',
    'nvmlDeviceGetComputeRunningProcesses_v3',
}
# Callable before nvmlInit (the library is loaded, not initialised).
_NO_INIT = {'nvmlInitWithFlags', 'nvmlInit_v2', 'nvmlErrorString'}
# nvmlErrorString() for codes pynvml has no text for (19/23/29 as
# driver 580 answers them).
_ERROR_STRINGS = {
    N.NVML_ERROR_IN_USE: 'In use by another client',
    N.NVML_ERROR_NO_DATA: 'No data',
    N.NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: 'vGPU ECC not supported',
    N.NVML_ERROR_INSUFFICIENT_RESOURCES: 'Insufficient Resources',
    N.NVML_ERROR_FREQ_NOT_SUPPORTED: 'Frequency not supported',
    N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH: 'Argument version mismatch',
    N.NVML_ERROR_DEPRECATED: 'Deprecated',
    N.NVML_ERROR_NOT_READY: 'Not ready',
    N.NVML_ERROR_GPU_NOT_FOUND: 'GPU not found',
    N.NVML_ERROR_INVALID_STATE:
        'Resource not in correct state to perform requested operation',
}
_PATCHED = ('_LoadNvmlLibrary', '_nvmlGetFunctionPointer', 'nvmlLib',
            '_nvmlLib_refcount')
_active = None  # the installed FakeNvml, one at a time


class _Return(Exception):
    """An nvmlReturn_t other than success, raised inside a fake symbol."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def _error_code(value):
    """The code a capture recorded for a failing call, else None."""
    if isinstance(value, dict) and 'error' in value:
        return value.get('code', N.NVML_ERROR_UNKNOWN)
    return None


def _val(arg):
    return arg.value if hasattr(arg, 'value') else arg


def _out(ref):
    """The object behind byref()/pointer() out-parameters."""
    if ref is None:
        raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)
    if hasattr(ref, '_obj'):
        return ref._obj
    try:
        return ref.contents
    except (AttributeError, ValueError):
        raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)


def _address(ptr):
    try:
        return ctypes.addressof(ptr.contents)
    except (AttributeError, ValueError, TypeError):
        return None


def _put_str(buf, length, text):
    data = text.encode()
    if len(data) + 1 > _val(length) or len(data) + 1 > len(buf):
        raise _Return(N.NVML_ERROR_INSUFFICIENT_SIZE)
    buf.value = data


def _fill(struct, values):
    """Copy capture fields into a ctypes struct (strings as bytes)."""
    names = {f[0] for f in struct._fields_}
    for key, value in values.items():
        if key in names and key != 'version':
            setattr(struct, key,
                    value.encode() if isinstance(value, str) else value)


def _parse_bus_id(text):
    """(domain, bus, device, function) from any NVML/sysfs bus id."""
    m = re.match(r'^(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})'
                 r'\.([0-7])$', text.strip().lower())
    if not m:
        raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)
    return tuple(int(g or '0', 16) for g in m.groups())


def _check_room(array, needed):
    """NVML writes `needed` entries whatever the caller's count says; a
    shorter array is memory corruption on a real host (seen as a crash).
    """
    if len(array) < needed:
        raise BufferError('NVML would write %d entries into a %d-entry '
                          'array' % (needed, len(array)))


def _lowest_free(used, start):
    n = start
    while n in used:
        n += 1
    return n


def c_symbols(name):
    """C symbols behind a pynvml wrapper name (or the symbol itself)."""
    fn = getattr(N, name, None)
    if not inspect.isfunction(fn):
        return {name}
    src = inspect.getsource(fn)
    found = set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', src))
    if not found:
        for callee in set(re.findall(r'\b(nvml\w+)\(', src)) - {name}:
            if inspect.isfunction(getattr(N, callee, None)):
                found |= c_symbols(callee)
    return found or {name}


class _Profile:
    """One GPU-instance profile of a model (a capture `gi_profiles` row)."""

    def __init__(self, entry, hopper_or_newer=False):
        self.hopper_or_newer = hopper_or_newer
        self.enum = entry['enum']
        self.info = entry['info']
        self.id = self.info['id']
        self.name = self.info['name']
        self.count = self.info['instanceCount']
        placements = entry.get('placements')
        if not isinstance(placements, list):
            placements = []
        self.starts = [p['start'] for p in placements]
        self.size = placements[0]['size'] if placements else 0

    def ci_profiles(self):
        """{CI profile id: v2 info} for CIs that fit this GI."""
        slices = self.info['sliceCount']
        out = {}
        # The fixed set per GI size (mig_rules.ci_profile_set cites it).
        for ci_id, ci_slices in mig_rules.ci_profile_set(
                slices, self.hopper_or_newer):
            name = self.name if ci_slices == slices else self.name.replace(
                'MIG ', 'MIG %dc.' % ci_slices, 1)
            out[ci_id] = {
                'id': ci_id, 'sliceCount': ci_slices,
                'instanceCount': slices // ci_slices,
                'multiprocessorCount':
                    self.info['multiprocessorCount'] * ci_slices // slices,
                'sharedCopyEngineCount': self.info['copyEngineCount'],
                'sharedDecoderCount': self.info['decoderCount'],
                'sharedEncoderCount': self.info['encoderCount'],
                'sharedJpegCount': self.info['jpegCount'],
                'sharedOfaCount': self.info['ofaCount'],
                'name': name}
        return out


class _ComputeInstance:
    """A CI; it is also the MIG device (one MIG device per CI)."""

    def __init__(self, gi, ci_id, profile, start, mig_uuid=None):
        self.gi = gi
        self.gpu = gi.gpu
        self.id = ci_id
        self.profile = profile
        self.start = start
        self.uuid = mig_uuid or 'MIG-%s' % uuidlib.uuid4()
        self.handle = N.struct_c_nvmlComputeInstance_t()
        self.mig_handle = N.struct_c_nvmlDevice_t()

    @property
    def name(self):
        return '%s %s' % (self.gpu.values['name'], self.profile['name'])

    def state(self):
        return {'id': self.id, 'profile_id': self.profile['id'],
                'start': self.start, 'uuid': self.uuid}


class _GpuInstance:

    def __init__(self, gpu, gi_id, profile, start):
        self.gpu = gpu
        self.id = gi_id
        self.profile = profile
        self.start = start
        self.handle = N.struct_c_nvmlGpuInstance_t()
        self.cis = {}

    def ci_placement(self, ci_profile):
        """First aligned free SM-slice start for a CI, else None."""
        size = ci_profile['sliceCount']
        taken = set()
        for ci in self.cis.values():
            taken.update(range(ci.start, ci.start + ci.profile['sliceCount']))
        for start in range(0, self.profile.info['sliceCount'] - size + 1,
                           size):
            if not taken & set(range(start, start + size)):
                return start
        return None

    def state(self):
        return {'id': self.id, 'profile_id': self.profile.id,
                'start': self.start,
                'compute_instances': [ci.state() for _, ci in
                                      sorted(self.cis.items())]}


class _Gpu:
    """One physical GPU: model data plus mutable MIG/health state."""

    def __init__(self, spec, doc, minor):
        model = doc['devices'][spec.get('device_index', 0)]
        self.address = pci.normalize_address(spec['pci_address'])
        self.uuid = spec.get('uuid') or 'GPU-%s' % uuidlib.uuid5(
            uuidlib.NAMESPACE_URL, 'fake-gpu:' + self.address)
        self.errors = {k: _error_code(v) for k, v in model.items()
                       if _error_code(v) is not None}
        self.values = {k: v for k, v in model.items()
                       if k not in self.errors}
        self.values.update(uuid=self.uuid, minor=spec.get('minor', minor),
                           serial=spec.get('serial') or self._serial(model))
        if spec.get('numa_node') is not None:
            self.values['numa_node'] = spec['numa_node']
            self.errors.pop('numa_node', None)
        if spec.get('virtualization_mode') is not None:
            # NONE (0) on a bare-metal host, PASSTHROUGH (1) in a VM guest.
            self.values['virtualization_mode'] = spec['virtualization_mode']
            self.errors.pop('virtualization_mode', None)
        self.events = model.get('supported_event_types', DEFAULT_EVENT_TYPES)
        # MIG mode section: NVML clients other than the caller that hold
        # the GPU open (DCGM, nvidia-persistenced), and whether the GPU
        # left the nvidia driver since NVML last enumerated it.
        self.other_clients = set()
        self.left_driver = False
        self.profile_enums = {}
        for entry in model.get('gi_profiles', []):
            code = _error_code(entry['info'])
            self.profile_enums[entry['enum']] = (
                code if code is not None
                else _Profile(entry, self.hopper_or_newer))
        self.profiles = {p.id: p for p in self.profile_enums.values()
                         if isinstance(p, _Profile)}
        self.handle = N.struct_c_nvmlDevice_t()
        mode = int(spec.get('mig_mode', 0))
        self.mig = [mode, mode] if self.mig_capable else None
        self.gis = {}
        self.procs = {}
        self.lost = False
        self.ecc = {'%s_%s' % (c, t): self.values.get('ecc_%s_%s' % (c, t),
                                                      0)
                    for c in ('volatile', 'aggregate')
                    for t in ('corrected', 'uncorrected')}
        self.remapped = list(self.values.get('remapped_rows', [0, 0, 0, 0]))
        # A vGPU-Manager GPU (fake_vgpu): NVML says HOST_VGPU.
        self.vgpu = None
        if spec.get('vgpu_manager') is not None:
            self.vgpu = fake_vgpu.VgpuManager(
                self, spec['vgpu_manager'] or {}, spec.get('model', 'h200'))
            self.values['virtualization_mode'] = \
                N.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU
            self.errors.pop('virtualization_mode', None)

    def _serial(self, model):
        # The captured card keeps its serial; other cards get their own.
        if model.get('uuid') == self.uuid and 'serial' in model:
            return model['serial']
        digest = uuidlib.uuid5(uuidlib.NAMESPACE_URL, self.uuid).int
        return '%013d' % (digest % 10 ** 13)

    @property
    def mig_capable(self):
        return 'mig_mode' not in self.errors and bool(self.profiles)

    @property
    def hopper_or_newer(self):
        return self.values.get('architecture', 0) >= N.NVML_DEVICE_ARCH_HOPPER

    @property
    def full(self):
        return max(self.profiles.values(), key=lambda p: p.size)

    def require_mig(self):
        if not self.mig_capable:
            raise _Return(self.errors.get('mig_mode',
                                          N.NVML_ERROR_NOT_SUPPORTED))

    def profile(self, profile_id):
        self.require_mig()
        try:
            return self.profiles[profile_id]
        except KeyError:
            raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)

    def compute_instances(self):
        return [ci for _, gi in sorted(self.gis.items())
                for _, ci in sorted(gi.cis.items())]

    def placement_error(self, profile, start, taken):
        """Why `profile` cannot start at `start` next to `taken`
        [(profile, start)], as an NVML code; 0 when it fits.
        """
        if start not in profile.starts:
            return N.NVML_ERROR_INVALID_ARGUMENT
        span = set(range(start, start + profile.size))
        for other, other_start in taken:
            if span & set(range(other_start, other_start + other.size)):
                return N.NVML_ERROR_INSUFFICIENT_RESOURCES
        if sum(o.id == profile.id for o, _ in taken) >= profile.count:
            return N.NVML_ERROR_INSUFFICIENT_RESOURCES
        for key in _BUDGETS:
            used = sum(o.info[key] for o, _ in taken) + profile.info[key]
            if used > self.full.info[key]:
                return N.NVML_ERROR_INSUFFICIENT_RESOURCES
        return 0

    def taken(self):
        return [(gi.profile, gi.start) for gi in self.gis.values()]

    def remaining(self, profile):
        taken = self.taken()
        for start in profile.starts:
            if not self.placement_error(profile, start, taken):
                taken.append((profile, start))
        return len(taken) - len(self.gis)

    def first_free_start(self, profile):
        """Where NVML puts a GI created without a placement."""
        taken = self.taken()
        start = mig_rules.auto_start(
            profile, list(self.profiles.values()), taken,
            lambda p, s: not self.placement_error(p, s, taken))
        if start is None:
            raise _Return(N.NVML_ERROR_INSUFFICIENT_RESOURCES)
        return start

    def new_gi(self, profile, start, gi_id=None):
        code = self.placement_error(profile, start, self.taken())
        if code:
            raise _Return(code)
        if gi_id is None:
            # Ids follow the slot (mig_rules.gi_id cites the source).
            gi_id = mig_rules.gi_id(profile.size, start, self.full.size)
        gi = _GpuInstance(self, gi_id, profile, start)
        self.gis[gi_id] = gi
        return gi

    def processes(self, gi_id=None, ci_id=None):
        return [(pid, p) for pid, p in sorted(self.procs.items())
                if (gi_id is None or p['gi_id'] == gi_id)
                and (ci_id is None or p['ci_id'] == ci_id)]

    def reset(self, reboot):
        """A GPU reset (or host reboot): instances and processes vanish."""
        if reboot and self.vgpu is not None:
            self.vgpu.reboot()      # fake_vgpu: VF types do not survive
        self.gis.clear()
        self.procs.clear()
        self.lost = False
        self.remapped[2] = 0
        self.ecc.update(volatile_corrected=0, volatile_uncorrected=0)
        if self.mig is None:
            return
        if reboot and self.hopper_or_newer:
            self.mig = [0, 0]  # MIG mode does not survive reboot on Hopper+
        else:
            self.mig = [self.mig[1], self.mig[1]]

    def state(self):
        return {'mig_mode': list(self.mig) if self.mig else None,
                'lost': self.lost, 'ecc': dict(self.ecc),
                'remapped_rows': list(self.remapped),
                'gpu_instances': [gi.state() for _, gi in
                                  sorted(self.gis.items())],
                'processes': [dict(p, pid=pid) for pid, p in
                              sorted(self.procs.items())]}


class _EventSet:

    def __init__(self):
        self.handle = N.struct_c_nvmlEventSet_t()
        self.masks = {}  # _Gpu -> registered event mask
        self.queue = collections.deque()


class _CFunction:
    """Stands in for a ctypes function pointer; wrappers may set restype."""

    def __init__(self, fake, name):
        self.__name__ = name
        self.restype = ctypes.c_int
        self.argtypes = None
        self._fake = fake

    def __call__(self, *args):
        return self._fake._dispatch(self.__name__, args)


class FakeNvml:
    """Fake NVML host: `gpus` are host-spec dicts resolved against model
    files ({'model': 'h200', 'pci_address': ..., 'uuid': ...,
    'numa_node': ..., 'mig_mode': ...}), in NVML index order.

    visible(pci_address) -> bool says which GPUs the nvidia driver holds:
    read at nvmlInit, like NVML's own enumeration, and a GPU that leaves
    the driver later answers GpuIsLost.  on_change(state) is called after
    every state change (to persist the fake); call_counts counts C calls.
    """

    def __init__(self, gpus, driver_version=None, init_error=None,
                 visible=None, on_change=None, privileged=True):
        specs = [dict(g) for g in gpus]
        docs = [models.load(s.get('model', 'h200')) for s in specs]
        addresses = [pci.normalize_address(s['pci_address']) for s in specs]
        # Minor numbers follow PCI order; NVML indexes follow the spec.
        self._gpus = [_Gpu(s, d, sorted(addresses).index(a))
                      for s, d, a in zip(specs, docs, addresses)]
        system = docs[0] if docs else {}
        self.driver_version = driver_version or system.get(
            'driver_version', '580.159.04')
        self.cuda_driver_version = system.get('cuda_driver_version', 13000)
        nvml = system.get('nvml_version', '13.' + self.driver_version)
        self.nvml_version = (nvml.split('.', 1)[0] + '.' + self.driver_version
                             if driver_version else nvml)
        self.init_error = init_error
        self.visible = visible or (lambda address: True)
        # False: the caller is not root (nor holds the mig/config
        # capability): MIG changes answer NO_PERMISSION.
        self.privileged = privileged
        self.on_change = on_change
        self.call_counts = collections.Counter()
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._handles = {}
        self._retired = []
        self._failures = []
        self._inits = 0
        self._loaded = False
        self._enumerated = []
        self._saved = None
        self._lib = _Library(self)
        for gpu in self._gpus:
            self._register(gpu.handle, gpu)

    # -- install ---------------------------------------------------------

    def install(self):
        """Route pynvml to this fake until uninstall()."""
        global _active
        if _active is not None:
            raise RuntimeError('a FakeNvml is already installed')
        self._saved = {name: getattr(N, name) for name in _PATCHED}
        self._saved['strings'] = dict(N.NVMLError._errcode_to_string)
        N._LoadNvmlLibrary = self._load_library
        N._nvmlGetFunctionPointer = self._function_pointer
        N.nvmlLib = None
        N._nvmlLib_refcount = 0
        N._nvmlGetFunctionPointer_cache.clear()
        _active = self
        return self

    def uninstall(self):
        """Put the real pynvml back, as if never initialised."""
        global _active
        if self._saved is None:
            return
        strings = self._saved.pop('strings')
        for name, value in self._saved.items():
            setattr(N, name, value)
        N.NVMLError._errcode_to_string.clear()
        N.NVMLError._errcode_to_string.update(strings)
        N._nvmlGetFunctionPointer_cache.clear()
        self._saved = None
        _active = None
        with self._lock:
            self._inits = 0
            self._loaded = False
            self._cond.notify_all()

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.uninstall()

    @property
    def initialized(self):
        return self._inits > 0

    def _load_library(self):
        if self.init_error == N.NVML_ERROR_LIBRARY_NOT_FOUND:
            raise N.NVMLError(N.NVML_ERROR_LIBRARY_NOT_FOUND)
        self._loaded = True

    def _function_pointer(self, name):
        # Same contract as the real getter: Uninitialized before the
        # library is loaded, FunctionNotFound for a symbol it lacks.
        if not self._loaded:
            raise N.NVMLError(N.NVML_ERROR_UNINITIALIZED)
        if not name.startswith('nvml') or (
                name not in _SCALARS and not hasattr(_Library, name)):
            raise N.NVMLError(N.NVML_ERROR_FUNCTION_NOT_FOUND)
        return _CFunction(self, name)

    # -- dispatch ----------------------------------------------------------

    def _dispatch(self, name, args):
        with self._lock:
            self.call_counts[name] += 1
            try:
                if name not in _NO_INIT and not self._inits:
                    raise _Return(N.NVML_ERROR_UNINITIALIZED)
                args = [self._resolve(a) for a in args]
                self._check(name, args)
                if name in _SCALARS:
                    result = self._lib.scalar(_SCALARS[name], *args)
                else:
                    result = getattr(self._lib, name)(*args)
            except (_Return, fake_vgpu.NvmlCode) as r:
                return r.code
            return N.NVML_SUCCESS if result is None else result

    def _resolve(self, arg):
        """Handle pointers -> fake objects; other arguments unchanged."""
        if not isinstance(arg, (N.c_nvmlDevice_t, N.c_nvmlGpuInstance_t,
                                N.c_nvmlComputeInstance_t,
                                N.c_nvmlEventSet_t)):
            return arg
        obj = self._handles.get(_address(arg))
        if obj is None:
            raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)
        return obj

    def _check(self, name, args):
        """Errors that depend only on the call and its device."""
        target = next((a for a in args if isinstance(
            a, (_Gpu, _GpuInstance, _ComputeInstance))), None)
        gpu = getattr(target, 'gpu', target)
        if gpu is not None and (not self._note_driver(gpu) or gpu.lost):
            raise _Return(N.NVML_ERROR_GPU_IS_LOST)
        self._scripted(name, target)
        if gpu is not None and name in _RECORDED:
            code = gpu.errors.get(_RECORDED[name])
            if code is not None:
                raise _Return(code)
        if isinstance(args[0] if args else None, _ComputeInstance) and (
                name.startswith('nvmlDevice') and name not in _MIG_OK):
            raise _Return(N.NVML_ERROR_NOT_SUPPORTED)

    def _scripted(self, name, target):
        uuids = {getattr(target, 'uuid', None),
                 getattr(getattr(target, 'gpu', None), 'uuid', None)}
        for failure in self._failures:
            if name in failure['symbols'] and (
                    failure['uuid'] is None or failure['uuid'] in uuids):
                if failure['times'] is not None:
                    failure['times'] -= 1
                    if failure['times'] <= 0:
                        self._failures.remove(failure)
                raise _Return(failure['code'])

    def _register(self, struct, obj):
        self._handles[ctypes.addressof(struct)] = obj

    def _retire(self, *structs):
        # Kept alive so a stale handle never aliases a new instance.
        for struct in structs:
            self._handles.pop(ctypes.addressof(struct), None)
            self._retired.append(struct)

    def _changed(self):
        if self.on_change is not None:
            self.on_change(self.to_state())

    def _enumerate(self):
        for gpu in self._gpus:
            self._note_driver(gpu)
        self._enumerated = [g for g in self._gpus
                            if self.visible(g.address)]

    # -- MIG mode and privileges -------------------------------------------

    def _require_root(self):
        """MIG mode and GI/CI create/destroy need root: NVML reference
        ("Requires root user" / "Requires privileged user" on
        nvmlDeviceSetMigMode, nvmlDeviceCreateGpuInstance*,
        nvmlGpuInstanceDestroy, nvmlGpuInstanceCreateComputeInstance,
        nvmlComputeInstanceDestroy); GPU-to-VM contract §4/§5.
        """
        if not self.privileged:
            raise _Return(N.NVML_ERROR_NO_PERMISSION)

    def _note_driver(self, gpu):
        """Track a GPU leaving and re-entering the nvidia driver (bound
        to vfio-pci and back).  Its GPU instances die with the unbind on
        every architecture (NVML reference: a GI handle becomes invalid
        when "the parent device is unbound"); Hopper also comes back with
        MIG mode off, Ampere keeps the mode (GPU-to-VM contract §5).
        """
        if not self.visible(gpu.address):
            gpu.left_driver = True
            return False
        if gpu.left_driver:
            gpu.left_driver = False
            for gi in list(gpu.gis.values()):
                self._drop_gi(gi)
            gpu.procs.clear()
            if gpu.mig is not None and gpu.hopper_or_newer:
                gpu.mig = [0, 0]
            elif gpu.mig is not None:
                gpu.mig = [gpu.mig[1], gpu.mig[1]]
            self._changed()
        return True

    def driver_unbound(self, address):
        """The GPU at `address` left the nvidia driver (fake sysfs calls
        this on an unbind; NVML also notices on its own at init and on any
        call on the GPU).
        """
        with self._lock:
            for gpu in self._gpus:
                if gpu.address == pci.normalize_address(address):
                    gpu.left_driver = True

    def hold(self, uuid, client):
        """Another NVML client (e.g. 'dcgm', 'nvidia-persistenced') holds
        the GPU open: on Ampere a MIG mode change stays pending (IN_USE).
        """
        with self._lock:
            self._gpu(uuid).other_clients.add(client)

    def let_go(self, uuid, client):
        with self._lock:
            self._gpu(uuid).other_clients.discard(client)

    def set_privileged(self, privileged):
        with self._lock:
            self.privileged = privileged

    # -- state helpers shared with the C symbols ---------------------------

    def _gpu(self, uuid):
        for gpu in self._gpus:
            if gpu.uuid == uuid:
                return gpu
        raise ValueError('no fake GPU with UUID %s' % uuid)

    def _new_gi(self, gpu, profile, start, gi_id=None):
        gi = gpu.new_gi(profile, start, gi_id)
        self._register(gi.handle, gi)
        return gi

    def _new_ci(self, gi, ci_profile, start=None, ci_id=None, mig_uuid=None):
        if start is None:
            start = gi.ci_placement(ci_profile)
        same = sum(ci.profile['id'] == ci_profile['id']
                   for ci in gi.cis.values())
        if start is None or same >= ci_profile['instanceCount']:
            raise _Return(N.NVML_ERROR_INSUFFICIENT_RESOURCES)
        if ci_id is None:
            ci_id = _lowest_free(gi.cis, 0)
        ci = _ComputeInstance(gi, ci_id, ci_profile, start, mig_uuid)
        gi.cis[ci_id] = ci
        self._register(ci.handle, ci)
        self._register(ci.mig_handle, ci)
        return ci

    def _drop_ci(self, ci):
        del ci.gi.cis[ci.id]
        self._retire(ci.handle, ci.mig_handle)

    def _drop_gi(self, gi):
        for ci in list(gi.cis.values()):
            self._drop_ci(ci)
        del gi.gpu.gis[gi.id]
        self._retire(gi.handle)

    def _reset(self, gpu, reboot):
        for gi in list(gpu.gis.values()):
            self._drop_gi(gi)
        gpu.reset(reboot)

    def _emit(self, gpu, event_type, data=0, gi_id=None, ci_id=None):
        for es in self._handles.values():
            if isinstance(es, _EventSet) and es.masks.get(gpu, 0) & \
                    event_type:
                es.queue.append((gpu, event_type, data,
                                 NA_ID if gi_id is None else gi_id,
                                 NA_ID if ci_id is None else ci_id))
        self._cond.notify_all()

    # -- scenario controls -------------------------------------------------

    def fail(self, name, code=N.NVML_ERROR_NOT_SUPPORTED, uuid=None,
             times=None):
        """Make a C symbol, or every symbol behind a pynvml wrapper name,
        return `code` (for one GPU/MIG UUID, `times` calls or for good).
        """
        with self._lock:
            self._failures.append({'symbols': c_symbols(name), 'code': code,
                                   'uuid': uuid, 'times': times})

    def clear_failures(self):
        with self._lock:
            self._failures.clear()

    def reboot(self):
        """Host reboot: GIs/CIs and processes vanish; a pending MIG mode
        applies on Ampere, Hopper+ comes back with MIG disabled.
        """
        with self._lock:
            for gpu in self._gpus:
                self._reset(gpu, reboot=True)
            for es in self._handles.values():
                if isinstance(es, _EventSet):
                    es.queue.clear()
            self._changed()

    def reset_gpu(self, uuid):
        """GPU reset: like reboot for one GPU, MIG mode kept/applied."""
        with self._lock:
            self._reset(self._gpu(uuid), reboot=False)
            self._changed()

    def add_process(self, uuid, pid, used_bytes, gi_id=None, ci_id=None):
        """A compute process on a GPU (or on a MIG device by MIG UUID)."""
        with self._lock:
            gpu, gi_id, ci_id = self._process_place(uuid, gi_id, ci_id)
            gpu.procs[pid] = {'used_bytes': used_bytes, 'gi_id': gi_id,
                              'ci_id': ci_id}
            self._changed()

    def _mig_device(self, uuid):
        for gpu in self._gpus:
            for ci in gpu.compute_instances():
                if ci.uuid == uuid:
                    return ci
        return None

    def _process_place(self, uuid, gi_id, ci_id):
        ci = self._mig_device(uuid)
        if ci is not None:
            return ci.gpu, ci.gi.id, ci.id
        gpu = self._gpu(uuid)
        if gpu.mig and gpu.mig[0] and gi_id is None:
            raise ValueError('%s is in MIG mode: a process needs a GI' % uuid)
        if gi_id is not None:
            gi = gpu.gis.get(gi_id)
            if gi is None or (ci_id is not None and ci_id not in gi.cis):
                raise ValueError('no GI %s / CI %s on %s'
                                 % (gi_id, ci_id, uuid))
        return gpu, gi_id, ci_id

    def remove_process(self, uuid, pid):
        with self._lock:
            ci = self._mig_device(uuid)
            gpu = ci.gpu if ci is not None else self._gpu(uuid)
            gpu.procs.pop(pid, None)
            self._changed()

    def inject_event(self, uuid, event_type, data=0, gi_id=None,
                     ci_id=None):
        with self._lock:
            self._emit(self._gpu(uuid), event_type, data, gi_id, ci_id)

    def inject_xid(self, uuid, xid, gi_id=None, ci_id=None):
        self.inject_event(uuid, N.nvmlEventTypeXidCriticalError, xid,
                          gi_id, ci_id)

    def ecc_error(self, uuid, uncorrected=True):
        """One ECC error: counters, a pending row remap (uncorrected) and
        the matching event.
        """
        with self._lock:
            gpu = self._gpu(uuid)
            kind = 'uncorrected' if uncorrected else 'corrected'
            gpu.ecc['volatile_' + kind] += 1
            gpu.ecc['aggregate_' + kind] += 1
            if uncorrected:
                gpu.remapped[1] += 1
                gpu.remapped[2] = 1
            self._emit(gpu, N.nvmlEventTypeDoubleBitEccError if uncorrected
                       else N.nvmlEventTypeSingleBitEccError)
            self._changed()

    def fall_off_bus(self, uuid):
        """XID 79: every later call on the GPU fails with GpuIsLost."""
        with self._lock:
            gpu = self._gpu(uuid)
            self._emit(gpu, N.nvmlEventTypeXidCriticalError,
                       XID_FALLEN_OFF_BUS)
            gpu.lost = True
            self._changed()

    def recover(self, uuid):
        """The GPU is back after a reset: usable, MIG instances gone."""
        self.reset_gpu(uuid)

    def create_gi(self, uuid, profile_id, start, compute_instance=True):
        """Pre-create a GI (and a full CI) that no agent knows about.
        Returns (gi_id, MIG UUID or None); NVML's rules apply.
        """
        with self._lock:
            gpu = self._gpu(uuid)
            try:
                if not (gpu.mig and gpu.mig[0]):
                    raise _Return(N.NVML_ERROR_NOT_SUPPORTED)
                gi = self._new_gi(gpu, gpu.profile(profile_id), start)
                ci = None
                if compute_instance:
                    full = _CI_PROFILES[gi.profile.info['sliceCount']]
                    ci = self._new_ci(gi, gi.profile.ci_profiles()[full])
            except _Return as r:
                raise N.NVMLError(r.code)
            self._changed()
            return gi.id, ci.uuid if ci else None

    def gpu_info(self):
        """Static identity of every GPU, visible or not (spec order)."""
        with self._lock:
            return [{'uuid': g.uuid, 'pci_address': g.address,
                     'name': g.values.get('name'),
                     'pci_device_id': g.values.get('pci', {}).get(
                         'pciDeviceId', 0) >> 16,
                     'numa_node': g.values.get('numa_node'),
                     'minor': g.values['minor']} for g in self._gpus]

    # -- the kernel's view of NVML (read by fake_sysfs) ---------------------
    #
    # The nvidia driver's PCI remove (an unbind) waits until the GPU's
    # usage count is zero (NVIDIA/open-gpu-kernel-modules,
    # kernel-open/nvidia/nv-pci.c, nv_pci_remove: "Attempting to remove
    # device ... with non-zero usage count!", then it waits). NVML holds
    # the device files of the GPUs it enumerated from nvmlInit to the last
    # nvmlShutdown (an event set lives inside that session), and
    # persistence mode keeps the driver's own reference.

    def holds(self, address):
        """Whether NVML or persistence mode keeps the GPU at `address`
        open in the kernel driver.
        """
        with self._lock:
            gpu = next((g for g in self._gpus if g.address == address),
                       None)
            if gpu is None:
                return False
            return bool(gpu.values.get('persistence_mode')) or (
                self._inits > 0 and gpu in self._enumerated)

    def wait_released(self, address, timeout=None):
        """Block until holds(address) is False (True), or `timeout`
        seconds pass (False).
        """
        with self._cond:
            return self._cond.wait_for(lambda: not self.holds(address),
                                       timeout)

    def set_persistence_mode(self, uuid, enabled):
        """What `nvidia-smi -pm` (or nvidia-persistenced) sets."""
        with self._lock:
            self._gpu(uuid).values['persistence_mode'] = int(enabled)
            self._cond.notify_all()

    # -- persistence -------------------------------------------------------

    def to_state(self):
        """JSON-able mutable state, keyed by GPU UUID."""
        with self._lock:
            return {'gpus': {g.uuid: g.state() for g in self._gpus}}

    def load_state(self, state):
        """Replace mutable state with a to_state() snapshot; old GI/CI
        handles go stale, MIG UUIDs and ids are kept.
        """
        with self._lock:
            for uuid, saved in state.get('gpus', {}).items():
                try:
                    gpu = self._gpu(uuid)
                except ValueError:
                    continue
                self._reset(gpu, reboot=False)
                self._restore(gpu, saved)

    def _restore(self, gpu, saved):
        if saved.get('mig_mode') is not None and gpu.mig is not None:
            gpu.mig = list(saved['mig_mode'])
        gpu.lost = saved.get('lost', False)
        gpu.ecc.update(saved.get('ecc', {}))
        gpu.remapped = list(saved.get('remapped_rows', gpu.remapped))
        try:
            for gi_state in saved.get('gpu_instances', []):
                profile = gpu.profile(gi_state['profile_id'])
                gi = self._new_gi(gpu, profile, gi_state['start'],
                                  gi_state['id'])
                cis = profile.ci_profiles()
                for ci_state in gi_state.get('compute_instances', []):
                    self._new_ci(gi, cis[ci_state['profile_id']],
                                 ci_state['start'], ci_state['id'],
                                 ci_state['uuid'])
        except _Return as r:
            raise ValueError('saved state does not fit %s: NVML error %d'
                             % (gpu.uuid, r.code))
        for proc in saved.get('processes', []):
            gpu.procs[proc['pid']] = {k: proc.get(k) for k in
                                      ('used_bytes', 'gi_id', 'ci_id')}


class _Library(fake_vgpu.VgpuSymbols):
    """The C symbols.  Each method is named like the symbol, receives the
    wrapper's ctypes arguments with handles already resolved to fake
    objects, and returns None (success) or raises _Return.
    """

    def __init__(self, fake):
        self.fake = fake

    # -- library -----------------------------------------------------------

    def nvmlInitWithFlags(self, flags):
        fake = self.fake
        if fake.init_error:
            raise _Return(fake.init_error)
        fake._inits += 1
        if fake._inits == 1:
            fake._enumerate()

    def nvmlInit_v2(self):
        self.nvmlInitWithFlags(0)

    def nvmlShutdown(self):
        self.fake._inits -= 1
        self.fake._cond.notify_all()

    def nvmlErrorString(self, result):
        code = _val(result)
        text = N.NVMLError._errcode_to_string.get(code) or \
            _ERROR_STRINGS.get(code, 'Unknown Error')
        return text.encode()

    def nvmlSystemGetDriverVersion(self, buf, length):
        _put_str(buf, length, self.fake.driver_version)

    def nvmlSystemGetNVMLVersion(self, buf, length):
        _put_str(buf, length, self.fake.nvml_version)

    def nvmlSystemGetCudaDriverVersion(self, out):
        _out(out).value = self.fake.cuda_driver_version

    # -- enumeration -------------------------------------------------------

    def _usable(self, gpu):
        if gpu.lost or not self.fake.visible(gpu.address):
            raise _Return(N.NVML_ERROR_GPU_IS_LOST)
        return gpu.handle

    def nvmlDeviceGetCount_v2(self, out):
        _out(out).value = len(self.fake._enumerated)

    def nvmlDeviceGetHandleByIndex_v2(self, index, out):
        gpus = self.fake._enumerated
        if not 0 <= _val(index) < len(gpus):
            raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)
        _out(out).contents = self._usable(gpus[_val(index)])

    def nvmlDeviceGetHandleByUUID(self, uuid, out):
        wanted = (_val(uuid) or b'').decode()
        for gpu in self.fake._enumerated:
            if gpu.uuid == wanted:
                _out(out).contents = self._usable(gpu)
                return
            for ci in gpu.compute_instances():
                if ci.uuid == wanted:
                    self._usable(gpu)
                    _out(out).contents = ci.mig_handle
                    return
        raise _Return(N.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, out):
        wanted = _parse_bus_id((_val(bus_id) or b'').decode())
        for gpu in self.fake._enumerated:
            if _parse_bus_id(gpu.address) == wanted:
                _out(out).contents = self._usable(gpu)
                return
        raise _Return(N.NVML_ERROR_NOT_FOUND)

    # -- identity and telemetry --------------------------------------------

    def scalar(self, key, dev, out):
        _out(out).value = self._gpu(dev).values[key]

    @staticmethod
    def _gpu(dev):
        return dev.gpu if isinstance(dev, _ComputeInstance) else dev

    def nvmlDeviceGetName(self, dev, buf, length):
        name = dev.name if isinstance(dev, _ComputeInstance) else \
            dev.values['name']
        _put_str(buf, length, name)

    def nvmlDeviceGetUUID(self, dev, buf, length):
        _put_str(buf, length, dev.uuid)

    def nvmlDeviceGetSerial(self, dev, buf, length):
        _put_str(buf, length, dev.values['serial'])

    def nvmlDeviceGetPciInfo_v3(self, dev, out):
        gpu = self._gpu(dev)
        domain, bus, device, _ = _parse_bus_id(gpu.address)
        info = _out(out)
        _fill(info, gpu.values['pci'])
        info.domain, info.bus, info.device = domain, bus, device
        info.busId = b'%08X:%02X:%02X.0' % (domain, bus, device)
        info.busIdLegacy = b'%04X:%02X:%02X.0' % (domain, bus, device)

    def _memory(self, dev):
        """(total, reserved, used by processes) in bytes."""
        if isinstance(dev, _ComputeInstance):
            procs = dev.gpu.processes(gi_id=dev.gi.id)
            total = dev.gi.profile.info['memorySizeMB'] << 20
            reserved = 0
        else:
            procs = dev.processes()
            mem = dev.values.get('memory_v2') or {}
            v1 = dev.values.get('memory_v1') or {}
            total = mem.get('total', v1.get('total', 0))
            reserved = mem.get('reserved', v1.get('used', 0))
        used = sum(p['used_bytes'] or 0 for _, p in procs)
        return total, reserved, used

    def nvmlDeviceGetMemoryInfo(self, dev, out):
        total, reserved, used = self._memory(dev)
        info = _out(out)
        info.total, info.used = total, reserved + used
        info.free = total - reserved - used

    def nvmlDeviceGetMemoryInfo_v2(self, dev, out):
        info = _out(out)
        if info.version != N.nvmlMemory_v2:
            # What driver 580 returns for an unversioned struct.
            raise _Return(N.NVML_ERROR_FUNCTION_NOT_FOUND)
        total, reserved, used = self._memory(dev)
        info.total, info.reserved, info.used = total, reserved, used
        info.free = total - reserved - used

    def nvmlDeviceGetBAR1MemoryInfo(self, dev, out):
        _fill(_out(out), dev.values['bar1'])

    def nvmlDeviceGetCudaComputeCapability(self, dev, major, minor):
        cc = self._gpu(dev).values['cuda_cc']
        _out(major).value, _out(minor).value = cc[0], cc[1]

    def nvmlDeviceGetTemperature(self, dev, sensor, out):
        if _val(sensor) != N.NVML_TEMPERATURE_GPU:
            raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)
        _out(out).value = dev.values['temperature']

    def nvmlDeviceGetUtilizationRates(self, dev, out):
        _fill(_out(out), dev.values['utilization'])

    def nvmlDeviceGetEccMode(self, dev, current, pending):
        _out(current).value, _out(pending).value = dev.values['ecc_mode']

    def nvmlDeviceGetTotalEccErrors(self, dev, error_type, counter, out):
        key = '%s_%s' % (
            'aggregate' if _val(counter) == N.NVML_AGGREGATE_ECC
            else 'volatile',
            'uncorrected' if _val(error_type) ==
            N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 'corrected')
        code = dev.errors.get('ecc_' + key, dev.errors.get('ecc_mode'))
        if code is not None:
            raise _Return(code)
        _out(out).value = dev.ecc[key]

    def nvmlDeviceGetRemappedRows(self, dev, corr, unc, pending, failure):
        for ref, value in zip((corr, unc, pending, failure), dev.remapped):
            _out(ref).value = value

    def nvmlDeviceGetNvLinkState(self, dev, link, out):
        state = dev.values.get('nvlink_state') or {}
        value = state.get(str(_val(link)))
        if value is None:
            codes = {_error_code(v) for v in state.values()}
            if len(codes) == 1 and None not in codes:  # no NVLink at all
                raise _Return(codes.pop())
            raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)
        if _error_code(value) is not None:
            raise _Return(_error_code(value))
        _out(out).value = value

    def nvmlDeviceGetTopologyCommonAncestor(self, dev1, dev2, out):
        if N.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH in (
                dev1.values.get('virtualization_mode'),
                dev2.values.get('virtualization_mode')):
            raise _Return(N.NVML_ERROR_NOT_SUPPORTED)  # as in a VM guest
        numa = dev1.values.get('numa_node')
        same = numa is not None and numa == dev2.values.get('numa_node')
        _out(out).value = (N.NVML_TOPOLOGY_NODE if same
                           else N.NVML_TOPOLOGY_SYSTEM)

    def nvmlDeviceGetComputeRunningProcesses_v3(self, dev, count, procs):
        if isinstance(dev, _ComputeInstance):
            found = dev.gpu.processes(dev.gi.id, dev.id)
        else:
            found = dev.processes()
        n = _out(count)
        if procs is None and not found:
            n.value = 0
            return
        if procs is None or n.value < len(found):
            n.value = len(found)
            raise _Return(N.NVML_ERROR_INSUFFICIENT_SIZE)
        for slot, (pid, p) in zip(procs, found):
            slot.pid = pid
            slot.usedGpuMemory = (NOT_AVAILABLE if p['used_bytes'] is None
                                  else p['used_bytes'])
            slot.gpuInstanceId = NA_ID if p['gi_id'] is None else p['gi_id']
            slot.computeInstanceId = (NA_ID if p['ci_id'] is None
                                      else p['ci_id'])
        n.value = len(found)

    # -- MIG mode ----------------------------------------------------------

    def nvmlDeviceGetMigMode(self, dev, current, pending):
        dev.require_mig()
        _out(current).value, _out(pending).value = dev.mig

    def nvmlDeviceSetMigMode(self, dev, mode, status):
        """SUCCESS once the request is taken; whether it applied is
        `activationStatus` (mig_rules.activation cites the sources).
        """
        dev.require_mig()
        self.fake._require_root()
        mode = _val(mode)
        if mode not in (N.NVML_DEVICE_MIG_DISABLE, N.NVML_DEVICE_MIG_ENABLE):
            raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)
        if dev.mig == [mode, mode]:
            _out(status).value = N.NVML_SUCCESS
            return
        if dev.gis:
            # GPU instances must be destroyed before MIG mode goes off.
            raise _Return(N.NVML_ERROR_IN_USE)
        applied, code = mig_rules.activation(
            dev.hopper_or_newer,
            dev.values.get('virtualization_mode')
            == N.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
            dev.other_clients, dev.procs)
        dev.mig = [mode if applied else dev.mig[0], mode]
        self.fake._changed()
        _out(status).value = code

    def nvmlDeviceGetMaxMigDeviceCount(self, dev, out):
        dev.require_mig()
        _out(out).value = (max(p.count for p in dev.profiles.values())
                           if dev.mig[0] else 0)

    # -- GPU instances -----------------------------------------------------

    def _profile_info(self, dev, enum, out):
        dev.require_mig()
        profile = dev.profile_enums.get(_val(enum))
        if profile is None:
            raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)
        if isinstance(profile, int):
            raise _Return(profile)
        _fill(_out(out), profile.info)

    nvmlDeviceGetGpuInstanceProfileInfo = _profile_info

    def nvmlDeviceGetGpuInstanceProfileInfoV(self, dev, enum, out):
        self._profile_info(dev, enum, out)
        _out(out).version = 0   # driver 580 overwrites the caller's version

    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(self, dev, profile_id,
                                                      placements, count):
        starts = dev.profile(_val(profile_id)).starts
        size = dev.profiles[_val(profile_id)].size
        if placements is not None:
            _check_room(placements, len(starts))
            for slot, start in zip(placements, starts):
                slot.start, slot.size = start, size
        _out(count).value = len(starts)

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, dev, profile_id,
                                                  out):
        _out(out).value = dev.remaining(dev.profile(_val(profile_id)))

    @staticmethod
    def _creatable(dev, profile_id):
        """The profile to create a GI from; MIG mode must be on."""
        profile = dev.profile(_val(profile_id))
        if not dev.mig[0]:
            raise _Return(N.NVML_ERROR_NOT_SUPPORTED)
        return profile

    def _create_gi(self, dev, profile, start, out):
        self.fake._require_root()
        gi = self.fake._new_gi(dev, profile, start)
        _out(out).contents = gi.handle
        self.fake._changed()

    def nvmlDeviceCreateGpuInstance(self, dev, profile_id, out):
        profile = self._creatable(dev, profile_id)
        self.fake._require_root()
        self._create_gi(dev, profile, dev.first_free_start(profile), out)

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, dev, profile_id,
                                                 placement, out):
        if isinstance(placement, N.c_nvmlGpuInstancePlacement_t):
            # C takes `const nvmlGpuInstancePlacement_t *`: a struct passed
            # by value would be read as a pointer; fail loudly instead.
            raise TypeError('placement must be ctypes.byref(placement), '
                            'not the structure itself')
        profile = self._creatable(dev, profile_id)
        wanted = _out(placement)
        if not isinstance(wanted, N.c_nvmlGpuInstancePlacement_t) or \
                wanted.size != profile.size:
            raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)
        self._create_gi(dev, profile, wanted.start, out)

    def nvmlDeviceGetGpuInstances(self, dev, profile_id, instances, count):
        profile_id = _val(profile_id)
        dev.profile(profile_id)
        found = [gi for _, gi in sorted(dev.gis.items())
                 if gi.profile.id == profile_id]
        self._fill_handles(instances, count, [gi.handle for gi in found])

    @staticmethod
    def _fill_handles(array, count, structs):
        if array is not None:
            _check_room(array, len(structs))
            for i, struct in enumerate(structs):
                array[i] = ctypes.pointer(struct)
        _out(count).value = len(structs)

    def nvmlDeviceGetGpuInstanceById(self, dev, gi_id, out):
        dev.require_mig()
        gi = dev.gis.get(_val(gi_id))
        if gi is None:
            raise _Return(N.NVML_ERROR_NOT_FOUND)
        _out(out).contents = gi.handle

    def nvmlGpuInstanceGetInfo(self, gi, out):
        info = _out(out)
        info.device = ctypes.pointer(gi.gpu.handle)
        info.id, info.profileId = gi.id, gi.profile.id
        info.placement.start = gi.start
        info.placement.size = gi.profile.size

    def nvmlGpuInstanceDestroy(self, gi):
        self.fake._require_root()
        if gi.cis or gi.gpu.processes(gi_id=gi.id):
            raise _Return(N.NVML_ERROR_IN_USE)
        self.fake._drop_gi(gi)
        self.fake._changed()

    # -- compute instances and MIG devices ---------------------------------

    def _ci_profile(self, gi, profile_id):
        profile = gi.profile.ci_profiles().get(_val(profile_id))
        if profile is None:
            raise _Return(N.NVML_ERROR_NOT_SUPPORTED)
        return profile

    def _ci_profile_info(self, gi, profile, engine, out):
        if _val(engine) != N.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            raise _Return(N.NVML_ERROR_NOT_SUPPORTED)
        _fill(_out(out), self._ci_profile(gi, profile))

    nvmlGpuInstanceGetComputeInstanceProfileInfoV = _ci_profile_info
    nvmlGpuInstanceGetComputeInstanceProfileInfo = _ci_profile_info

    def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(self, gi,
                                                           profile_id, out):
        profile = self._ci_profile(gi, profile_id)
        free = gi.profile.info['sliceCount'] - sum(
            ci.profile['sliceCount'] for ci in gi.cis.values())
        _out(out).value = min(free // profile['sliceCount'],
                              profile['instanceCount'] - len(gi.cis))

    def nvmlGpuInstanceCreateComputeInstance(self, gi, profile_id, out):
        self.fake._require_root()
        ci = self.fake._new_ci(gi, self._ci_profile(gi, profile_id))
        _out(out).contents = ci.handle
        self.fake._changed()

    def nvmlGpuInstanceGetComputeInstances(self, gi, profile_id, instances,
                                           count):
        self._ci_profile(gi, profile_id)
        found = [ci.handle for _, ci in sorted(gi.cis.items())
                 if ci.profile['id'] == _val(profile_id)]
        self._fill_handles(instances, count, found)

    def nvmlGpuInstanceGetComputeInstanceById(self, gi, ci_id, out):
        ci = gi.cis.get(_val(ci_id))
        if ci is None:
            raise _Return(N.NVML_ERROR_NOT_FOUND)
        _out(out).contents = ci.handle

    def nvmlComputeInstanceGetInfo_v2(self, ci, out):
        info = _out(out)
        info.device = ctypes.pointer(ci.gpu.handle)
        info.gpuInstance = ctypes.pointer(ci.gi.handle)
        info.id, info.profileId = ci.id, ci.profile['id']
        info.placement.start = ci.start
        info.placement.size = ci.profile['sliceCount']

    def nvmlComputeInstanceDestroy(self, ci):
        self.fake._require_root()
        if ci.gpu.processes(ci.gi.id, ci.id):
            raise _Return(N.NVML_ERROR_IN_USE)
        self.fake._drop_ci(ci)
        self.fake._changed()

    def nvmlDeviceGetMigDeviceHandleByIndex(self, dev, index, out):
        if isinstance(dev, _ComputeInstance):
            raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)
        dev.require_mig()
        cis = dev.compute_instances()
        if _val(index) >= len(cis):
            raise _Return(N.NVML_ERROR_NOT_FOUND)
        _out(out).contents = cis[_val(index)].mig_handle

    def nvmlDeviceIsMigDeviceHandle(self, dev, out):
        _out(out).value = int(isinstance(dev, _ComputeInstance))

    @staticmethod
    def _mig(dev):
        if not isinstance(dev, _ComputeInstance):
            raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)
        return dev

    def nvmlDeviceGetGpuInstanceId(self, dev, out):
        _out(out).value = self._mig(dev).gi.id

    def nvmlDeviceGetComputeInstanceId(self, dev, out):
        _out(out).value = self._mig(dev).id

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, dev, out):
        _out(out).contents = self._mig(dev).gpu.handle

    # -- events ------------------------------------------------------------

    def nvmlEventSetCreate(self, out):
        es = _EventSet()
        self.fake._register(es.handle, es)
        _out(out).contents = es.handle

    def nvmlDeviceGetSupportedEventTypes(self, dev, out):
        _out(out).value = dev.events

    def nvmlDeviceRegisterEvents(self, dev, event_types, es):
        mask = _val(event_types)
        if mask & ~dev.events:
            raise _Return(N.NVML_ERROR_NOT_SUPPORTED)
        es.masks[dev] = es.masks.get(dev, 0) | mask

    def nvmlEventSetWait_v2(self, es, out, timeout_ms):
        """Waits on the fake's condition, so an injected event wakes it."""
        fake = self.fake
        deadline = time.monotonic() + _val(timeout_ms) / 1000.0
        while not es.queue:
            if not fake._inits or es not in fake._handles.values():
                raise _Return(N.NVML_ERROR_UNINITIALIZED)
            if any(gpu.lost for gpu in es.masks):
                raise _Return(N.NVML_ERROR_GPU_IS_LOST)
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Return(N.NVML_ERROR_TIMEOUT)
            fake._cond.wait(left)
        gpu, event_type, data, gi_id, ci_id = es.queue.popleft()
        info = _out(out)
        info.device = ctypes.pointer(gpu.handle)
        info.eventType, info.eventData = event_type, data
        info.gpuInstanceId, info.computeInstanceId = gi_id, ci_id

    def nvmlEventSetFree(self, es):
        self.fake._retire(es.handle)
        self.fake._cond.notify_all()

    # -- persistence mode (needs root, like every nvmlDeviceSet*) ----------

    def nvmlDeviceSetPersistenceMode(self, dev, mode):
        mode = _val(mode)
        if mode not in (N.NVML_FEATURE_DISABLED, N.NVML_FEATURE_ENABLED):
            raise _Return(N.NVML_ERROR_INVALID_ARGUMENT)
        dev.values['persistence_mode'] = mode
        self.fake._cond.notify_all()


# Per-consumer telemetry (vGPU instances, MPS clients, process
# utilisation) lives in its own module; a symbol defined above wins.
from cyborg_emulators.nvidia import fake_consumer_telemetry  # noqa: E402

for _name in fake_consumer_telemetry.SYMBOLS:
    if not hasattr(_Library, _name):
        setattr(_Library, _name, getattr(fake_consumer_telemetry, _name))
