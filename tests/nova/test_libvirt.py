# SPDX-License-Identifier: Apache-2.0
"""Attach handles → <hostdev> elements."""

import logging
import xml.etree.ElementTree as ET

from nova_cyborg_client import libvirt

INSTANCE = 'inst-1'


def _pci(bus='1b', device='00', function='0', kind='PCI'):
    return {'uuid': 'arq-%s%s' % (bus, function), 'state': 'Bound',
            'attach_handle_type': kind, 'attach_handle_uuid': 'ah',
            'attach_handle_info': {'domain': '0000', 'bus': bus,
                                   'device': device, 'function': function}}


def _mdev(mdev_uuid='4b20d080-1b54-4048-85b3-a6a62d165c01'):
    return {'uuid': 'arq-m', 'state': 'Bound', 'attach_handle_type': 'MDEV',
            'attach_handle_uuid': mdev_uuid,
            'attach_handle_info': {'domain': '0000', 'bus': '43',
                                   'device': '00', 'function': '0',
                                   'asked_type': 'nvidia-1'}}


def _attrs(devices):
    return [(d.attrib, d.find('source/address').attrib) for d in devices]


def test_pci():
    devices = libvirt.guest_hostdevs(INSTANCE, [_pci(),
                                                _pci('0c', '0', '1')])
    assert _attrs(devices) == [
        ({'mode': 'subsystem', 'type': 'pci', 'managed': 'yes'},
         {'domain': '0x0000', 'bus': '0x1b', 'slot': '0x00',
          'function': '0x0'}),
        ({'mode': 'subsystem', 'type': 'pci', 'managed': 'yes'},
         {'domain': '0x0000', 'bus': '0x0c', 'slot': '0x0',
          'function': '0x1'})]


def test_hex_prefix_not_doubled():
    arq = _pci()
    arq['attach_handle_info'] = {'domain': '0x0000', 'bus': '0x1b',
                                 'device': '0x00', 'function': '0x0'}
    address = libvirt.guest_hostdevs(INSTANCE, [arq])[0].find(
        'source/address')
    assert address.get('bus') == '0x1b'


def test_mdev_and_mixes():
    devices = libvirt.guest_hostdevs(INSTANCE, [_pci(), _mdev()])
    assert _attrs(devices)[1] == (
        {'mode': 'subsystem', 'type': 'mdev', 'model': 'vfio-pci',
         'managed': 'no'},
        {'uuid': '4b20d080-1b54-4048-85b3-a6a62d165c01'})


def test_all_or_nothing(caplog):
    with caplog.at_level(logging.INFO):
        assert libvirt.guest_hostdevs(
            INSTANCE, [_pci(), _pci(kind='TEST_PCI')]) == []
    assert ('Ignoring accelerator requests for instance inst-1' in
            caplog.text)
    assert "['TEST_PCI']" in caplog.text
    failed = dict(_pci(), state='BindFailed', attach_handle_type='')
    assert libvirt.guest_hostdevs(INSTANCE, [_pci(), failed]) == []
    assert libvirt.guest_hostdevs(INSTANCE, []) == []
    assert libvirt.guest_hostdevs(INSTANCE, None) == []


def test_pretty_xml():
    text = libvirt.devices_xml(INSTANCE, [_pci()])
    assert text == (
        '<devices>\n'
        '  <hostdev mode="subsystem" type="pci" managed="yes">\n'
        '    <source>\n'
        '      <address domain="0x0000" bus="0x1b" slot="0x00" '
        'function="0x0" />\n'
        '    </source>\n'
        '  </hostdev>\n'
        '</devices>')
    element = libvirt.pci_hostdev(_pci()['attach_handle_info'])
    assert libvirt.to_xml(element).startswith('<hostdev')
    ET.fromstring(libvirt.to_xml(element))
    assert element.text is None  # the original is left unindented
