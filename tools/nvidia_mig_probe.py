# SPDX-License-Identifier: Apache-2.0
"""What NVML decides for MIG on one idle GPU (GPU-to-VM contract §6), read
by changing it: the opt-in `--mutate` half of tools/nvidia_host_check.py.

On a GPU the operator owns and nothing uses: enable MIG and record
`activationStatus`; create and destroy every profile at every placement
(GI id, the compute-instance profiles the GI offers, the MIG UUID, again
on re-create); automatic placement (no placement given) per profile and
for the MIG user guide's mixed sequences; an overlap error; destroying a
GI that still has a CI; the supported event mask; MIG mode back as it
was.  The result is a fixture the fake NVML's tests replay
(tests/drivers/nvidia/test_mig_fixtures.py).  It stops at a deadline and
always tries to leave the GPU as it found it.
"""

import ctypes
import time

import pynvml as N

# The MIG user guide's automatic-placement examples ("Getting Started
# with MIG"), as profile ids.
SEQUENCES = ((19, 14, 5), (9, 19, 14, 19), (14, 19, 19, 19, 19, 19),
             (19, 19, 14, 9))
CI_ENUMS = (N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
            N.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
            N.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
            N.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
            N.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
            N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1)
SHARED = N.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED


class Refused(Exception):
    """The GPU is not one this probe may change; the message says why."""


class OutOfTime(Exception):
    pass


def _kind(exc):
    return type(exc).__name__.replace('NVMLError_', '')


class Probe:

    def __init__(self, handle, deadline_s=270.0, clock=time.monotonic):
        self.h = handle
        self.clock = clock
        self.deadline = clock() + deadline_s
        self.made = []          # GI handles to destroy on the way out

    def _tick(self):
        if self.clock() > self.deadline:
            raise OutOfTime('the probe ran past its deadline')

    # -- the GPU's GI/CI state, whole --------------------------------------

    def profiles(self):
        """[(profile id, [starts], size)] NVML lists."""
        out = []
        for enum in range(N.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = N.nvmlDeviceGetGpuInstanceProfileInfo(self.h, enum)
            except N.NVMLError:
                continue
            count = ctypes.c_uint(0)
            N.nvmlDeviceGetGpuInstancePossiblePlacements(
                self.h, info.id, None, ctypes.byref(count))
            arr = (N.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
            N.nvmlDeviceGetGpuInstancePossiblePlacements(
                self.h, info.id, arr, ctypes.byref(count))
            placements = [(arr[i].start, arr[i].size)
                          for i in range(count.value)]
            if placements:
                out.append((info.id, [s for s, _ in placements],
                            placements[0][1]))
        return out

    def gis(self):
        """Every GI handle on the GPU."""
        out = []
        for profile_id, _, _ in self.profiles():
            count = ctypes.c_uint(0)
            arr = (N.c_nvmlGpuInstance_t * 8)()
            N.nvmlDeviceGetGpuInstances(self.h, profile_id, arr,
                                        ctypes.byref(count))
            out += [arr[i] for i in range(count.value)]
        return out

    # -- one GI ------------------------------------------------------------

    def create(self, profile_id, start=None, size=None):
        self._tick()
        if start is None:
            gi = N.nvmlDeviceCreateGpuInstance(self.h, profile_id)
        else:
            placement = N.c_nvmlGpuInstancePlacement_t(start, size)
            gi = N.nvmlDeviceCreateGpuInstanceWithPlacement(
                self.h, profile_id, ctypes.byref(placement))
        self.made.append(gi)
        return gi

    def ci_profiles(self, gi):
        """{CI profile enum: instance count or the error kind}: what
        `nvidia-smi mig -lcip` lists for the GI.
        """
        out = {}
        for enum in CI_ENUMS:
            try:
                info = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, enum, SHARED)
                out[str(enum)] = info.instanceCount
            except N.NVMLError as e:
                out[str(enum)] = _kind(e)
        return out

    @staticmethod
    def full_ci(gi):
        best = None
        for enum in CI_ENUMS[:-1]:
            try:
                info = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, enum, SHARED)
            except N.NVMLError:
                continue
            if best is None or info.sliceCount > best.sliceCount:
                best = info
        return N.nvmlGpuInstanceCreateComputeInstance(gi, best.id)

    def mig_uuid(self, gi_id, ci_id):
        for i in range(N.nvmlDeviceGetMaxMigDeviceCount(self.h)):
            try:
                mig = N.nvmlDeviceGetMigDeviceHandleByIndex(self.h, i)
            except N.NVMLError:
                continue
            if (N.nvmlDeviceGetGpuInstanceId(mig),
                    N.nvmlDeviceGetComputeInstanceId(mig)) == (gi_id, ci_id):
                return N.nvmlDeviceGetUUID(mig)
        return None

    def destroy(self, gi):
        for enum in CI_ENUMS:
            count = ctypes.c_uint(0)
            arr = (N.c_nvmlComputeInstance_t * 8)()
            try:
                N.nvmlGpuInstanceGetComputeInstances(gi, enum, arr,
                                                     ctypes.byref(count))
            except N.NVMLError:
                continue
            for i in range(count.value):
                N.nvmlComputeInstanceDestroy(arr[i])
        N.nvmlGpuInstanceDestroy(gi)
        self.made = [g for g in self.made
                     if ctypes.addressof(g.contents)
                     != ctypes.addressof(gi.contents)]

    def cleanup(self):
        for gi in list(self.made):
            try:
                self.destroy(gi)
            except N.NVMLError:
                pass
        self.made = []

    # -- the steps of contract §6 ------------------------------------------

    def each_placement(self):
        out = []
        first = None
        for profile_id, starts, size in self.profiles():
            for start in starts:
                gi = self.create(profile_id, start, size)
                info = N.nvmlGpuInstanceGetInfo(gi)
                ci = self.full_ci(gi)
                ci_id = N.nvmlComputeInstanceGetInfo(ci).id
                row = {'profile_id': profile_id, 'start': start,
                       'size': size, 'gi_id': info.id,
                       'ci_profiles': self.ci_profiles(gi),
                       'mig_uuid': self.mig_uuid(info.id, ci_id)}
                out.append(row)
                if first is None:
                    first = row
                    try:
                        N.nvmlGpuInstanceDestroy(gi)
                        row['destroy_with_ci'] = 'Success'
                        self.made.pop()
                        continue
                    except N.NVMLError as e:
                        row['destroy_with_ci'] = _kind(e)
                self.destroy(gi)
        again = self.create(first['profile_id'], first['start'],
                            first['size'])
        info = N.nvmlGpuInstanceGetInfo(again)
        ci = self.full_ci(again)
        uuid = self.mig_uuid(info.id, N.nvmlComputeInstanceGetInfo(ci).id)
        first['recreated'] = {'gi_id': info.id, 'mig_uuid': uuid,
                              'same_uuid': uuid == first['mig_uuid']}
        self.destroy(again)
        return out

    def automatic(self, profile_ids):
        """[(GI id, start)] of creates without a placement, then the error
        that stopped them (as its kind).
        """
        out = []
        for profile_id in profile_ids:
            try:
                gi = self.create(profile_id)
            except N.NVMLError as e:
                out.append(_kind(e))
                break
            info = N.nvmlGpuInstanceGetInfo(gi)
            out.append([info.id, info.placement.start])
        self.cleanup()
        return out

    def overlap(self, profiles):
        """Creating a GI over another one's slices."""
        small = min(profiles, key=lambda p: p[2])
        big = max(profiles, key=lambda p: p[2])
        self.create(small[0], small[1][0], small[2])
        try:
            self.create(big[0], big[1][0], big[2])
            kind = 'Success'
        except N.NVMLError as e:
            kind = _kind(e)
        self.cleanup()
        return {'first': [small[0], small[1][0]],
                'second': [big[0], big[1][0]], 'error': kind}


