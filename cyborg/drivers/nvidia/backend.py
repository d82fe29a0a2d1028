# SPDX-License-Identifier: Apache-2.0
"""The few NVML operations the driver needs, behind one small interface.

`NvmlBackend` speaks in plain records (GPU, MIG profile, GPU instance) so
the allocator and the driver never touch ctypes. `PynvmlBackend` is the one
implementation: NVIDIA's own `nvidia-ml-py` bindings (module `pynvml`) over
the real libnvidia-ml, or over the fake C layer in tests. Everything read
from NVML is read, never assumed: profile ids, placements and memory sizes
vary by GPU model and driver branch.
"""

import contextlib
import ctypes
import dataclasses
import functools
import threading
import time

from oslo_log import log

from cyborg.drivers.nvidia import privileged

LOG = log.getLogger(__name__)

# NVML error → why a host has no usable NVIDIA stack, in operator terms.
_INIT_REASONS = {
    'LibraryNotFound': 'libnvidia-ml.so.1 was not found (is the NVIDIA '
                       'driver installed?)',
    'DriverNotLoaded': 'the NVIDIA kernel driver is not loaded',
    'LibRmVersionMismatch': 'libnvidia-ml and the loaded kernel module are '
                            'different versions (reboot after a driver '
                            'upgrade?)',
    'NoPermission': 'no permission to talk to the NVIDIA driver',
}


class NvmlUnavailable(Exception):
    """NVML cannot be used on this host; the message says why."""


