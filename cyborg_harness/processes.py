# SPDX-License-Identifier: Apache-2.0
"""A service process: started in a session of its own with its output in
a log file, waited for, and always stopped with the children it forked
(gunicorn's workers).
"""

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading

from cyborg_harness import cpu
from cyborg_harness import waiting

PROBLEM_KEYS = ('Traceback', 'ERROR', 'CRITICAL', 'WARNING', 'locked')


def script(name):
    """A console script of this virtualenv (next to sys.executable)."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    return path if os.path.exists(path) else shutil.which(name)


def stop_group(proc, timeout=20, on_kill=None):
    """SIGTERM a Popen started in its own session, and its children;
    SIGKILL them all if it is still there after `timeout` seconds
    (calling on_kill() first). Returns its exit status.
    """
    if proc.poll() is not None:
        return proc.returncode
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        if on_kill is not None:
            on_kill()
        kill_group(proc)
    except ProcessLookupError:
        proc.wait(timeout)
    return proc.returncode


def kill_group(proc, timeout=30):
    """SIGKILL a Popen started in its own session and its children: no
    clean shutdown, as when a host loses power.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout)
    return proc.returncode


class Process:
    """`argv` as process `name`, its output in LOG_DIR/NAME.log.

    With stdout_lines, stdout is read line by line instead (`lines`, a
    queue ending with None at EOF; `stdout`, every line so far) and only
    stderr goes to the log.
    """

    def __init__(self, name, argv, log_dir, env=None, cwd=None,
                 stdout_lines=False):
        self.name = name
        self.argv = list(argv)
        self.log_path = os.path.join(log_dir, '%s.log' % name)
        self._log = open(self.log_path, 'wb')
        self.lines = queue.Queue() if stdout_lines else None
        self.stdout = []
        env = dict(dict(os.environ, PYTHONUNBUFFERED='1'), **(env or {}))
        self.proc = subprocess.Popen(
            self.argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout_lines else self._log,
            stderr=self._log, start_new_session=True)
        if stdout_lines:
            threading.Thread(target=self._read, daemon=True,
                             name='%s-stdout' % name).start()

    def _read(self):
        try:
            for raw in self.proc.stdout:
                line = raw.decode(errors='replace')
                self.stdout.append(line)
                self.lines.put(line)
        except (OSError, ValueError):   # closed by stop()
            pass
        self.lines.put(None)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def logs(self):
        """The whole log so far."""
        if not self._log.closed:
            self._log.flush()
        with open(self.log_path, errors='replace') as f:
            return f.read()

    def log_tail(self, lines=40):
        return ''.join(self.logs().splitlines(True)[-lines:])

    def problems(self, keys=PROBLEM_KEYS):
        """Log lines holding any of `keys`."""
        return [line for line in self.logs().splitlines()
                if any(k in line for k in keys)]

    def check_alive(self, what='it'):
        """Raise RuntimeError if the process has exited."""
        if self.proc.poll() is not None:
            raise RuntimeError('%s exited with %s while waiting for %s:\n%s'
                               % (self.name, self.proc.returncode, what,
                                  self.log_tail()))

    def wait_for(self, predicate, what, timeout=90):
        """Poll predicate() until true; fail early if the process exits,
        with its log tail after `timeout` seconds.
        """
        return waiting.eventually(
            predicate, '%s: %s' % (self.name, what), timeout=timeout,
            check=lambda: self.check_alive(what), detail=self.log_tail)

    def wait_for_log(self, text, timeout=90):
        """Until `text` is in the log."""
        return self.wait_for(lambda: text in self.logs(), repr(text),
                             timeout)

    def cpu_seconds(self):
        """CPU time of the process and every live process of its group."""
        return cpu.group_seconds(self.proc.pid)

    def signal(self, signum):
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def terminate(self):
        """SIGTERM to the whole group, without waiting."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def stop(self, timeout=20, on_kill=None):
        """SIGTERM (to the group), wait, SIGKILL if it hangs; returns the
        exit status.
        """
        code = stop_group(self.proc, timeout, on_kill)
        self._close()
        return code

    def kill(self):
        """SIGKILL to the group: no clean shutdown."""
        code = kill_group(self.proc)
        self._close()
        return code

    def _close(self):
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


def stop_all(procs, timeout=20):
    """Stop several at once: they shut down in parallel."""
    for proc in procs:
        proc.terminate()
    return [proc.stop(timeout) for proc in procs]
