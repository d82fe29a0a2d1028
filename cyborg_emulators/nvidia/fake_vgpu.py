# SPDX-License-Identifier: Apache-2.0
"""The NVIDIA vGPU Manager side of a fake GPU host: host vGPU mode in
NVML, the vGPU type catalog, and the vGPU types on the SR-IOV VFs in
sysfs.

A host spec GPU with a `vgpu_manager` section is a vGPU-Manager GPU
(contract gpu-to-vm.md §1): NVML says virtualization mode HOST_VGPU and
host vGPU mode SR-IOV, and its VFs carry the vGPU types in one of the two
layouts of §2::

    vgpu_manager:
      layout: vfio        # vfio: <VF>/nvidia/{creatable,current}_vgpu_type
                          # mdev: <VF>/mdev_supported_types/nvidia-NNN/
      heterogeneous: false  # mixed time-sliced sizes on one GPU

What is creatable on a VF follows the vGPU Manager's rules: a configured
VF offers nothing more (kubevirt-gpu-device-plugin README: "on a fully
consumed card that catalog is reduced to its header"); MIG-backed types
need MIG mode on and a GPU instance of their profile that no vGPU uses
yet (NVIDIA vgpu-device-manager applies the MIG layout before creating
the vGPUs); time-sliced types need MIG mode off and, unless the GPU is
in heterogeneous mode, the same type as every other time-sliced vGPU of
the GPU (NVIDIA vGPU docs, "equal-size mode"), at most max_instances.
"""

import collections
import dataclasses
import os

import pynvml as N

from cyborg_emulators.nvidia import sysfs_files as files

NO_PROFILE = 0xFFFFFFFF     # nvmlVgpuTypeGetGpuInstanceProfileId, not MIG
# The header creatable_vgpu_types keeps when nothing more is creatable.
CREATABLE_HEADER = 'ID    : vGPU Name'
LAYOUTS = ('vfio', 'mdev')


@dataclasses.dataclass(frozen=True)
class VgpuType:
    id: int
    name: str
    framebuffer_mib: int
    max_instances: int
    gi_profile_id: int = NO_PROFILE   # MIG-backed: the GI profile

    @property
    def mig_backed(self):
        return self.gi_profile_id != NO_PROFILE


def _mig(tid, name, gib, count, gi):
    return VgpuType(tid, name, gib * 1024, count, gi)


def _sliced(tid, name, gib, count):
    return VgpuType(tid, name, gib * 1024, count)


# vGPU type catalogs per model file. Names: NVIDIA vGPU for Compute docs
# ("MIG-Backed NVIDIA vGPU for Compute for NVIDIA H200": H200-1-18C ...
# H200-7-141C with their GI profiles and per-GPU maximum; the HGX board
# is named H200X, "NVIDIA HGX H200 | NVIDIA H200X-141C"). Type ids 1414
# (NVIDIA H200X-1-18C) and 1428 (NVIDIA H200X-141C) are the ones
# NVIDIA/vgpu-device-manager's vfio tests and NVIDIA/kubevirt-gpu-device-
# plugin's README show on an H200 VF; the other ids are this fixture's
# own (no public list found) and only need to be distinct. Framebuffer
# sizes are nominal GiB × 1024. A100 80GB ("A100D"): nvidia-699 = GRID
# A100D-1-10C and nvidia-700 = GRID A100D-2-20C (kayobe's vGPU guide,
# contract §2); the other A100D ids are the fixture's own.
CATALOGS = {
    'h200': (
        _mig(1414, 'NVIDIA H200X-1-18C', 18, 7, 19),
        _mig(1415, 'NVIDIA H200X-1-18CME', 18, 1, 20),
        _mig(1416, 'NVIDIA H200X-1-35C', 35, 4, 15),
        _mig(1417, 'NVIDIA H200X-2-35C', 35, 3, 14),
        _mig(1418, 'NVIDIA H200X-3-71C', 71, 2, 9),
        _mig(1419, 'NVIDIA H200X-4-71C', 71, 1, 5),
        _mig(1420, 'NVIDIA H200X-7-141C', 141, 1, 0),
        _sliced(1426, 'NVIDIA H200X-35C', 35, 4),
        _sliced(1427, 'NVIDIA H200X-70C', 70, 2),
        _sliced(1428, 'NVIDIA H200X-141C', 141, 1),
    ),
    'a100-80gb': (
        _mig(699, 'GRID A100D-1-10C', 10, 7, 19),
        _mig(700, 'GRID A100D-2-20C', 20, 3, 14),
        _mig(701, 'GRID A100D-3-40C', 40, 2, 9),
        _mig(702, 'GRID A100D-4-40C', 40, 1, 5),
        _mig(703, 'GRID A100D-7-80C', 80, 1, 0),
        _sliced(706, 'GRID A100D-20C', 20, 4),
        _sliced(707, 'GRID A100D-40C', 40, 2),
        _sliced(708, 'GRID A100D-80C', 80, 1),
    ),
}


