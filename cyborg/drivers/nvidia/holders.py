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
    /dev/nvidia<minor> open.  Best effort: what cannot be read is skipped.
    """
    return holding('/dev/nvidia%d' % minor, proc_root)


def holding(device, proc_root=PROC, strict=False):
    """[(pid, command name)] of the processes, other than this one, with
    the file `device` open, from /proc/<pid>/fd links, in pid order.

    strict: only a process that exits during the scan is skipped; any other
    error (an unreadable /proc, no permission) propagates, so that a
    caller deciding whether a device is free fails closed.
    """
    skipped = FileNotFoundError if strict else OSError
    out = []
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit()]
    except OSError:
        if strict:  # no /proc to read is not "nobody holds it"
            raise
        return out
    for pid in sorted(pids, key=int):
        if int(pid) == os.getpid():
            continue
        fd_dir = os.path.join(proc_root, pid, 'fd')
        try:
            fds = os.listdir(fd_dir)
        except skipped:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except skipped:
                continue
            if target == device:
                out.append((int(pid), _comm(proc_root, pid)))
                break
    return out


def _comm(root, pid):
    try:
        with open(os.path.join(root, pid, 'comm')) as f:
            return f.read().strip() or 'pid %s' % pid
    except OSError:
        return 'pid %s' % pid
