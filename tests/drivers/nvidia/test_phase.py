# SPDX-License-Identifier: Apache-2.0
"""The phase the NVIDIA driver proposes for each GPU, over the fake host:
per the GPU glossary (docs/gpu-lifecycle.md), every NVIDIA GPU sysfs shows
is listed, and the phase and DriverReady condition say why it can or
cannot be used.
"""

import threading

import pynvml as N
import pytest

from cyborg.conf import CONF
from cyborg.drivers.nvidia import models
from cyborg.drivers.nvidia import resources
from tests.drivers.nvidia import conftest

GPU1 = '0000:1b:00.0'
GPU2 = '0000:43:00.0'


@pytest.fixture
def make_host(install_host):
    def make(*drivers, model='h200', **gpu1):
        first = {'model': model, 'pci_address': GPU1, 'driver': drivers[0]}
        gpus = [dict(first, **gpu1)]
        if len(drivers) > 1:
            gpus.append({'model': model, 'pci_address': GPU2,
                         'driver': drivers[1]})
        return install_host({'iommu': True, 'gpus': gpus})
    return make


new_driver = conftest.new_driver


def seen(devices):
    """{address: (mode, phase, DriverReady reason, occupancy known)}."""
    out = {}
    for d in devices:
        ready = next(c for c in d.observations['conditions']
                     if c['type'] == 'DriverReady')
        out[d.deployables[0].name] = (
            d.observations['mode'], d.phase, ready['reason'],
            d.observations['occupancy_known'])
    return out


def test_vfio_bound_gpu_is_passthrough_claimed_or_not(make_host):
    host = make_host('nvidia', 'vfio-pci')
    assert seen(new_driver(host).discover()) == {
        GPU1: ('Compute', 'Ready', 'Nvml', True),
        GPU2: ('Passthrough', 'Passthrough', 'Passthrough', True)}


def test_vfio_variant_driver_is_passthrough(make_host):
    host = make_host('nvgrace-gpu-vfio-pci')
    assert seen(new_driver(host).discover())[GPU1][:2] == (
        'Passthrough', 'Passthrough')


def test_no_driver_is_pending_and_nouveau_failed_with_the_reason(make_host):
    host = make_host(None, 'nouveau')
    devices = new_driver(host).discover()
    assert seen(devices) == {
        GPU1: ('Unbound', 'Pending', 'NoDriver', True),
        GPU2: ('Unknown', 'Failed', 'ForeignDriver', True)}
    [message] = [c['message'] for c in devices[1].observations['conditions']
                 if c['type'] == 'DriverReady']
    assert 'nouveau' in message


def test_product_without_capture_is_still_listed(make_host):
    """Neither NVML nor a shipped capture knows it: listed, whole use
    only, with the driver's reason.
    """
    doc = models.load('h200')
    doc['devices'][0]['pci'] = dict(doc['devices'][0]['pci'],
                                    pciDeviceId=(0x1234 << 16) | 0x10de)
    host = make_host('nouveau', model=doc)
    [device] = new_driver(host).discover()
    assert seen([device])[GPU1] == ('Unknown', 'Failed', 'ForeignDriver',
                                    True)
    assert device.model == 'NVIDIA GPU (PCI device 1234)'
    assert device.deployables[0].inventories[
        resources.MEM_SLICE]['total'] == 1


@pytest.mark.parametrize('code,why', [
    (N.NVML_ERROR_DRIVER_NOT_LOADED, 'kernel driver is not loaded'),
    (N.NVML_ERROR_LIB_RM_VERSION_MISMATCH, 'different versions'),
])
def test_nvml_down_keeps_gpus_listed_with_the_reason(make_host, code, why):
    host = make_host('nvidia', 'vfio-pci')
    host.nvml.init_error = code
    devices = new_driver(host).discover()
    assert seen(devices) == {
        GPU1: ('Compute', 'Failed', 'NvmlUnavailable', False),
        GPU2: ('Passthrough', 'Passthrough', 'Passthrough', True)}
    [message] = [c['message'] for c in devices[0].observations['conditions']
                 if c['type'] == 'DriverReady']
    assert why in message


def test_nvml_back_makes_the_gpu_ready_again(make_host):
    host = make_host('nvidia')
    host.nvml.init_error = N.NVML_ERROR_DRIVER_NOT_LOADED
    drv = new_driver(host)
    assert drv.discover()[0].phase == 'Failed'
    host.nvml.init_error = None
    assert seen(drv.discover())[GPU1] == ('Compute', 'Ready', 'Nvml', True)


def test_gpu_on_nvidia_that_nvml_never_lists_is_failed(make_host):
    host = make_host('nvidia', 'nvidia')
    host.nvml.visible = lambda address: address != GPU2
    drv = new_driver(host)
    assert seen(drv.discover())[GPU2] == (
        'Compute', 'Failed', 'NotInNvml', False)


def test_initializing_while_the_agent_changes_mig_mode(make_host):
    host = make_host('nvidia', mig_mode=0)
    drv = new_driver(host)
    drv.discover()
    entered, release = threading.Event(), threading.Event()
    real = drv.state.backend.set_mig_mode

    def slow(uuid, enabled):
        entered.set()
        release.wait(10)
        return real(uuid, enabled)

    drv.state.backend.set_mig_mode = slow
    CONF.set_override('enable_mig_on_demand', True, group='nvidia')
    [gpu] = [g for g in drv.state.backend.gpus()]
    worker = threading.Thread(target=drv.mig.ensure_mig_mode, args=(gpu,))
    worker.start()
    try:
        assert entered.wait(10)
        [device] = drv.discover()
        assert device.phase == 'Initializing'
        assert {'type': 'MigMode', 'status': 'False', 'reason': 'Changing',
                'message': 'MIG mode is being changed'} in \
            device.observations['conditions']
    finally:
        release.set()
        worker.join(10)
    [device] = drv.discover()
    assert device.phase == 'Ready'


def test_initializing_while_the_kernel_driver_changes(make_host):
    host = make_host('nvidia')
    drv = new_driver(host)
    with drv.state.changing(GPU1, 'kernel driver'):
        assert seen(drv.discover())[GPU1][1:3] == ('Initializing',
                                                   'Rebinding')
    assert seen(drv.discover())[GPU1][1] == 'Ready'