class NvmlError(Exception):
    """An NVML call failed; `kind` is the NVMLError_* suffix."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


@dataclasses.dataclass(frozen=True)
class MigProfile:
    id: int                 # the GPU instance profile id NVML creates by
    name: str               # e.g. "3g.71gb"
    slices: int             # memory slices (placement size)
    compute_slices: int     # SM slices (NVML sliceCount)
    multiprocessors: int
    memory_mib: int
    max_instances: int
    placements: tuple       # legal starts, each of `slices` memory slices
    decoders: int
    jpegs: int
    ofas: int
    copy_engines: int


@dataclasses.dataclass(frozen=True)
class GpuInstance:
    gi_id: int
    profile_id: int
    start: int
    size: int
    ci_ids: tuple = ()
    mig_uuids: tuple = ()


@dataclasses.dataclass(frozen=True)
class VgpuType:
    """A vGPU type the GPU's vGPU Manager supports (NVML's list, which
    does not shrink as VFs are configured).
    """
    id: int
    name: str               # e.g. "NVIDIA H200X-1-18C"
    framebuffer_mib: int
    max_instances: int      # per GPU
    gi_profile_id: int = None   # MIG-backed: the GPU instance profile

    @property
    def mig_backed(self):
        return self.gi_profile_id is not None


# nvmlDeviceGetVirtualizationMode: a vGPU Manager host.
VIRTUALIZATION_HOST_VGPU = 3
_NO_GI_PROFILE = 0xFFFFFFFF


@dataclasses.dataclass
class Gpu:
    uuid: str
    address: str            # sysfs form, 0000:1b:00.0
    name: str
    product_id: str         # PCI device id, 4 hex digits
    memory_total: int       # bytes
    memory_reserved: int    # bytes the driver keeps for itself
    compute_capability: tuple
    numa_node: int = None
    mig_current: int = None  # None: not MIG capable
    mig_pending: int = None
    profiles: tuple = ()     # MigProfile, empty when not MIG capable
    processes: tuple = ()    # (pid, used bytes or None, gi id, ci id)
    virtualization_mode: int = None   # NVML; None: not readable
    vgpu_types: tuple = ()   # VgpuType, on a vGPU Manager host only
    vgpu_heterogeneous: bool = False  # mixed time-sliced sizes allowed

    @property
    def host_vgpu(self):
        """Run by the NVIDIA vGPU Manager (not the data-center driver)."""
        return self.virtualization_mode == VIRTUALIZATION_HOST_VGPU

    @property
    def mig_capable(self):
        return bool(self.profiles)


def profiles_from_capture(device):
    """The MIG profiles of one device entry of an NVML capture (the JSON
    of cyborg_emulators.nvidia.capture and of the fake's model files).
    """
    out = []
    for entry in device.get('gi_profiles', []):
        info = entry['info']
        placements = entry.get('placements')
        if 'error' in info or not isinstance(placements, list) \
                or not placements:
            continue
        out.append(MigProfile(
            id=info['id'], name=info['name'].removeprefix('MIG '),
            slices=placements[0]['size'], compute_slices=info['sliceCount'],
            multiprocessors=info['multiprocessorCount'],
            memory_mib=info['memorySizeMB'],
            max_instances=info['instanceCount'],
            placements=tuple(p['start'] for p in placements),
            decoders=info['decoderCount'], jpegs=info['jpegCount'],
            ofas=info['ofaCount'], copy_engines=info['copyEngineCount']))
    return tuple(out)


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


class NvmlBackend:
    """The interface the NVIDIA driver uses (documented by PynvmlBackend)."""

    def open(self):
        raise NotImplementedError

    def gpus(self):
        raise NotImplementedError

    def instances(self, uuid):
        raise NotImplementedError

    def refresh(self):
        raise NotImplementedError

    def set_mig_mode(self, uuid, enabled):
        raise NotImplementedError

    def holders(self, uuid):
        raise NotImplementedError

    def create_instance(self, uuid, profile_id, start, compute_instance=True):
        raise NotImplementedError

    def destroy_instance(self, uuid, gi_id):
        raise NotImplementedError


# Reads of a GPU's instances while another process changes them.
_REREADS = 3


def _kind(exc):
    return type(exc).__name__.replace('NVMLError_', '')


def _locked(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return wrapper


class PynvmlBackend(NvmlBackend):

    def __init__(self, destroy_retries=5, retry_delay=0.5):
        # NVML itself is thread-safe, but refresh() shuts it down and up
        # again: every public call holds this lock.
        self._lock = threading.RLock()
        self._opened = False
        self.destroy_retries = destroy_retries
        self.retry_delay = retry_delay
        self.N = None
        self._events = None         # NVML event set for health events
        self._event_uuids = {}      # GPU UUID -> handle address or None
        self._event_lock = threading.Lock()  # held while waiting on it

    def open(self):
        """Initialise NVML once; NvmlUnavailable says why it cannot be."""
        with self._lock:
            if self._opened:
                return
            try:
                import pynvml
            except ImportError:
                raise NvmlUnavailable('the nvidia-ml-py package (module '
                                      'pynvml) is not installed')
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as e:
                kind = _kind(e)
                raise NvmlUnavailable(_INIT_REASONS.get(
                    kind, 'NVML initialisation failed: %s' % e))
            self.N = pynvml
            self._opened = True
            LOG.info('NVML %s, driver %s',
                     self._call(pynvml.nvmlSystemGetNVMLVersion),
                     self._call(pynvml.nvmlSystemGetDriverVersion))

    def close(self):
        with self._lock:
            if self._opened:
                self._free_events()
                self.N.nvmlShutdown()
                self._opened = False

    @contextlib.contextmanager
    def released(self):
        """Let go of every GPU for the duration (the nvidia driver's
        unbind waits until nothing holds the GPU: NVML's open device
        files and event set count), then open NVML again and register
        the same health events. Other calls wait meanwhile: they take
        the same lock, so nothing re-opens NVML halfway.
        """
        with self._lock:
            wanted = list(self._event_uuids) \
                if self._events is not None else None
            self.close()
            try:
                yield
            finally:
                self.open()
                if wanted is not None:
                    self._renew_events(wanted)

    @_locked
    def refresh(self):
        """NVML enumerates GPUs at init: after a GPU moved between kernel
        drivers, start over to see the host as it is now.  A health event
        set is made again, with the same GPUs.
        """
        wanted = list(self._event_uuids) if self._events is not None \
            else None
        self.close()
        self.open()
        if wanted is not None:
            self._renew_events(wanted)

    def _call(self, fn, *args, default=Ellipsis):
        """Call NVML; NotSupported-style errors give `default` if one is
        given, everything else becomes NvmlError.
        """
        try:
            return fn(*args)
        except self.N.NVMLError as e:
            kind = _kind(e)
            if default is not Ellipsis and kind in (
                    'NotSupported', 'InvalidArgument', 'NotFound',
                    'FunctionNotFound', 'NoData'):
                return default
            raise NvmlError(kind, '%s: %s' % (fn.__name__, e))

    def _handle(self, uuid):
        return self._call(self.N.nvmlDeviceGetHandleByUUID, uuid)

    # Discovery -------------------------------------------------------------

    @_locked
    def gpus(self):
        N = self.N
        out = []
        for index in range(self._call(N.nvmlDeviceGetCount)):
            try:
                out.append(self._gpu(self._call(
                    N.nvmlDeviceGetHandleByIndex, index)))
            except NvmlError as e:
                if e.kind not in ('GpuIsLost', 'NotFound'):
                    raise
                # Gone from NVML since init (handed to vfio-pci, fallen off
                # the bus): sysfs and the health monitor say what it is.
                LOG.debug('NVML device %d is unusable: %s', index, e)
        return out

    def _gpu(self, h):
        N = self.N
        pci = self._call(N.nvmlDeviceGetPciInfo, h)
        memory = self._call(N.nvmlDeviceGetMemoryInfo, h, N.nvmlMemory_v2,
                            default=None)
        if memory is None:
            memory = self._call(N.nvmlDeviceGetMemoryInfo, h)
        mig = self._call(N.nvmlDeviceGetMigMode, h, default=None)
        numa = self._call(N.nvmlDeviceGetNumaNodeId, h, default=None)
        virtualization = self._call(N.nvmlDeviceGetVirtualizationMode, h,
                                    default=None)
        host_vgpu = virtualization == VIRTUALIZATION_HOST_VGPU
        return Gpu(
            uuid=self._call(N.nvmlDeviceGetUUID, h),
            address='%04x:%02x:%02x.0' % (pci.domain, pci.bus, pci.device),
            name=self._call(N.nvmlDeviceGetName, h),
            product_id='%04x' % (pci.pciDeviceId >> 16),
            memory_total=memory.total,
            memory_reserved=getattr(memory, 'reserved', 0),
            compute_capability=tuple(self._call(
                N.nvmlDeviceGetCudaComputeCapability, h)),
            numa_node=numa,
            mig_current=mig[0] if mig else None,
            mig_pending=mig[1] if mig else None,
            profiles=self._profiles(h) if mig else (),
            processes=self._processes(h),
            virtualization_mode=virtualization,
            vgpu_types=self._vgpu_types(h) if host_vgpu else (),
            vgpu_heterogeneous=bool(self._call(
                N.nvmlDeviceGetVgpuHeterogeneousMode, h, default=0))
            if host_vgpu else False)

    def _vgpu_types(self, h):
        """The vGPU types the vGPU Manager supports on this GPU."""
        N = self.N
        out = []
        for type_id in self._call(N.nvmlDeviceGetSupportedVgpus, h,
                                  default=[]):
            profile = self._call(N.nvmlVgpuTypeGetGpuInstanceProfileId,
                                 type_id, default=_NO_GI_PROFILE)
            out.append(VgpuType(
                id=int(getattr(type_id, 'value', type_id)),
                name=str(self._call(N.nvmlVgpuTypeGetName, type_id)),
                framebuffer_mib=self._call(
                    N.nvmlVgpuTypeGetFramebufferSize, type_id) >> 20,
                max_instances=self._call(N.nvmlVgpuTypeGetMaxInstances, h,
                                         type_id),
                gi_profile_id=None if profile == _NO_GI_PROFILE
                else profile))
        return tuple(out)

    def _profiles(self, h):
        N = self.N
        out = []
        for enum in range(N.NVML_GPU_INSTANCE_PROFILE_COUNT):
            info = self._call(N.nvmlDeviceGetGpuInstanceProfileInfo, h, enum,
                              default=None)
            if info is None:
                continue
            placements = self._placements(h, info.id)
            if not placements:
                continue
            out.append(MigProfile(
                id=info.id, name=str(info.name).removeprefix('MIG '),
                slices=placements[0][1], compute_slices=info.sliceCount,
                multiprocessors=info.multiprocessorCount,
                memory_mib=info.memorySizeMB,
                max_instances=info.instanceCount,
                placements=tuple(start for start, _ in placements),
                decoders=info.decoderCount, jpegs=info.jpegCount,
                ofas=info.ofaCount, copy_engines=info.copyEngineCount))
        return tuple(out)

    def _placements(self, h, profile_id):
        N = self.N
        count = ctypes.c_uint(0)
        self._call(N.nvmlDeviceGetGpuInstancePossiblePlacements, h,
                   profile_id, None, ctypes.byref(count))
        array = (N.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
        self._call(N.nvmlDeviceGetGpuInstancePossiblePlacements, h,
                   profile_id, array, ctypes.byref(count))
        return [(array[i].start, array[i].size) for i in range(count.value)]

    def _processes(self, h):
        procs = self._call(self.N.nvmlDeviceGetComputeRunningProcesses, h,
                           default=[])
        return tuple((p.pid, p.usedGpuMemory,
                      getattr(p, 'gpuInstanceId', None),
                      getattr(p, 'computeInstanceId', None)) for p in procs)

    # Health ----------------------------------------------------------------

    # The event types health listens to, by the name wait_event reports
    # (nvmlEventType{XidCriticalError,DoubleBitEccError,SingleBitEccError};
    # NVML ABI constants, so usable before pynvml is imported).
    HEALTH_EVENTS = {0x8: 'xid', 0x2: 'ecc_dbe', 0x1: 'ecc_sbe'}
    _NO_ID = 0xFFFFFFFF     # GI/CI id of an event outside MIG

    @staticmethod
    def _pointer(handle):
        """A device handle's address: stable for the life of an init, and
        still known when the GPU no longer answers nvmlDeviceGetUUID.
        """
        return ctypes.cast(handle, ctypes.c_void_p).value

    def _require_nvml(self):
        if not self._opened:
            raise NvmlError('Uninitialized', 'NVML is not initialised')

    def _free_events(self):
        """Free the event set once no wait uses it (at most one wait to
        sit out): freeing it under a waiter, or shutting NVML down, is
        undefined.  The caller holds self._lock, which keeps a new wait
        from starting meanwhile.
        """
        if self._events is None:
            return
        with self._event_lock:
            events, self._events = self._events, None
            self._event_uuids = {}
            try:
                self._call(self.N.nvmlEventSetFree, events)
            except NvmlError as e:
                LOG.debug('Freeing the NVML event set: %s', e)

    @_locked
    def create_event_set(self):
        """A new, empty event set in place of any earlier one; GPUs must
        be registered again.
        """
        self._require_nvml()
        self._free_events()
        events = self._call(self.N.nvmlEventSetCreate)
        self._event_uuids = {}
        self._events = events

    def _renew_events(self, uuids):
        """The set died with the old init: a new one for the same GPUs.
        One NVML no longer answers for stays wanted for the next refresh
        (a GPU re-enters NVML only at init).
        """
        try:
            self._events = self._call(self.N.nvmlEventSetCreate)
        except NvmlError as e:
            LOG.warning('No NVML event set after refresh: %s', e)
            return
        for uuid in uuids:
            self._event_uuids[uuid] = None
            try:
                self._register_events(uuid)
            except NvmlError as e:
                LOG.info('No health events for GPU %s after refresh: %s',
                         uuid, e)

    @_locked
    def register_events(self, uuid):
        """Register the health events the GPU supports; returns the
        registered mask (0: it supports none, nothing registered).
        """
        self._require_nvml()
        if self._events is None:
            raise NvmlError('Uninitialized', 'no event set to register on')
        return self._register_events(uuid)

    def _register_events(self, uuid):
        N = self.N
        h = self._handle(uuid)
        supported = self._call(N.nvmlDeviceGetSupportedEventTypes, h,
                               default=0)
        mask = 0
        for bit in self.HEALTH_EVENTS:
            mask |= bit & supported
        if mask:
            self._call(N.nvmlDeviceRegisterEvents, h, mask, self._events)
            self._event_uuids[uuid] = self._pointer(h)
        return mask

    def wait_event(self, timeout_ms):
        """Block up to `timeout_ms` for one health event: {uuid, type,
        xid, data, gi_id, ci_id}, or None on timeout.  self._lock is
        taken only to sit out a close()/refresh() in progress, never
        while waiting, so discovery goes on meanwhile; the event lock
        keeps them from freeing the set under the wait.  No set (never
        made, or closed) raises Uninitialized.
        """
        while True:
            with self._lock:
                events = self._events
            if events is None:
                raise NvmlError('Uninitialized', 'no NVML event set')
            with self._event_lock:
                if self._events is events:  # else replaced: look again
                    return self._wait(events, timeout_ms)

    def _wait(self, events, timeout_ms):
        try:
            data = self._call(self.N.nvmlEventSetWait_v2, events,
                              int(timeout_ms))
        except NvmlError as e:
            if e.kind == 'Timeout':
                return None
            raise
        return self._event(data)

    def _event(self, data):
        pointer = self._pointer(data.device)
        # A snapshot: register_events() may add to it meanwhile.
        uuid = next((u for u, p in list(self._event_uuids.items())
                     if p == pointer), None)
        if uuid is None:
            try:
                uuid = self._call(self.N.nvmlDeviceGetUUID, data.device)
            except NvmlError:
                pass
        kind = self.HEALTH_EVENTS.get(data.eventType,
                                      '0x%x' % data.eventType)
        gi, ci = (None if v == self._NO_ID else v
                  for v in (data.gpuInstanceId, data.computeInstanceId))
        return {'uuid': uuid, 'type': kind, 'data': data.eventData,
                'xid': data.eventData if kind == 'xid' else None,
                'gi_id': gi, 'ci_id': ci}

    @_locked
    def health_probe(self, uuid):
        """What the GPU says of its health now.  lost: NVML answers
        GpuIsLost; remap_*: the row remapper (None: not supported);
        ecc_volatile_uncorrected: since the last reset (None: ECC off or
        not supported); reset_required: NVML wants a GPU reset; error:
        any other failure (the GPU may just have left NVML).
        """
        out = {'lost': False, 'remap_pending': None, 'remap_failure': None,
               'ecc_volatile_uncorrected': None, 'reset_required': False,
               'error': None}
        try:
            self._require_nvml()
            self._probe(self._handle(uuid), out)
        except NvmlError as e:
            out['lost'] = e.kind == 'GpuIsLost'
            out['reset_required'] = e.kind == 'ResetRequired'
            out['error'] = '%s (%s)' % (e, e.kind)
        return out

    def _probe(self, h, out):
        N = self.N
        rows = self._call(N.nvmlDeviceGetRemappedRows, h, default=None)
        if rows is not None:
            out['remap_pending'] = bool(rows[2])
            out['remap_failure'] = bool(rows[3])
        out['ecc_volatile_uncorrected'] = self._call(
            N.nvmlDeviceGetTotalEccErrors, h,
            N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC,
            default=None)

    # MIG -------------------------------------------------------------------

    def _gi_handles(self, h, profile_ids):
        N = self.N
        for profile_id in profile_ids:
            count = ctypes.c_uint(0)
            array = (N.c_nvmlGpuInstance_t * 8)()
            self._call(N.nvmlDeviceGetGpuInstances, h, profile_id, array,
                       ctypes.byref(count))
            for i in range(count.value):
                yield array[i]

    @_locked
    def instances(self, uuid):
        """Every live GPU instance with its compute instances and MIG UUIDs
        (ours and anybody else's).

        Read again when an instance listed went before its details were
        read: another process (the privsep daemon releasing a binding,
        nvidia-smi) destroyed it meanwhile, and NVML answers a handle of a
        destroyed instance with NVML_ERROR_INVALID_ARGUMENT (nvml.h:
        nvmlGpuInstanceGetInfo, "gpuInstance ... invalid") or NOT_FOUND.
        """
        for attempt in range(_REREADS):
            try:
                return self._read_instances(uuid)
            except NvmlError as e:
                if e.kind not in ('InvalidArgument', 'NotFound') \
                        or attempt == _REREADS - 1:
                    raise

    def _read_instances(self, uuid):
        N = self.N
        h = self._handle(uuid)
        profiles = self._profiles(h)
        mig_uuids = self._mig_uuids(h)
        out = []
        for gi in self._gi_handles(h, [p.id for p in profiles]):
            info = self._call(N.nvmlGpuInstanceGetInfo, gi)
            ci_ids = tuple(sorted(self._ci_ids(gi)))
            out.append(GpuInstance(
                gi_id=info.id, profile_id=info.profileId,
                start=info.placement.start, size=info.placement.size,
                ci_ids=ci_ids,
                mig_uuids=tuple(mig_uuids[(info.id, c)] for c in ci_ids
                                if (info.id, c) in mig_uuids)))
        return sorted(out, key=lambda i: i.start)

    def _ci_handles(self, gi):
        N = self.N
        for enum in range(N.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            ci_profile = self._call(
                N.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, enum,
                N.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, default=None)
            if ci_profile is None:
                continue
            count = ctypes.c_uint(0)
            array = (N.c_nvmlComputeInstance_t * 8)()
            self._call(N.nvmlGpuInstanceGetComputeInstances, gi,
                       ci_profile.id, array, ctypes.byref(count))
            for i in range(count.value):
                yield array[i]

    def _ci_ids(self, gi):
        return [self._call(self.N.nvmlComputeInstanceGetInfo, ci).id
                for ci in self._ci_handles(gi)]

    def _mig_uuids(self, h):
        """(gi id, ci id) → MIG-… UUID of every MIG device on the GPU."""
        N = self.N
        out = {}
        for i in range(self._call(N.nvmlDeviceGetMaxMigDeviceCount, h,
                                  default=0)):
            mig = self._call(N.nvmlDeviceGetMigDeviceHandleByIndex, h, i,
                             default=None)
            if mig is None:
                continue
            out[(self._call(N.nvmlDeviceGetGpuInstanceId, mig),
                 self._call(N.nvmlDeviceGetComputeInstanceId, mig))] = \
                self._call(N.nvmlDeviceGetUUID, mig)
        return out

    @_locked
    def direct_set_mig_mode(self, uuid, enabled):
        """Ask for a MIG mode: (current, pending, activation).

        nvmlDeviceSetMigMode succeeds once the request is taken and tells
        in its `activationStatus` whether the mode applied: activation is
        None when it did, else the NVMLError kind it reported: 'InUse'
        (other clients or processes hold the GPU: idle it and ask again),
        'ResetRequired' (a GPU reset or, in a pass-through VM, a VM reboot
        applies it).  Non-root callers get NvmlError 'NoPermission'.
        """
        N = self.N
        h = self._handle(uuid)
        status = self._call(N.nvmlDeviceSetMigMode, h,
                            N.NVML_DEVICE_MIG_ENABLE if enabled
                            else N.NVML_DEVICE_MIG_DISABLE)
        current, pending = self._call(N.nvmlDeviceGetMigMode, h)
        activation = None
        if status != N.NVML_SUCCESS:
            activation = _kind(N.NVMLError(status))
        return current, pending, activation

    @_locked
    def holders(self, uuid):
        """Who holds the GPU besides us, in words: compute processes,
        persistence mode, and processes with its /dev/nvidia<minor> open
        (those this user may see; DCGM and nvidia-persistenced show up
        here).
        """
        from cyborg.drivers.nvidia import holders as holders_mod

        N = self.N
        h = self._handle(uuid)
        out = ['process %d' % pid for pid, _, _, _ in self._processes(h)]
        if self._call(N.nvmlDeviceGetPersistenceMode, h, default=0):
            out.append('persistence mode (nvidia-persistenced)')
        minor = self._call(N.nvmlDeviceGetMinorNumber, h, default=None)
        if minor is not None:
            out += ['%s (pid %d)' % (name, pid)
                    for pid, name in holders_mod.open_by(minor)
                    if 'process %d' % pid not in out]
        return out

    @_locked
    def direct_create_instance(self, uuid, profile_id, start,
                               compute_instance=True):
        """A GPU instance at an explicit placement plus one compute
        instance spanning it; returns the GpuInstance with its MIG UUID.
        The GI is destroyed again if the CI cannot be made. Without
        compute_instance only the GI is made (a MIG-backed vGPU: the
        guest makes its compute instances).
        """
        N = self.N
        h = self._handle(uuid)
        size = next(p.slices for p in self._profiles(h) if p.id == profile_id)
        placement = N.c_nvmlGpuInstancePlacement_t(start, size)
        gi = self._call(N.nvmlDeviceCreateGpuInstanceWithPlacement, h,
                        profile_id, ctypes.byref(placement))
        if not compute_instance:
            info = self._call(N.nvmlGpuInstanceGetInfo, gi)
            return GpuInstance(gi_id=info.id, profile_id=profile_id,
                               start=info.placement.start,
                               size=info.placement.size)
        try:
            info = self._call(N.nvmlGpuInstanceGetInfo, gi)
            ci_profile = self._full_ci_profile(gi)
            ci = self._call(N.nvmlGpuInstanceCreateComputeInstance, gi,
                            ci_profile.id)
            ci_id = self._call(N.nvmlComputeInstanceGetInfo, ci).id
        except NvmlError:
            self._call(N.nvmlGpuInstanceDestroy, gi, default=None)
            raise
        mig_uuid = self._mig_uuids(h).get((info.id, ci_id))
        return GpuInstance(gi_id=info.id, profile_id=profile_id,
                           start=info.placement.start,
                           size=info.placement.size, ci_ids=(ci_id,),
                           mig_uuids=(mig_uuid,) if mig_uuid else ())

    def _full_ci_profile(self, gi):
        """The compute-instance profile that spans the whole GI: the one
        with the most SM slices.
        """
        N = self.N
        best = None
        for enum in range(N.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            if enum == N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1:
                continue
            p = self._call(N.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                           gi, enum,
                           N.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                           default=None)
            if p is not None and (best is None
                                  or p.sliceCount > best.sliceCount):
                best = p
        if best is None:
            raise NvmlError('NotSupported',
                            'no compute instance profile for this GI')
        return best

    @_locked
    def direct_destroy_instance(self, uuid, gi_id):
        """Destroy a GI's compute instances, then the GI; a GI that is
        briefly still in use after its CIs went is retried.
        """
        N = self.N
        h = self._handle(uuid)
        gi = self._call(N.nvmlDeviceGetGpuInstanceById, h, gi_id,
                        default=None)
        if gi is None:
            return False
        for ci in list(self._ci_handles(gi)):
            self._call(N.nvmlComputeInstanceDestroy, ci)
        for attempt in range(self.destroy_retries):
            try:
                self._call(N.nvmlGpuInstanceDestroy, gi)
                return True
            except NvmlError as e:
                if e.kind != 'InUse' or attempt + 1 == self.destroy_retries:
                    raise
                time.sleep(self.retry_delay)
        return False

    # MIG changes need root: through the privsep daemon ----------------------

    def set_mig_mode(self, uuid, enabled):
        """direct_set_mig_mode() in the privsep daemon."""
        result = privileged.set_mig_mode(uuid, enabled)
        return tuple(result) if isinstance(result, list) else result

    def create_instance(self, uuid, profile_id, start,
                        compute_instance=True):
        """direct_create_instance() in the privsep daemon."""
        fields = privileged.create_gpu_instance(uuid, profile_id, start,
                                                compute_instance)
        return GpuInstance(**dict(fields, ci_ids=tuple(fields['ci_ids']),
                                  mig_uuids=tuple(fields['mig_uuids'])))

    def destroy_instance(self, uuid, gi_id):
        """direct_destroy_instance() in the privsep daemon."""
        return privileged.destroy_gpu_instance(
            uuid, gi_id, self.destroy_retries, self.retry_delay)

    # Persistence mode (the driver keeps a GPU open while it is on) --------

    @_locked
    def persistence_mode(self, uuid):
        """True when persistence mode is on (None: NVML cannot say)."""
        mode = self._call(self.N.nvmlDeviceGetPersistenceMode,
                          self._handle(uuid), default=None)
        return None if mode is None else bool(mode)

    @_locked
    def direct_set_persistence_mode(self, uuid, enabled):
        N = self.N
        self._call(N.nvmlDeviceSetPersistenceMode, self._handle(uuid),
                   N.NVML_FEATURE_ENABLED if enabled
                   else N.NVML_FEATURE_DISABLED)
        return bool(enabled)

    def set_persistence_mode(self, uuid, enabled):
        """direct_set_persistence_mode() in the privsep daemon."""
        return privileged.set_persistence_mode(uuid, enabled)

    # Telemetry -------------------------------------------------------------

    @_locked
    def telemetry(self, uuid):
        """What a metrics scrape shows of one GPU, read now. A reading the
        GPU or driver does not support (NotSupported, NoData, ...) is None;
        anything else (GpuIsLost, ...) raises NvmlError.

        processes: (pid, used bytes or None, GI id or None, CI id or None).
        """
        N = self.N
        h = self._handle(uuid)
        memory = self._call(N.nvmlDeviceGetMemoryInfo, h, N.nvmlMemory_v2,
                            default=None)
        if memory is None:
            memory = self._call(N.nvmlDeviceGetMemoryInfo, h, default=None)
        util = self._call(N.nvmlDeviceGetUtilizationRates, h, default=None)
        ecc = {}
        for kind, error_type in (
                ('corrected', N.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                ('uncorrected', N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            ecc[kind] = self._call(N.nvmlDeviceGetTotalEccErrors, h,
                                   error_type, N.NVML_VOLATILE_ECC,
                                   default=None)
        return {
            'memory_used': getattr(memory, 'used', None),
            'memory_total': getattr(memory, 'total', None),
            'memory_free': getattr(memory, 'free', None),
            'minor': self._call(N.nvmlDeviceGetMinorNumber, h,
                                default=None),
            'utilization_gpu': getattr(util, 'gpu', None),
            'utilization_memory': getattr(util, 'memory', None),
            'temperature_c': self._call(N.nvmlDeviceGetTemperature, h,
                                        N.NVML_TEMPERATURE_GPU,
                                        default=None),
            'power_mw': self._call(N.nvmlDeviceGetPowerUsage, h,
                                   default=None),
            'ecc_volatile_corrected': ecc['corrected'],
            'ecc_volatile_uncorrected': ecc['uncorrected'],
            'processes': self._telemetry_processes(h),
        }

    @_locked
    def consumer_telemetry(self, uuid):
        """What each consumer of one GPU uses, read now: its running vGPU
        instances, its MPS clients and per-process utilisation. A reading
        NVML does not give (not a vGPU host, MIG mode, no samples) is
        empty; GpuIsLost and the like raise NvmlError.

        vgpus: [{instance, uuid, vm_id, mdev_uuid, type_id, type_name,
        gi, fb_used, fb_total (bytes), sm_util, mem_util (%)}];
        mps_clients: [(pid, used bytes or None)];
        process_util: {pid: (sm %, memory %)}.
        """
        N = self.N
        h = self._handle(uuid)
        util = {}
        for s in self._call(N.nvmlDeviceGetVgpuUtilization, h, 0,
                            default=None) or ():
            util[s.vgpuInstance] = (s.smUtil.uiVal, s.memUtil.uiVal)
        vgpus = []
        for inst in self._call(N.nvmlDeviceGetActiveVgpus, h,
                               default=None) or ():
            inst = getattr(inst, 'value', inst)
            type_id = self._call(N.nvmlVgpuInstanceGetType, inst,
                                 default=None)
            vm = self._call(N.nvmlVgpuInstanceGetVmID, inst, default=None)
            gi = self._call(N.nvmlVgpuInstanceGetGpuInstanceId, inst,
                            default=None)
            sm, mem = util.get(inst, (None, None))
            vgpus.append({
                'instance': inst,
                'uuid': _text(self._call(N.nvmlVgpuInstanceGetUUID, inst,
                                         default=None)),
                'vm_id': _text(vm[0]) if vm else None,
                'mdev_uuid': _text(self._call(
                    N.nvmlVgpuInstanceGetMdevUUID, inst, default=None)),
                'type_id': type_id,
                'type_name': _text(self._call(
                    N.nvmlVgpuTypeGetName, type_id, default=None))
                if type_id is not None else None,
                'gi': None if gi is None or gi >= 0xFFFFFFFF else gi,
                'fb_used': self._call(self._fb_usage, inst, default=None),
                'fb_total': self._call(N.nvmlVgpuTypeGetFramebufferSize,
                                       type_id, default=None)
                if type_id is not None else None,
                'sm_util': sm, 'mem_util': mem})
        mps = self._call(N.nvmlDeviceGetMPSComputeRunningProcesses, h,
                         default=None) or ()
        samples = self._call(N.nvmlDeviceGetProcessUtilization, h, 0,
                             default=None) or ()
        return {
            'vgpus': vgpus,
            'mps_clients': [(p.pid, p.usedGpuMemory) for p in mps],
            'process_util': {s.pid: (s.smUtil, s.memUtil)
                             for s in samples}}

    def _fb_usage(self, instance):
        """nvmlVgpuInstanceGetFbUsage with the `unsigned long long *` of
        nvml.h (nvidia-ml-py's wrapper passes a 4-byte c_uint).
        """
        N = self.N
        used = ctypes.c_ulonglong(0)
        fn = N._nvmlGetFunctionPointer('nvmlVgpuInstanceGetFbUsage')
        N._nvmlCheckReturn(fn(ctypes.c_uint(instance), ctypes.byref(used)))
        return used.value

    def _telemetry_processes(self, h):
        """Processes with NVML's "not applicable" ids as None; in MIG mode
        a size the parent GPU does not give is read from the MIG device.
        """
        def _id(value):
            return None if value is None or value >= 0xFFFFFFFF else value

        procs = [(pid, used, _id(gi), _id(ci))
                 for pid, used, gi, ci in self._processes(h)]
        if not any(used is None and gi is not None
                   for _, used, gi, _ in procs):
            return procs
        N = self.N
        sizes = {}
        for i in range(self._call(N.nvmlDeviceGetMaxMigDeviceCount, h,
                                  default=0)):
            mig = self._call(N.nvmlDeviceGetMigDeviceHandleByIndex, h, i,
                             default=None)
            if mig is not None:
                sizes.update((pid, used) for pid, used, _, _
                             in self._processes(mig) if used is not None)
        return [(pid, sizes.get(pid) if used is None else used, gi, ci)
                for pid, used, gi, ci in procs]
