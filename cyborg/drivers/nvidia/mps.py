# SPDX-License-Identifier: Apache-2.0
"""The MPS control daemon of each GPU shared by MPS: what enforces an MPS
share's SM percent and memory.

One `nvidia-cuda-mps-control -d` per GPU, started by the agent with
CUDA_VISIBLE_DEVICES = the GPU's UUID (pinned to it) and a pipe and log
directory of its own (CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY),
so several daemons run side by side and a client picks its GPU by the
pipe directory alone. NVIDIA's MPS guide ("Appendix: Tools and Interface
Reference", docs.nvidia.com/deploy/mps) is the source of every fact used:

- the daemon's command language (one command per line on the control
  program's stdin, with the daemon's pipe directory in the environment):
  `get_server_list`, `set_default_active_thread_percentage <pct>` and
  `set_default_device_pinned_mem_limit <dev> <value>` (value: an integer
  followed by M or G; both defaults only reach servers spawned
  afterwards), `set_active_thread_percentage <server PID> <pct>` and
  `set_device_pinned_mem_limit <server PID> <dev> <value>` for servers
  already running (clients connecting afterwards), `quit`;
- a client's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
  CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("<dev>=<value>") only further
  constrain what the daemon set;
- memory and thread limits need Volta MPS (compute capability 7.0+).

So the daemon holds the ceiling (the largest share bound on the GPU, or
one slot's even share while none is), and each share's own limits go to
its consumer as the client environment in the attach info. The daemon
runs as the agent's user: no root is needed.
"""

import os
import shlex
import subprocess
import threading
import time

from oslo_log import log

LOG = log.getLogger(__name__)

MIN_COMPUTE_CAPABILITY = (7, 0)
# The daemon sees one GPU (CUDA_VISIBLE_DEVICES), so it is device 0 to
# the daemon and to every client that connects through its pipe.
DEVICE = 0
# ensure() runs on every report pass: a daemon seen alive is asked again
# (get_server_list) only after this many seconds or after a failed command.
RECHECK_AFTER = 60.0
HANDLE_VARIABLE = 'CYBORG_SHARE_HANDLE'


class MpsError(Exception):
    """The MPS control daemon could not be started or refused a command."""


def limit_value(memory_mb):
    """A pinned memory limit in the control language: '<MiB>M'."""
    return '%dM' % memory_mb


def supported(compute_capability):
    """Why MPS cannot enforce a share on a GPU of this compute
    capability, or None when it can.
    """
    cc = tuple(compute_capability or ())[:2]
    if cc < MIN_COMPUTE_CAPABILITY:
        return ('MPS memory and thread limits need compute capability '
                '7.0 or later; this GPU has %s'
                % '.'.join(str(n) for n in cc))
    return None


