# SPDX-License-Identifier: Apache-2.0
"""The fake driver (host specs) and the pci driver (over fake sysfs trees)."""

import dataclasses
import logging
import os

import pytest

from cyborg.drivers import fake
from cyborg.drivers import pci
from cyborg.objects import device as records


def test_default_fake_host_has_two_gpus_and_an_fpga():
    devices = fake.FakeDriver(fake.default_host_spec()).discover()
    kinds = sorted((d.type, d.deployables[0].resource_class,
                    d.deployables[0].num_accelerators) for d in devices)
    assert kinds == [('FPGA', 'FPGA', 4), ('GPU', 'PGPU', 1),
                     ('GPU', 'PGPU', 1)]
    fpga = next(d for d in devices if d.type == 'FPGA')
    assert [h.attach_info for h in fpga.deployables[0].attach_handles] == [
        {'domain': '0000', 'bus': '0c', 'device': '00', 'function': str(f)}
        for f in range(4)]


def test_fake_spec_entries_are_normalised(tmp_path):
    spec = tmp_path / 'host.yaml'
    spec.write_text('devices:\n'
                    '  - {type: gpu, vendor_id: "0x10DE", product_id: 2335,'
                    ' pci_address: "1B:00.0", resource_class: CUSTOM_X}\n')
    [device] = fake.FakeDriver(str(spec)).discover()
    assert (device.vendor, device.product_id, device.type) == \
        ('10de', '2335', 'GPU')
    assert device.deployables[0].name == '0000:1b:00.0'
    assert device.deployables[0].resource_class == 'CUSTOM_X'


def test_fake_spec_errors_are_clear(tmp_path):
    spec = tmp_path / 'bad.yaml'
    spec.write_text('devices: {a: 1}\n')
    with pytest.raises(ValueError, match='must be a list'):
        fake.FakeDriver(str(spec)).discover()
    spec.write_text('devices:\n  - {vendor_id: 10de, product_id: 1,'
                    ' pci_address: nonsense}\n')
    with pytest.raises(ValueError, match='not a PCI address'):
        fake.FakeDriver(str(spec)).discover()


def test_device_records_survive_rpc_round_trip():
    [device] = fake.FakeDriver(fake.default_host_spec()).discover()[:1]
    assert records.Device.from_dict(device.to_dict()) == device


def test_to_dict_is_asdict_and_a_copy(tmp_path):
    spec = tmp_path / 'host.yaml'
    spec.write_text('devices:\n'
                    '  - {vendor_id: 10de, product_id: 2335, functions: 2,'
                    ' pci_address: "1b:00.0", traits: [CUSTOM_A],'
                    ' vendor_board_info: {serial: [1, 2]}}\n')
    driver = fake.FakeDriver(str(spec))
    [device] = driver.discover()
    device.observations = {'temp': (40, 41)}
    out = device.to_dict()
    assert out == dataclasses.asdict(device)
    out['vendor_board_info']['serial'].append(3)
    out['deployables'][0]['traits'].append('CUSTOM_B')
    out['deployables'][0]['attach_handles'][0]['attach_info']['bus'] = 'ff'
    assert device.vendor_board_info == {'serial': [1, 2]}
    assert device.deployables[0].traits == ['CUSTOM_A']
    assert device.deployables[0].attach_handles[0].attach_info['bus'] == '1b'
    # A discovery later is not changed by what a caller did to a record.
    device.vendor_board_info['serial'].append(4)
    assert driver.discover()[0].vendor_board_info == {'serial': [1, 2]}


def test_fake_spec_edits_are_seen_by_the_same_driver(tmp_path):
    spec = tmp_path / 'host.yaml'
    entry = ('  - {vendor_id: 10de, product_id: 2335,'
             ' pci_address: "%s"}\n')
    spec.write_text('devices:\n' + entry % '1b:00.0')
    driver = fake.FakeDriver(str(spec))
    assert [d.deployables[0].name for d in driver.discover()] == \
        ['0000:1b:00.0']
    spec.write_text('devices:\n' + entry % '1b:00.0' + entry % '43:00.0')
    assert [d.deployables[0].name for d in driver.discover()] == \
        ['0000:1b:00.0', '0000:43:00.0']


