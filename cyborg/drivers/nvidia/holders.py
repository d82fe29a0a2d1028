# SPDX-License-Identifier: Apache-2.0
"""Which processes hold a GPU's device file open: what a MIG mode change
or a GPU reset waits for ("In use by another client").  NVML lists only
compute processes; DCGM's host engine and nvidia-persistenced hold
/dev/nvidia<minor> without running a CUDA context.  Read from /proc,
best effort: processes of other users are visible only to root.
"""

import os

PROC = '/proc'


def open_by(minor, proc_root=PROC):
    """[(pid, command name)] of the processes, other than this one, with
    /dev/nvidia<minor> open.
    """
    root = proc_root
    wanted = '/dev/nvidia%d' % minor
    out = []
    try:
        pids = [p for p in os.listdir(root) if p.isdigit()]
    except OSError:
        return out
    for pid in sorted(pids, key=int):
        if int(pid) == os.getpid():
            continue
        fd_dir = os.path.join(root, pid, 'fd')
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target == wanted:
                out.append((int(pid), _comm(root, pid)))
                break
    return out


def _comm(root, pid):
    try:
        with open(os.path.join(root, pid, 'comm')) as f:
            return f.read().strip() or 'pid %s' % pid
    except OSError:
        return 'pid %s' % pid
