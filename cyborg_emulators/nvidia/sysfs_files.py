# SPDX-License-Identifier: Apache-2.0
"""Plain-file helpers shared by the fake sysfs tree (fake_sysfs) and the
fake vGPU Manager's VF files (fake_vgpu): sysfs attributes are one value
and a newline; control files (bind, unbind, create, remove) are read and
cleared once the fake kernel has applied them.
"""

import os


def write(path, value):
    """Write one attribute value ('' leaves the file empty)."""
    with open(path, 'w') as f:
        f.write(_text(value))


def show(path, value):
    """An attribute the fake kernel shows again (after each settle): the
    file is rewritten only when its value changed. A reader of a real
    sysfs attribute gets the kernel's whole value on every read (Linux,
    Documentation/filesystems/sysfs.rst: a read(2) calls the attribute's
    show(), which fills the buffer with the entire value); a
    rewrite of a plain file is a truncation, then a write, and a reader
    in between (the agent's report pass, a test) would read ''.
    """
    try:
        with open(path) as f:
            if f.read() == _text(value):
                return
    except OSError:
        pass
    write(path, value)


def _text(value):
    return '%s\n' % value if value != '' else ''


def read(path):
    """An attribute's value, stripped; '' when it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ''


def take(path):
    """Read and clear a write-only control file (bind, unbind, probe,
    create, remove); '' when nothing was written.
    """
    value = read(path)
    if value:
        write(path, '')
    return value


def symlink(target, path):
    """Point `path` at `target`, replacing what was there."""
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)
