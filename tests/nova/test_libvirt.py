# SPDX-License-Identifier: Apache-2.0
"""Attach handles → <hostdev> elements, or a refusal naming each ARQ a
guest cannot be given.
"""

import xml.etree.ElementTree as ET

import pytest

from nova_cyborg_client import exception
from nova_cyborg_client import libvirt
from nova_cyborg_client import mdev

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
    guest = libvirt.GuestDevices(INSTANCE, [_pci(), _mdev()])
    assert _attrs(guest.hostdevs)[1] == (
        {'mode': 'subsystem', 'type': 'mdev', 'managed': 'no',
         'model': 'vfio-pci'},
        {'uuid': '4b20d080-1b54-4048-85b3-a6a62d165c01'})
    assert guest.mdevs == [mdev.Mdev('4b20d080-1b54-4048-85b3-a6a62d165c01',
                                     '0000:43:00.0', 'nvidia-1')]


def test_mdev_xml_is_novas_shape():
    """What Nova 2026.2 writes for a Cyborg MDEV (spec cyborg-vgpu-support;
    nova/virt/libvirt/config.py LibvirtConfigGuestHostdevMDEV.format_dom:
    mode, type, managed='no', model='vfio-pci', <source><address uuid>).
    """
    text = libvirt.devices_xml(INSTANCE, [_mdev()])
    assert text == (
        '<devices>\n'
        '  <hostdev mode="subsystem" type="mdev" managed="no" '
        'model="vfio-pci">\n'
        '    <source>\n'
        '      <address uuid="4b20d080-1b54-4048-85b3-a6a62d165c01" />\n'
        '    </source>\n'
        '  </hostdev>\n'
        '</devices>')


def test_mdev_parent_is_the_handles_address_zero_padded():
    arq = _mdev()
    arq['attach_handle_info'].update(bus='0x1b', device='0', function='4')
    [m] = libvirt.GuestDevices(INSTANCE, [arq]).mdevs
    assert m.parent == '0000:1b:00.4'
    assert libvirt.mdevs_of([_pci(), arq]) == [m]


def test_vf_on_variant_driver_is_managed_no():
    """A VF whose vGPU type the driver wrote (info managed "no") stays on
    NVIDIA's driver: libvirt must not detach it (spec enable-vfio-devices-
    with-kernel-variant-drivers, <hostdev ... managed='no'>).
    """
    vf = _pci('1b', '00', '4')
    vf['attach_handle_info'].update(managed='no', vgpu_type='1414')
    yes = _pci()
    yes['attach_handle_info']['managed'] = 'yes'
    devices = libvirt.guest_hostdevs(INSTANCE, [vf, yes, _pci('0c')])
    assert [d.get('managed') for d in devices] == ['no', 'yes', 'yes']
    assert libvirt.devices_xml(INSTANCE, [vf]).splitlines()[1] == (
        '  <hostdev mode="subsystem" type="pci" managed="no">')


def _refusal(arqs):
    with pytest.raises(exception.AttachHandleNotWirable) as e:
        libvirt.guest_hostdevs(INSTANCE, arqs)
    return e.value


def test_mig_handle_is_refused_with_the_reason():
    mig = _pci(kind='MIG')
    mig['attach_handle_info']['mig_uuid'] = 'MIG-abc'
    error = _refusal([_pci('0c'), mig])
    assert error.problems == [(mig['uuid'], 'MIG',
                               libvirt.REFUSED_TYPES['MIG'])]
    assert str(error).startswith(
        'Cannot give the guest its accelerators: ARQ arq-1b0 (attach handle '
        'type MIG): a MIG instance of a data-center-driver host is for host '
        'processes and containers')


def test_mps_share_handle_is_refused_with_the_reason():
    """An MPS share (attach info: the share's client environment) is for
    host processes: refused like MIG, never wired as an mdev.
    """
    share = _pci(kind='MPS')
    share['attach_handle_info'].update(
        share_slot='0', share_mode='mps', share_percent=25,
        share_memory_mb=16384, mps_client_env={
            'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': '25'})
    error = _refusal([_pci('0c'), share])
    assert error.problems == [(share['uuid'], 'MPS',
                               libvirt.REFUSED_TYPES['MPS'])]
    assert 'an MPS share of a data-center-driver host is for host ' \
        'processes and containers' in str(error)
    assert libvirt.mdevs_of([share]) == []


@pytest.mark.parametrize('change, reason', [
    ({'attach_handle_type': 'TEST_PCI'}, "a fake driver's test handle"),
    ({'attach_handle_type': 'AICHIP'}, 'not a type a guest can be given '
                                       '(MDEV, PCI are)'),
    ({'attach_handle_type': None}, 'not a type a guest can be given'),
    ({'state': 'BindFailed', 'attach_handle_type': ''},
     'not bound (state BindFailed)'),
    ({'attach_handle_info': None}, 'attach_handle_info is missing'),
    ({'attach_handle_info': {'domain': '0000', 'bus': '1b',
                             'device': '00'}},
     'attach_handle_info has no function'),
    ({'attach_handle_info': {'domain': '0000', 'bus': 'zz',
                             'device': '00', 'function': '0'}},
     "attach_handle_info bus 'zz' is not a PCI address part"),
    ({'attach_handle_info': {'domain': '0000', 'bus': '1b',
                             'device': '00', 'function': '8'}},
     "attach_handle_info function '8' is not a PCI address part"),
    ({'attach_handle_info': {'domain': '0000', 'bus': '1b', 'device': '00',
                             'function': '4', 'managed': 'maybe'}},
     "attach_handle_info managed 'maybe' is neither"),
])
def test_unwirable_pci_handles(change, reason):
    bad = dict(_pci(), **change)
    error = _refusal([_pci('0c'), bad])
    [(arq, _, text)] = error.problems
    assert arq == bad['uuid'] and text.startswith(reason)


@pytest.mark.parametrize('change, reason', [
    ({'asked_type': None}, 'attach_handle_info has no asked_type (the mdev '
                           'type to create on 0000:43:00.0)'),
    ({'asked_type': ''}, 'attach_handle_info has no asked_type'),
    ({'device': None}, 'attach_handle_info has no device'),
])
def test_unwirable_mdev_handles(change, reason):
    bad = _mdev()
    bad['attach_handle_info'].update(change)
    bad['attach_handle_info'] = {k: v for k, v in
                                 bad['attach_handle_info'].items()
                                 if v is not None}
    [(_, handle_type, text)] = _refusal([bad]).problems
    assert handle_type == 'MDEV' and text.startswith(reason)
    assert libvirt.mdevs_of([bad]) == []


def test_mdev_needs_a_uuid():
    bad = dict(_mdev(), attach_handle_uuid='ah-1')
    [(_, _, text)] = _refusal([bad]).problems
    assert text == ("attach_handle_uuid 'ah-1' is not a UUID (it names the "
                    "mdev)")


def test_every_unwirable_arq_is_named():
    error = _refusal([_pci(kind='MIG'), _pci('0c'),
                      dict(_mdev(), attach_handle_uuid=None)])
    assert [p[:2] for p in error.problems] == [('arq-1b0', 'MIG'),
                                               ('arq-m', 'MDEV')]


def test_nothing_to_wire():
    assert libvirt.guest_hostdevs(INSTANCE, []) == []
    assert libvirt.guest_hostdevs(INSTANCE, None) == []
    assert libvirt.devices_xml(INSTANCE, []) == '<devices />'


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
