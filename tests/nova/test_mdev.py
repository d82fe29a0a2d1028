# SPDX-License-Identifier: Apache-2.0
"""The sysfs mdev creator against a sysfs tree laid out as the kernel's
mdev interface has it (Documentation/ABI/testing/sysfs-bus-vfio-mdev:
<parent>/mdev_supported_types/<type>/{create,name,available_instances};
an mdev appears as <parent>/<uuid>/ with a write-only `remove`; NVIDIA's
legacy vGPU host puts the types on each VF, kayobe's vGPU guide).
"""

import pytest

from nova_cyborg_client import exception
from nova_cyborg_client import mdev

VF = '0000:1b:00.4'
TYPE = 'nvidia-1061'
UUID = '4b20d080-1b54-4048-85b3-a6a62d165c01'


def _tree(root, available='1'):
    type_dir = root / 'bus/pci/devices' / VF / 'mdev_supported_types' / TYPE
    type_dir.mkdir(parents=True)
    (type_dir / 'name').write_text('NVIDIA H200X-1-18C\n')
    (type_dir / 'available_instances').write_text(available + '\n')
    (type_dir / 'create').write_text('')
    return type_dir


def test_create_writes_the_uuid(tmp_path):
    type_dir = _tree(tmp_path)
    mdev.SysfsMdevCreator(str(tmp_path)).create(mdev.Mdev(UUID, VF, TYPE))
    assert (type_dir / 'create').read_text() == UUID


def _create_fails(root, m):
    with pytest.raises(exception.MdevCreationFailed) as e:
        mdev.SysfsMdevCreator(str(root)).create(m)
    return str(e.value)


def test_create_refusals(tmp_path):
    _tree(tmp_path)
    prefix = 'Cannot create mdev %s of type ' % UUID
    assert _create_fails(tmp_path, mdev.Mdev(UUID, '0000:1b:00.5', TYPE)) \
        == prefix + '%s on 0000:1b:00.5: no such PCI device in %s' % (
            TYPE, tmp_path)
    assert _create_fails(tmp_path, mdev.Mdev(UUID, VF, 'nvidia-9')) == (
        prefix + 'nvidia-9 on %s: the device offers no such mdev type (it '
        'offers: %s)' % (VF, TYPE))
    # A PF of a vGPU 17 host, or any device without mdev types.
    (tmp_path / 'bus/pci/devices/0000:1b:00.0').mkdir()
    assert _create_fails(tmp_path, mdev.Mdev(UUID, '0000:1b:00.0', TYPE)
                         ).endswith('(it offers: none: not an mdev parent)')


def test_create_refused_when_no_instance_is_available(tmp_path):
    type_dir = _tree(tmp_path, available='0')
    assert _create_fails(tmp_path, mdev.Mdev(UUID, VF, TYPE)).endswith(
        ': available_instances is 0')
    assert (type_dir / 'create').read_text() == ''


def test_create_write_error_is_typed(tmp_path):
    # The kernel answers a bad write with an errno (EEXIST for a uuid in
    # use, EINVAL...); any OSError of the write becomes the typed error.
    type_dir = _tree(tmp_path)
    (type_dir / 'create').unlink()
    (type_dir / 'create').mkdir()
    assert _create_fails(tmp_path, mdev.Mdev(UUID, VF, TYPE)).endswith(
        ': writing %s/create: Is a directory' % type_dir)


def test_remove(tmp_path):
    _tree(tmp_path)
    device = tmp_path / 'bus/pci/devices' / VF / UUID
    device.mkdir()
    (device / 'remove').write_text('')
    creator = mdev.SysfsMdevCreator(str(tmp_path))
    assert creator.remove(mdev.Mdev(UUID, VF, TYPE)) is True
    assert (device / 'remove').read_text() == '1'
    # Gone already (host rebooted, removed by hand): nothing to do.
    other = mdev.Mdev('9d1f0b46-5b1e-4f57-8b1f-0d6c1a2b3c4d', VF, TYPE)
    assert creator.remove(other) is False