def _function(root, address, vendor, product, cls, numa=0, driver=None,
              group=None, vf=False):
    dev = root / 'bus' / 'pci' / 'devices' / address
    dev.mkdir(parents=True)
    (dev / 'vendor').write_text('0x%s\n' % vendor)
    (dev / 'device').write_text('0x%s\n' % product)
    (dev / 'class').write_text('0x%s\n' % cls)
    (dev / 'numa_node').write_text('%d\n' % numa)
    if driver:
        target = root / 'bus' / 'pci' / 'drivers' / driver
        target.mkdir(parents=True, exist_ok=True)
        os.symlink(target, dev / 'driver')
    if group is not None:
        target = root / 'kernel' / 'iommu_groups' / str(group)
        target.mkdir(parents=True, exist_ok=True)
        os.symlink(target, dev / 'iommu_group')
    if vf:
        os.symlink(dev, dev / 'physfn')


@pytest.fixture
def sysfs(tmp_path):
    _function(tmp_path, '0000:1b:00.0', '10de', '2335', '030200', numa=0,
              driver='vfio-pci', group=17)
    _function(tmp_path, '0000:43:00.0', '10de', '2335', '030200', numa=1,
              driver='nvidia', group=40)
    _function(tmp_path, '0000:5e:00.0', '10ee', '5020', '120000', numa=1)
    _function(tmp_path, '0000:00:1f.0', '8086', 'a1c8', '060100')
    return str(tmp_path)


def test_pci_scan_reads_driver_numa_and_iommu_group(sysfs):
    functions = {f['address']: f for f in pci.scan(sysfs)}
    gpu = functions['0000:1b:00.0']
    assert (gpu['vendor'], gpu['product'], gpu['class']) == \
        ('10de', '2335', '030200')
    assert (gpu['driver'], gpu['iommu_group'], gpu['numa_node']) == \
        ('vfio-pci', '17', 0)
    assert functions['0000:5e:00.0']['driver'] is None


def test_pci_driver_reports_whitelisted_devices_only(sysfs):
    drv = pci.PCIDriver(specs=['{"vendor_id": "10de", "product_id": "2335"}',
                               '{"address": "0000:5e:*"}'],
                        nova_specs=[], sysfs_root=sysfs)
    devices = {d.deployables[0].name: d for d in drv.discover()}
    assert sorted(devices) == ['0000:1b:00.0', '0000:43:00.0',
                               '0000:5e:00.0']
    gpu = devices['0000:43:00.0']
    assert (gpu.type, gpu.deployables[0].resource_class) == ('GPU', 'PGPU')
    assert gpu.std_board_info['driver'] == 'nvidia'
    assert gpu.std_board_info['numa_node'] == 1
    assert gpu.deployables[0].attach_handles[0].attach_info == {
        'domain': '0000', 'bus': '43', 'device': '00', 'function': '0'}
    accel = devices['0000:5e:00.0']
    assert accel.type == 'AICHIP'
    assert accel.deployables[0].resource_class == 'CUSTOM_PCI_10EE_5020'


def test_pci_spec_overrides_type_rc_and_traits(sysfs):
    drv = pci.PCIDriver(specs=[
        '{"address": "0000:5e:00.0", "device_type": "FPGA", '
        '"resource_class": "FPGA", "traits": "CUSTOM_A, CUSTOM_B"}'],
        nova_specs=[], sysfs_root=sysfs)
    [device] = drv.discover()
    assert device.type == 'FPGA'
    assert device.deployables[0].resource_class == 'FPGA'
    assert device.deployables[0].traits == ['CUSTOM_A', 'CUSTOM_B']


def test_devices_nova_claims_are_skipped_and_logged(sysfs, caplog):
    drv = pci.PCIDriver(specs=['{"vendor_id": "10de"}'],
                        nova_specs=['{"address": "0000:1b:00.0"}'],
                        sysfs_root=sysfs)
    with caplog.at_level(logging.INFO, logger='cyborg.drivers.pci'):
        names = [d.deployables[0].name for d in drv.discover()]
    assert names == ['0000:43:00.0']
    assert "0000:1b:00.0 (10de:2335) is claimed by Nova's [pci] " \
        "device_spec" in caplog.text


def test_bad_device_spec_is_rejected():
    with pytest.raises(ValueError):
        pci.PCIDriver(specs=['[1, 2]'], nova_specs=[], sysfs_root='/none')