def catalog(model):
    try:
        return CATALOGS[os.path.basename(str(model)).removesuffix('.json')]
    except KeyError:
        raise ValueError('no vGPU type catalog for GPU model %s' % model)


class VgpuManager:
    """The vGPU Manager of one GPU: its catalog, layout and which VF holds
    which type. `gpu` is the fake NVML GPU (MIG mode and instances).
    """

    def __init__(self, gpu, section, model):
        self.gpu = gpu
        self.layout = section.get('layout', 'vfio')
        if self.layout not in LAYOUTS:
            raise ValueError('vgpu_manager layout must be one of %s'
                             % ', '.join(LAYOUTS))
        self.heterogeneous = bool(section.get('heterogeneous', False))
        self.types = {t.id: t for t in catalog(model)}
        self.vfs = []               # VF addresses, set by the sysfs tree
        self.current = {}           # VF → type id configured on it

    # What the vGPU Manager allows -----------------------------------------

    def _free_gis(self, profile_id):
        gis = sum(gi.profile.id == profile_id for gi in self.gpu.gis.values())
        used = sum(self.types[t].gi_profile_id == profile_id
                   for t in self.current.values())
        return gis - used

    def creatable(self, vf):
        """The type ids a VF can be configured with now."""
        if self.current.get(vf):
            return []
        mig_on = bool(self.gpu.mig and self.gpu.mig[0])
        live = collections.Counter(self.current.values())
        sliced = {t for t in live if not self.types[t].mig_backed}
        out = []
        for t in self.types.values():
            if t.mig_backed:
                ok = mig_on and self._free_gis(t.gi_profile_id) > 0
            else:
                ok = (not mig_on and not self.gpu.gis
                      and live[t.id] < t.max_instances
                      and (self.heterogeneous or sliced <= {t.id})
                      and not any(self.types[x].mig_backed for x in live))
            if ok:
                out.append(t.id)
        return out

    def configure(self, vf, type_id):
        """current_vgpu_type ← type_id (0 clears); False when refused."""
        if type_id == 0:
            self.current.pop(vf, None)
            return True
        if type_id not in self.creatable(vf):
            return False
        self.current[vf] = type_id
        return True

    def state(self):
        return {vf: t for vf, t in sorted(self.current.items())}

    def reboot(self):
        """A host reboot: no VF keeps its vGPU type (NVIDIA's
        vgpu-device-manager re-applies its configuration at every boot, as
        it does the MIG layout; the vGPU Manager keeps none).
        """
        self.current.clear()


