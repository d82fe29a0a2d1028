# SPDX-License-Identifier: Apache-2.0
"""The nvidia driver's root operations, and nothing else.

The agent runs as an unprivileged user. What needs root goes through
oslo.privsep, as in Nova, os-vif and os-brick: the first call starts
`privsep-helper` (through sudo or the command in [nvidia_privsep]
helper_command) as a daemon that keeps only the capabilities below, and
each entrypoint of this module runs there, its arguments and results
serialized. The entrypoints are narrow on purpose: a PCI address and a
driver name (both checked against their kernel spellings), never a free
path or a command line.

- rebind(): driver_override, unbind, drivers_probe of one function, each
  write bounded by a timeout (the nvidia driver's unbind waits until
  nothing holds the GPU);
- reset_function(): the kernel's PCI reset of one function (sysfs
  `reset`: FLR where the device supports it); driver_reset(): the nvidia
  driver's GPU reset (nvidia-smi --gpu-reset) where it does not;
- set_vgpu_type(): a VF's vGPU type (vGPU-Manager hosts);
- vfio_group_holders(): which processes hold /dev/vfio/<group> open
  (another user's /proc/<pid>/fd needs CAP_SYS_PTRACE);
- share_handles(): the share handle MPS clients carry in their
  environment (another user's /proc/<pid>/environ needs CAP_SYS_PTRACE
  too); only that one variable leaves the daemon, never an environment;
- set_mig_mode(), create_gpu_instance(), destroy_gpu_instance(): NVML's
  MIG changes, which need root or the mig/config capability;
- set_persistence_mode(): off before a GPU leaves the nvidia driver (it
  keeps the GPU open), on again when it comes back. The daemon
  opens NVML for the call and shuts it down after, so it never holds a
  GPU that the agent is about to unbind.

Simulated hosts (cyborg-aio's fake GPUs, the tests) have no root to
escalate to: the context runs in-process there (set_client_mode(False),
as oslo.privsep's and Nova's test fixtures do) and the fake kernel that
owns a simulated sysfs root applies the writes (simulate()); the code
around each write - checks, ordering, timeouts - is the same.
"""

import functools
import os
import re
import threading

from oslo_privsep import capabilities as caps
from oslo_privsep import priv_context

from cyborg.drivers.nvidia import holders
from cyborg.drivers.nvidia import mps

context = priv_context.PrivContext(
    __name__,
    cfg_section='nvidia_privsep',
    pypath=__name__ + '.context',
    capabilities=[caps.CAP_SYS_ADMIN,       # PCI reset, MIG changes
                  caps.CAP_DAC_OVERRIDE,    # root-owned sysfs files
                  caps.CAP_SYS_PTRACE],     # other users' /proc/<pid>/
                                            # fd and environ
)

_ADDRESS = re.compile(r'^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')
_DRIVER = re.compile(r'^[a-z0-9][a-z0-9_-]{0,63}$')
_GPU_UUID = re.compile(r'^GPU-[0-9a-f-]{36}$')

# Simulated sysfs roots → the fake kernel that applies writes under them
# (an object with write(path, value)); empty in a real daemon.
_KERNELS = {}


class PrivilegedError(Exception):
    """A privileged operation was refused or did not finish."""


_acting = threading.local()


def acting():
    """True while this thread runs a privileged entrypoint (in the privsep
    daemon, or in-process on a simulated host), or the process is root:
    what a fake that refuses non-root callers (NVML's NO_PERMISSION for
    MIG changes) asks.
    """
    return getattr(_acting, 'depth', 0) > 0 or os.geteuid() == 0


def _root_side(func):
    """Mark the thread as acting with privileges while `func` runs."""
    @functools.wraps(func)
    def run(*args, **kwargs):
        _acting.depth = getattr(_acting, 'depth', 0) + 1
        try:
            return func(*args, **kwargs)
        finally:
            _acting.depth -= 1
    return run


def simulate(root, kernel):
    """Let `kernel` apply the writes under a simulated sysfs root, and run
    the entrypoints in this process (a fake host has no root to gain).
    """
    _KERNELS[os.path.abspath(root)] = kernel
    context.set_client_mode(False)


def unsimulate(root):
    _KERNELS.pop(os.path.abspath(root), None)


# Checks ------------------------------------------------------------------