def set_mode(h, mode):
    """{status, current, pending}: activationStatus as its kind."""
    status = N.nvmlDeviceSetMigMode(h, mode)
    current, pending = N.nvmlDeviceGetMigMode(h)
    return {'activation': 'Success' if status == N.NVML_SUCCESS
            else _kind(N.NVMLError(status)),
            'current': current, 'pending': pending}


def run(h, deadline_s=270.0, clock=time.monotonic):
    """Contract §6 on the GPU behind handle `h`; the fixture dict.
    Refused when the GPU is in use or already has GPU instances.
    """
    began = clock()
    if N.nvmlDeviceGetComputeRunningProcesses(h):
        raise Refused('processes use the GPU')
    current, pending = N.nvmlDeviceGetMigMode(h)
    probe = Probe(h, deadline_s, clock)
    if current and probe.gis():
        raise Refused('the GPU already has GPU instances: destroy them '
                      'first (this probe never touches what it did not '
                      'make)')
    out = {'mig_mode_before': [current, pending],
           'supported_event_types': N.nvmlDeviceGetSupportedEventTypes(h)}
    out['mig_enable'] = set_mode(h, N.NVML_DEVICE_MIG_ENABLE)
    try:
        if out['mig_enable']['current'] != 1:
            out['stopped'] = 'MIG mode did not apply at once'
            return out
        profiles = probe.profiles()
        out['profiles'] = [{'id': p, 'starts': s, 'size': z}
                           for p, s, z in profiles]
        out['placements'] = probe.each_placement()
        out['automatic'] = {str(p): probe.automatic([p] * 8)
                            for p, _, _ in profiles}
        out['sequences'] = {','.join(map(str, seq)): probe.automatic(seq)
                            for seq in SEQUENCES
                            if all(p in {q for q, _, _ in profiles}
                                   for p in seq)}
        out['overlap'] = probe.overlap(profiles)
    except OutOfTime as e:
        out['stopped'] = str(e)
    finally:
        probe.cleanup()
        if not current:
            out['mig_disable'] = set_mode(h, N.NVML_DEVICE_MIG_DISABLE)
        out['elapsed_s'] = round(clock() - began, 3)
    return out