class VgpuSymbols:
    """The NVML symbols of host vGPU mode and vGPU types, mixed into the
    fake library (fake_nvml._Library). A GPU without a vGPU Manager
    answers NotSupported, as a data-center driver does.
    """

    @staticmethod
    def _manager(dev):
        manager = getattr(dev, 'vgpu', None)
        if manager is None:
            raise _NotSupported()
        return manager

    def _type(self, type_id):
        wanted = type_id.value if hasattr(type_id, 'value') else type_id
        for gpu in self.fake._gpus:
            manager = getattr(gpu, 'vgpu', None)
            if manager is not None and wanted in manager.types:
                return manager.types[wanted]
        raise _Invalid()

    def nvmlDeviceGetHostVgpuMode(self, dev, out):
        self._manager(dev)
        _set(out, N.NVML_HOST_VGPU_MODE_SRIOV)

    def nvmlDeviceGetVgpuHeterogeneousMode(self, dev, out):
        _deref(out).mode = int(self._manager(dev).heterogeneous)

    def nvmlDeviceGetSupportedVgpus(self, dev, count, ids):
        types = sorted(self._manager(dev).types)
        room = _deref(count).value
        _set(count, len(types))
        if ids is None or room < len(types):
            raise _InsufficientSize()
        for i, type_id in enumerate(types):
            ids[i] = type_id

    def _running_type(self, type_id):
        """A type only a running vGPU instance of fake_consumer_telemetry
        names (a GPU whose spec has no catalog), else None.
        """
        from cyborg_emulators.nvidia import fake_consumer_telemetry
        try:
            return fake_consumer_telemetry._type(self, type_id)
        except Exception:
            return None

    def nvmlVgpuTypeGetName(self, type_id, buf, size):
        try:
            name = self._type(type_id).name
        except _Invalid:
            running = self._running_type(type_id)
            if running is None:
                raise
            name = running['type_name']
        name = name.encode()
        if len(name) + 1 > _deref(size).value:
            raise _InsufficientSize()
        buf.value = name

    def nvmlVgpuTypeGetFramebufferSize(self, type_id, out):
        try:
            _set(out, self._type(type_id).framebuffer_mib << 20)
        except _Invalid:
            running = self._running_type(type_id)
            if running is None:
                raise
            _set(out, running['fb_size'])

    def nvmlVgpuTypeGetMaxInstances(self, dev, type_id, out):
        self._manager(dev)
        _set(out, self._type(type_id).max_instances)

    def nvmlVgpuTypeGetGpuInstanceProfileId(self, type_id, out):
        _set(out, self._type(type_id).gi_profile_id)


# The fake library's error plumbing, without importing it (it imports us).
class NvmlCode(Exception):
    code = N.NVML_ERROR_UNKNOWN


class _NotSupported(NvmlCode):
    code = N.NVML_ERROR_NOT_SUPPORTED


class _Invalid(NvmlCode):
    code = N.NVML_ERROR_INVALID_ARGUMENT


class _InsufficientSize(NvmlCode):
    code = N.NVML_ERROR_INSUFFICIENT_SIZE


def _deref(ref):
    if hasattr(ref, '_obj'):
        return ref._obj
    return ref.contents


def _set(ref, value):
    _deref(ref).value = value


# Sysfs -------------------------------------------------------------------

def settle(devices_dir, manager):
    """Apply what was written to the VFs' files, then show the state."""
    if manager.layout == 'vfio':
        settle_vfio(devices_dir, manager)
    else:
        settle_mdev(devices_dir, manager)
    for vf in manager.vfs:
        write_vf(devices_dir, vf, manager)


def reboot(devices_dir, manager):
    """The VFs' vGPU files after a host reboot (manager.reboot() done):
    no type configured, and no mdev (the kernel keeps none; a persistent
    one is libvirt's to re-create, i.e. Nova's).
    """
    for vf in manager.vfs:
        for uuid in mdevs(devices_dir, vf):
            _remove_mdev(devices_dir, vf, uuid)
        write_vf(devices_dir, vf, manager)


def write_vf(devices_dir, vf, manager):
    """Write (again) the vGPU files of one VF for its manager's layout."""
    path = os.path.join(devices_dir, vf)
    creatable = set(manager.creatable(vf))
    if manager.layout == 'vfio':
        folder = os.path.join(path, 'nvidia')
        os.makedirs(folder, exist_ok=True)
        lines = [CREATABLE_HEADER] + [
            '%d : %s' % (t, manager.types[t].name) for t in sorted(creatable)]
        files.show(os.path.join(folder, 'creatable_vgpu_types'),
                   '\n'.join(lines))
        current = os.path.join(folder, 'current_vgpu_type')
        files.show(current, manager.current.get(vf, 0))
        return
    for t in manager.types.values():
        folder = os.path.join(path, 'mdev_supported_types', 'nvidia-%d' % t.id)
        if not os.path.isdir(folder):
            os.makedirs(folder)
            files.write(os.path.join(folder, 'name'), t.name)
            files.write(os.path.join(folder, 'description'),
                        'num_heads=1, frl_config=60, framebuffer=%dM, '
                        'max_resolution=4096x2160, max_instance=%d'
                        % (t.framebuffer_mib, t.max_instances))
            files.write(os.path.join(folder, 'device_api'), 'vfio-pci')
            files.write(os.path.join(folder, 'create'), '')
        files.show(os.path.join(folder, 'available_instances'),
                   int(t.id in creatable))


