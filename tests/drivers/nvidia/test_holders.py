# SPDX-License-Identifier: Apache-2.0
"""Who holds a GPU's device file, read from a /proc tree."""

import os

from cyborg.drivers.nvidia import holders


def _proc(root, pid, comm, targets):
    fd = root / str(pid) / 'fd'
    fd.mkdir(parents=True)
    (root / str(pid) / 'comm').write_text(comm + '\n')
    for n, target in enumerate(targets):
        os.symlink(target, fd / str(n))


def test_processes_with_the_device_file_open(tmp_path):
    _proc(tmp_path, 40, 'nv-hostengine', ['/dev/nvidiactl', '/dev/nvidia0'])
    _proc(tmp_path, 41, 'nvidia-persiste', ['/dev/nvidia1', '/dev/nvidia0'])
    _proc(tmp_path, 42, 'bash', ['/dev/pts/0'])
    _proc(tmp_path, 43, 'python', ['/dev/nvidia1'])
    (tmp_path / 'self').mkdir()                 # not a pid
    (tmp_path / '44').mkdir()                   # no fd dir readable

    assert holders.open_by(0, str(tmp_path)) == [
        (40, 'nv-hostengine'), (41, 'nvidia-persiste')]
    assert holders.open_by(1, str(tmp_path)) == [
        (41, 'nvidia-persiste'), (43, 'python')]
    assert holders.open_by(2, str(tmp_path)) == []
    assert holders.open_by(0, str(tmp_path / 'missing')) == []


def test_this_process_is_not_a_holder(tmp_path):
    _proc(tmp_path, os.getpid(), 'agent', ['/dev/nvidia0'])
    assert holders.open_by(0, str(tmp_path)) == []
