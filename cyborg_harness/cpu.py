# SPDX-License-Identifier: Apache-2.0
"""CPU time from /proc: of one process, of a process group, of the
machine. Seconds; None where the process is gone.
"""

import os

_TICKS = os.sysconf('SC_CLK_TCK')


def _stat(pid):
    """The fields of /proc/PID/stat after the command name (field 3 on),
    so index 0 is the state; None if the process is gone.
    """
    try:
        with open('/proc/%s/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()
    except (OSError, IndexError):
        return None


def process_seconds(pid, children=False):
    """user + system CPU time of `pid`; with `children`, that of its
    reaped children too (cutime + cstime).
    """
    fields = _stat(pid)
    if fields is None:
        return None
    # utime, stime, cutime, cstime: stat fields 14-17.
    ticks = sum(int(x) for x in fields[11:15 if children else 13])
    return ticks / _TICKS


def group_seconds(pgid):
    """user + system CPU time of every live process in process group
    `pgid` (a process started in its own session, with its children).
    """
    ticks = 0
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        fields = _stat(entry)
        if fields is not None and int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / _TICKS


def tree_seconds(pid):
    """user + system CPU time of `pid` and its live descendants (a server
    and the workers it forked, in whatever session).
    """
    stats = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            fields = _stat(entry)
            if fields is not None:
                stats[int(entry)] = fields
    if pid not in stats:
        return None
    children = {}
    for child, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(child)
    ticks, todo = 0, [pid]
    while todo:
        current = todo.pop()
        ticks += int(stats[current][11]) + int(stats[current][12])
        todo.extend(children.get(current, ()))
    return ticks / _TICKS


def machine_busy_seconds():
    """CPU time the whole machine spent busy (all but idle and iowait),
    summed over its CPUs, since boot.
    """
    with open('/proc/stat') as f:
        fields = f.readline().split()[1:]
    # user nice system idle iowait irq softirq steal
    values = [int(x) for x in fields[:8]]
    return (sum(values) - values[3] - values[4]) / _TICKS


def cpu_model():
    """The CPU's model name, or None."""
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return None
