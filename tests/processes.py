"""Service processes for functional tests: started with a log file, waited
for, and always stopped."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def script(name):
    """A console script of this virtualenv (next to sys.executable)."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    return path if os.path.exists(path) else shutil.which(name)


def reachable(host, port, timeout=1.0):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Process:
    def __init__(self, name, argv, log_dir, env=None):
        self.name = name
        self.log_path = os.path.join(log_dir, '%s.log' % name)
        self._log = open(self.log_path, 'w')
        self.proc = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=dict(os.environ, **(env or {})),
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def logs(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_for(self, predicate, what, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError('%s exited with %s while waiting for %s:'
                                     '\n%s' % (self.name, self.proc.returncode,
                                               what, self.logs()[-4000:]))
            if predicate():
                return
            time.sleep(0.1)
        raise AssertionError('%s: no %s after %ss:\n%s'
                             % (self.name, what, timeout, self.logs()[-4000:]))

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout=15):
        """SIGTERM (unless sent already), wait, SIGKILL if it hangs."""
        self.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._log.close()
        return self.proc.returncode


def stop_all(procs):
    """Stop several at once: they shut down in parallel."""
    for proc in procs:
        proc.terminate()
    return [proc.stop() for proc in procs]