def _address(value):
    if not isinstance(value, str) or not _ADDRESS.match(value):
        raise PrivilegedError('not a PCI address: %r' % (value,))
    return value


def _driver(value):
    if not isinstance(value, str) or not _DRIVER.match(value):
        raise PrivilegedError('not a kernel driver name: %r' % (value,))
    return value


def _root(value):
    """An absolute directory with the layout of sysfs or procfs."""
    if not isinstance(value, str) or not os.path.isabs(value) \
            or '..' in value.split(os.sep) or not os.path.isdir(value):
        raise PrivilegedError('not a filesystem root: %r' % (value,))
    return os.path.abspath(value)


# Bounded writes ----------------------------------------------------------

def _write(root, path, value, timeout):
    """Write `value` to a sysfs control file, giving up after `timeout`
    seconds. A write the kernel blocks (the nvidia driver's remove waits
    for its usage count to drop) stays pending in its thread: the kernel
    may complete it later.
    """
    kernel = _KERNELS.get(root)
    outcome = {}

    def run():
        try:
            if kernel is not None:
                kernel.write(path, value)
            else:
                with open(path, 'w') as f:
                    f.write(value)
        except OSError as e:
            outcome['error'] = e
        outcome['done'] = True

    worker = threading.Thread(target=run, daemon=True,
                              name='sysfs-write')
    worker.start()
    worker.join(timeout)
    if not outcome.get('done'):
        raise PrivilegedError(
            'writing %s to %s did not finish within %gs' % (
                value, os.path.relpath(path, root), timeout))
    if 'error' in outcome:
        raise PrivilegedError('writing %s to %s: %s' % (
            value, os.path.relpath(path, root), outcome['error']))


def _bound(root, address):
    try:
        return os.path.basename(os.readlink(os.path.join(
            root, 'bus', 'pci', 'devices', address, 'driver')))
    except OSError:
        return None


@context.entrypoint
@_root_side
def rebind(root, address, driver, timeout):
    """Hand one PCI function to `driver` ('' for none): driver_override,
    unbind from its current driver, drivers_probe. Returns the driver it
    is bound to afterwards ('' for none).
    """
    root = _root(root)
    address = _address(address)
    if driver:
        _driver(driver)
    device = os.path.join(root, 'bus', 'pci', 'devices', address)
    if not os.path.isdir(device):
        raise PrivilegedError('no PCI function %s' % address)
    current = _bound(root, address)
    # An override that names no driver keeps the function unbound when
    # something probes it later ("none" matches no driver).
    _write(root, os.path.join(device, 'driver_override'),
           driver or 'none', timeout)
    if current:
        _write(root, os.path.join(root, 'bus', 'pci', 'drivers', current,
                                  'unbind'), address, timeout)
    if driver:
        _write(root, os.path.join(root, 'bus', 'pci', 'drivers_probe'),
               address, timeout)
    return _bound(root, address) or ''


@context.entrypoint
@_root_side
def reset_function(root, address, timeout):
    """The kernel's reset of one PCI function (sysfs `reset`, present when
    the device has a reset method; `reset_method` lists them, FLR first
    where supported). Returns the methods the kernel offered ('' when it
    does not say), or raises when the device has no reset.
    """
    root = _root(root)
    address = _address(address)
    device = os.path.join(root, 'bus', 'pci', 'devices', address)
    if not os.path.exists(os.path.join(device, 'reset')):
        raise PrivilegedError('%s has no PCI reset method' % address)
    try:
        with open(os.path.join(device, 'reset_method')) as f:
            methods = f.read().strip()
    except OSError:
        methods = ''
    _write(root, os.path.join(device, 'reset'), '1', timeout)
    return methods


@context.entrypoint
@_root_side
def set_vgpu_type(root, address, type_id, timeout):
    """Configure a VF with a vGPU type (the vGPU Manager's
    <VF>/nvidia/current_vgpu_type; 0 clears it).
    """
    root = _root(root)
    address = _address(address)
    if not isinstance(type_id, int) or type_id < 0:
        raise PrivilegedError('not a vGPU type id: %r' % (type_id,))
    _write(root, os.path.join(root, 'bus', 'pci', 'devices', address,
                              'nvidia', 'current_vgpu_type'),
           str(type_id), timeout)


