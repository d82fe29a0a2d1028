# SPDX-License-Identifier: Apache-2.0
"""cyborg-aio as a user runs it: a subprocess whose first stdout line is
the ready line (logs go to stderr, kept in a log file).
"""

import os
import queue
import re
import signal
import subprocess
import sys
import time

from cyborg import data
from cyborg_harness import processes

READY = re.compile(r'^cyborg-aio ready: api=(\S+/v2) placement=(\S+)'
                   r'(?: log=(\S+))?$')
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE_HOSTS = data.folder(data.FAKE_HOSTS)
HOST_SPEC = data.fake_host('gpu-host')


class NotReady(RuntimeError):
    """cyborg-aio exited or printed no ready line in time."""


def command():
    """How to start cyborg-aio: this virtualenv's console script, else
    python -m cyborg_aio.
    """
    exe = os.path.join(os.path.dirname(sys.executable), 'cyborg-aio')
    return [exe] if os.path.exists(exe) else [sys.executable, '-m',
                                              'cyborg_aio']


class Aio(processes.Process):
    """One cyborg-aio process on free ports, state in `state_dir`.

    nova_endpoint: send the events there (no demo); else Nova's events
    API is served by the aio itself on a free port. `cmd` replaces the
    command (a wrapper applying experiments, another build). On return
    `api` (…/v2) and `placement` are the URLs of the ready line, and
    `log_file` the INFO log it names (logs() includes it).
    """

    def __init__(self, workdir, state_dir=None, host_spec=HOST_SPEC,
                 nova_endpoint=None, demo=False, config_file=None,
                 metrics=True, debug=False, cmd=None, extra_args=(),
                 timeout=120, name='aio', env=None):
        argv = list(cmd or command())
        state_dir = str(state_dir or os.path.join(workdir, 'state'))
        argv += ['--state-dir', state_dir,
                 '--port', '0', '--placement-port', '0']
        # The log file is appended to across restarts: logs() reads what
        # this run wrote.
        self._default_log = os.path.abspath(os.path.join(
            str(workdir), state_dir, 'cyborg-aio.log'))
        try:
            self._log_offset = os.path.getsize(self._default_log)
        except OSError:
            self._log_offset = 0
        if metrics:
            argv += ['--metrics-port', '0']
        if nova_endpoint:
            argv += ['--nova-endpoint', nova_endpoint]
        else:
            argv += ['--nova-port', '0']
        if config_file:
            argv += ['--config-file', str(config_file)]
        if host_spec:
            argv += ['--host-spec', str(host_spec)]
        if not demo:
            argv.append('--no-demo')
        if debug:
            argv.append('--debug')
        argv += list(extra_args)
        super().__init__(name, argv, str(workdir), env=env, cwd=str(workdir),
                         stdout_lines=True)
        self.api = self.placement = self.log_file = None
        try:
            self.api, self.placement, self.log_file = self._wait_ready(
                timeout)
        except BaseException:
            self.kill()
            raise
        rest = self.api.split('//', 1)[1]
        hostport, prefix = rest.split('/', 1)
        self.port = int(hostport.rsplit(':', 1)[1])
        self.prefix = '/' + prefix.rstrip('/')

    api_url = property(lambda self: self.api)
    placement_url = property(lambda self: self.placement)

    def _wait_ready(self, timeout):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise NotReady('cyborg-aio printed no ready line in %ss:\n%s'
                           % (timeout, self.log_tail()))
        if line is None:
            self.proc.wait()
            raise NotReady('cyborg-aio exited %s before ready:\n%s'
                           % (self.proc.returncode, self.log_tail()))
        match = READY.match(line.rstrip('\n'))
        if not match:
            raise NotReady('unexpected first stdout line %r:\n%s'
                           % (line, self.log_tail()))
        return match.groups()

    def logs(self):
        """stderr (warnings and errors, or all with debug) followed by
        the log file the ready line named (INFO and up).
        """
        text = super().logs()
        if self.log_file and os.path.exists(self.log_file):
            with open(self.log_file, 'rb') as f:
                if self.log_file == self._default_log:
                    f.seek(self._log_offset)
                text += '\n--- %s ---\n%s' % (
                    self.log_file, f.read().decode(errors='replace'))
        return text

    def stderr_lines(self):
        """What cyborg-aio wrote to its stderr (the terminal's log)."""
        return [line for line in super().logs().splitlines() if line]

    def read_until(self, pattern, timeout=120):
        """stdout lines after the ready line, up to one matching
        `pattern`; NotReady if none comes in time.
        """
        lines = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(
                    timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                raise NotReady('no line matching %r; got:\n%s\n%s'
                               % (pattern, ''.join(lines), self.log_tail()))
            lines.append(line)
            if re.search(pattern, line):
                return ''.join(lines)

    def stop(self, sig=signal.SIGTERM, timeout=30, on_kill=None):
        """Send `sig` to cyborg-aio alone (as a user's Ctrl-C or kill
        would), wait for it to exit; SIGKILL after `timeout` seconds.
        Returns the exit status.
        """
        self.signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            if on_kill is not None:
                on_kill()
        return super().stop(timeout=1)