def settle_vfio(devices_dir, manager):
    """Apply current_vgpu_type writes like the vGPU Manager: a type that is
    not creatable is refused (the file goes back to what it was).
    """
    for vf in manager.vfs:
        path = os.path.join(devices_dir, vf, 'nvidia', 'current_vgpu_type')
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        try:
            wanted = int(text or 0)
        except ValueError:
            wanted = -1
        if wanted >= 0 and wanted != manager.current.get(vf, 0):
            manager.configure(vf, wanted)


def settle_mdev(devices_dir, manager):
    """Make the vGPU Manager's state follow the VFs' mdevs: apply `create`
    and `remove` writes still pending (FakeGpuHost.create_mdev writes and
    then settles), then count each mdev under a VF as its type configured
    there. The mdevs themselves are the kernel's record (a create or
    remove takes effect at the write, see apply_mdev_writes), so a writer
    in another process (the Nova side, KernelMdevCreator) and an agent
    restart both see the same state. An mdev the manager refuses (its GPU
    instance is gone) is removed, as the vendor driver would have refused
    the create.
    """
    for vf in manager.vfs:
        apply_mdev_writes(devices_dir, vf, lambda vf, t: (
            manager.current.get(vf) == t or
            t in manager.creatable(vf)))
        present = mdevs(devices_dir, vf)
        wanted = next(iter(present.values()), 0)
        if manager.current.get(vf, 0) == wanted:
            continue
        manager.configure(vf, 0)
        if wanted and not manager.configure(vf, wanted):
            for uuid in present:
                _remove_mdev(devices_dir, vf, uuid)


def mdevs(devices_dir, vf):
    """{mdev uuid: type id} of the mdevs under one VF."""
    out = {}
    path = os.path.join(devices_dir, vf)
    for entry in sorted(os.listdir(path)) if os.path.isdir(path) else []:
        link = os.path.join(path, entry, 'mdev_type')
        if os.path.islink(link):
            out[entry] = int(os.readlink(link).rsplit('-', 1)[1])
    return out


def apply_mdev_writes(devices_dir, vf, allowed=None):
    """The kernel's side of the mdev control files of one VF
    (Documentation/ABI/testing/sysfs-bus-vfio-mdev): a UUID written to
    mdev_supported_types/<type>/create makes the mdev <VF>/<UUID> before
    the write returns, or the write fails (the vendor driver refuses a
    type it has no instance left of: NVIDIA's `available_instances`);
    1 written to <VF>/<UUID>/remove removes it at once.

    allowed(vf, type id) says whether the vGPU Manager accepts the type
    (default: the type's available_instances as last published, and no
    mdev on the VF yet). Returns the (type dir name, UUID) creates refused.
    """
    path = os.path.join(devices_dir, vf)
    if allowed is None:
        def allowed(vf, type_id):
            available = files.read(os.path.join(
                path, 'mdev_supported_types', 'nvidia-%d' % type_id,
                'available_instances'))
            return not mdevs(devices_dir, vf) and available not in (
                None, '', '0')
    refused = []
    for entry in sorted(os.listdir(path)) if os.path.isdir(path) else []:
        remove = os.path.join(path, entry, 'remove')
        if os.path.isfile(remove) and files.take(remove) == '1':
            _remove_mdev(devices_dir, vf, entry)
    types_dir = os.path.join(path, 'mdev_supported_types')
    for name in sorted(os.listdir(types_dir)) \
            if os.path.isdir(types_dir) else []:
        uuid = files.take(os.path.join(types_dir, name, 'create'))
        if not uuid:
            continue
        mdev = os.path.join(path, uuid)
        if os.path.exists(mdev) or not allowed(vf, int(name.split('-')[1])):
            refused.append((name, uuid))
            continue
        try:
            os.makedirs(mdev)
        except FileExistsError:     # the same write, applied elsewhere
            continue
        files.write(os.path.join(mdev, 'remove'), '')
        os.symlink(os.path.join('..', 'mdev_supported_types', name),
                   os.path.join(mdev, 'mdev_type'))
        # A configured VF offers nothing more (see VgpuManager.creatable).
        for other in os.listdir(types_dir):
            files.show(os.path.join(types_dir, other,
                                    'available_instances'), 0)
    return refused


def _remove_mdev(devices_dir, vf, uuid):
    mdev = os.path.join(devices_dir, vf, uuid)
    for name in ('mdev_type', 'remove'):
        try:
            os.unlink(os.path.join(mdev, name))
        except FileNotFoundError:
            pass
    try:
        os.rmdir(mdev)
    except FileNotFoundError:       # removed by the same write elsewhere
        pass