@context.entrypoint
@_root_side
def driver_reset(root, address, timeout):
    """The nvidia driver's own GPU reset (`nvidia-smi --gpu-reset`), for
    a GPU whose function offers no PCI reset. The GPU must be on the
    nvidia driver and nothing may hold it (NVML clients included).
    `root` only names the sysfs the GPU lives in (a simulated host
    resets its fake GPU instead).
    """
    root = _root(root)
    address = _address(address)
    kernel = _KERNELS.get(root)
    if kernel is not None:
        try:
            kernel.gpu_reset(address)
        except OSError as e:
            raise PrivilegedError('GPU reset of %s: %s' % (address, e))
        return
    from oslo_concurrency import processutils
    try:
        processutils.execute('nvidia-smi', '--gpu-reset', '-i', address,
                             timeout=timeout)
    except (processutils.ProcessExecutionError, OSError) as e:
        raise PrivilegedError('nvidia-smi --gpu-reset -i %s: %s'
                              % (address, e))


@context.entrypoint
@_root_side
def vfio_group_holders(proc_root, group):
    """PIDs of the processes with /dev/vfio/<group> open (a VM's QEMU).
    A process that exits during the scan is skipped; any other error
    propagates, so that the caller fails closed.
    """
    proc_root = _root(proc_root)
    if not isinstance(group, int) or group < 0:
        raise PrivilegedError('not an IOMMU group: %r' % (group,))
    return [pid for pid, _ in holders.holding(
        '/dev/vfio/%d' % group, proc_root, strict=True)]


@context.entrypoint
@_root_side
def share_handles(proc_root, pids):
    """The CYBORG_SHARE_HANDLE of each process in `pids`, in order: None
    for one that exited, whose environ cannot be read, or that has none.
    """
    proc_root = _root(proc_root)
    if not isinstance(pids, (list, tuple)):
        raise PrivilegedError('not a list of PIDs: %r' % (pids,))
    for pid in pids:
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise PrivilegedError('not a PID: %r' % (pid,))
    return [mps.read_share_handle(proc_root, pid) for pid in pids]


# NVML --------------------------------------------------------------------

def _nvml(**kwargs):
    """An NVML session of the daemon's own, for one call."""
    from cyborg.drivers.nvidia import backend
    session = backend.PynvmlBackend(**kwargs)
    session.open()
    return session


def _uuid(value):
    if not isinstance(value, str) or not _GPU_UUID.match(value):
        raise PrivilegedError('not a GPU UUID: %r' % (value,))
    return value


@context.entrypoint
@_root_side
def set_mig_mode(uuid, enabled):
    """Ask NVML for MIG mode on/off; returns what the backend's
    direct_set_mig_mode returns (plain values).
    """
    session = _nvml()
    try:
        return session.direct_set_mig_mode(_uuid(uuid), bool(enabled))
    finally:
        session.close()


@context.entrypoint
@_root_side
def create_gpu_instance(uuid, profile_id, start, compute_instance=True):
    """A GPU instance (and, unless told not to, its compute instance) at
    an explicit placement; returns the GpuInstance's fields.
    """
    session = _nvml()
    try:
        gi = session.direct_create_instance(_uuid(uuid), int(profile_id),
                                            int(start),
                                            bool(compute_instance))
    finally:
        session.close()
    return {'gi_id': gi.gi_id, 'profile_id': gi.profile_id,
            'start': gi.start, 'size': gi.size, 'ci_ids': list(gi.ci_ids),
            'mig_uuids': list(gi.mig_uuids)}


@context.entrypoint
@_root_side
def destroy_gpu_instance(uuid, gi_id, retries, retry_delay):
    """Destroy a GPU instance with its compute instances (a GI briefly
    still in use is retried); True when one was there.
    """
    session = _nvml(destroy_retries=max(1, int(retries)),
                    retry_delay=max(0.0, float(retry_delay)))
    try:
        return bool(session.direct_destroy_instance(_uuid(uuid),
                                                    int(gi_id)))
    finally:
        session.close()


@context.entrypoint
@_root_side
def set_persistence_mode(uuid, enabled):
    """Persistence mode on/off (nvidia-smi -pm); returns the mode set."""
    session = _nvml()
    try:
        return session.direct_set_persistence_mode(_uuid(uuid),
                                                   bool(enabled))
    finally:
        session.close()