def _run(argv, env, stdin, timeout):
    """The real control program: (exit status, stdout + stderr)."""
    try:
        done = subprocess.run(argv, input=stdin, env=env, timeout=timeout,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    except (OSError, subprocess.SubprocessError) as e:
        return 127, str(e)
    return done.returncode, done.stdout


class MpsDaemons:
    """The MPS control daemons of this host, one per GPU UUID."""

    def __init__(self, root, command, timeout=15, runner=None):
        self.root = root
        self.command = shlex.split(command)
        self.timeout = timeout
        self._run = runner or _run
        self._lock = threading.Lock()
        self._ceilings = {}     # GPU UUID → (percent, MiB) last set
        self._seen = {}         # GPU UUID → when its daemon last answered

    def directories(self, gpu_uuid):
        """(pipe directory, log directory) of the GPU's daemon."""
        base = os.path.join(self.root, gpu_uuid)
        return os.path.join(base, 'pipe'), os.path.join(base, 'log')

    def _env(self, gpu_uuid):
        pipe, logs = self.directories(gpu_uuid)
        env = dict(os.environ)
        env.update(CUDA_VISIBLE_DEVICES=gpu_uuid,
                   CUDA_MPS_PIPE_DIRECTORY=pipe,
                   CUDA_MPS_LOG_DIRECTORY=logs)
        return env

    def control(self, gpu_uuid, *commands):
        """Send commands to the GPU's daemon; its answer. MpsError when
        the daemon is not there or refuses one.
        """
        rc, out = self._run(self.command, self._env(gpu_uuid),
                            ''.join(c + '\n' for c in commands),
                            self.timeout)
        if rc != 0:
            self._seen.pop(gpu_uuid, None)
            raise MpsError('MPS control of GPU %s refused %s: %s'
                           % (gpu_uuid, '; '.join(commands),
                              (out or '').strip() or 'exit %d' % rc))
        return out or ''

    def running(self, gpu_uuid):
        try:
            self.control(gpu_uuid, 'get_server_list')
        except MpsError:
            return False
        return True

    def servers(self, gpu_uuid):
        """PIDs of the MPS servers the GPU's daemon runs now."""
        out = self.control(gpu_uuid, 'get_server_list')
        return [int(word) for word in out.split() if word.isdigit()]

    def ensure(self, gpu_uuid, percent, memory_mb):
        """Start the GPU's daemon unless it runs (one left by an earlier
        agent is adopted), with the ceiling (percent, MiB) as defaults.
        """
        with self._lock:
            seen = self._seen.get(gpu_uuid)
            if seen is not None and time.monotonic() - seen < RECHECK_AFTER:
                return
            if self.running(gpu_uuid):
                if gpu_uuid not in self._ceilings:
                    self._apply(gpu_uuid, percent, memory_mb)
                self._seen[gpu_uuid] = time.monotonic()
                return
            for path in self.directories(gpu_uuid):
                os.makedirs(path, mode=0o755, exist_ok=True)
            rc, out = self._run(self.command + ['-d'], self._env(gpu_uuid),
                                '', self.timeout)
            if rc != 0:
                raise MpsError('the MPS control daemon of GPU %s did not '
                               'start: %s' % (gpu_uuid, (out or '').strip()
                                              or 'exit %d' % rc))
            LOG.info('Started the MPS control daemon of GPU %s', gpu_uuid)
            self._ceilings.pop(gpu_uuid, None)
            self._apply(gpu_uuid, percent, memory_mb)
            self._seen[gpu_uuid] = time.monotonic()

    def set_ceiling(self, gpu_uuid, percent, memory_mb):
        """Make (percent, MiB) what any client of the GPU gets at most:
        the daemon's defaults for servers to come and the limits of the
        servers running now (for their clients to come).
        """
        with self._lock:
            if self._ceilings.get(gpu_uuid) != (percent, memory_mb):
                self._apply(gpu_uuid, percent, memory_mb)

    def _apply(self, gpu_uuid, percent, memory_mb):
        value = limit_value(memory_mb)
        commands = ['set_default_active_thread_percentage %d' % percent,
                    'set_default_device_pinned_mem_limit %d %s'
                    % (DEVICE, value)]
        for pid in self.servers(gpu_uuid):
            commands += ['set_active_thread_percentage %d %d' % (pid, percent),
                         'set_device_pinned_mem_limit %d %d %s'
                         % (pid, DEVICE, value)]
        self.control(gpu_uuid, *commands)
        self._ceilings[gpu_uuid] = (percent, memory_mb)

    def stop(self, gpu_uuid):
        """Quit the GPU's daemon, if it runs."""
        with self._lock:
            self._ceilings.pop(gpu_uuid, None)
            self._seen.pop(gpu_uuid, None)
            if not self.running(gpu_uuid):
                return
            self.control(gpu_uuid, 'quit')
            LOG.info('Stopped the MPS control daemon of GPU %s', gpu_uuid)

    def client_env(self, gpu_uuid, percent, memory_mb, handle=None):
        """The environment a consumer of one share sets: the daemon's
        pipe directory (which selects the GPU), the share's limits and
        the attach handle it holds (CYBORG_SHARE_HANDLE: how the agent's
        metrics tell which share an MPS client process is).
        """
        pipe, _ = self.directories(gpu_uuid)
        env = {'CUDA_MPS_PIPE_DIRECTORY': pipe,
               'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': str(percent),
               'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT': '%d=%s' % (
                   DEVICE, limit_value(memory_mb))}
        if handle:
            env[HANDLE_VARIABLE] = handle
        return env


def read_share_handle(proc_root, pid):
    """The CYBORG_SHARE_HANDLE of a process (from /proc/<pid>/environ,
    NUL-separated), or None when unreadable (a process that exited, an
    environ that cannot be read) or unset.

    Runs in the privsep daemon (privileged.share_handles): another user's
    environ is readable only with CAP_SYS_PTRACE (proc(5), "Ptrace
    access mode PTRACE_MODE_READ_FSCREDS"), and MPS clients run as their
    own users.
    """
    try:
        with open(os.path.join(proc_root, str(pid), 'environ'), 'rb') as f:
            environ = f.read()
    except OSError:
        return None
    for item in environ.split(b'\0'):
        name, _, value = item.partition(b'=')
        if name == HANDLE_VARIABLE.encode():
            return value.decode(errors='replace') or None
    return None
