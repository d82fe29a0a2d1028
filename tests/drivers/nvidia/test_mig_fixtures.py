# SPDX-License-Identifier: Apache-2.0
"""The fake NVML replays what `tools/nvidia_host_check.py --mutate` found
on a GPU (tests/fixtures/nvml/*-mutate.json): the same probe runs over
the fake, and every choice NVML made (MIG mode activation, GI ids by
placement, compute-instance profile sets, automatic placement, the
overlap and destroy-with-CI errors, the event mask) must come out the
same.

The only fixture today is SYNTHETIC (`synthetic: true`: produced by the
probe over the fake itself, no GPU machine was available) and so agrees
by construction; it pins the format and the probe.  A fixture captured on
real hardware is dropped next to it and tests the fake for real.

Also here: the read-only host check leaves a MIG-on GPU as it found it
and notices when something else changed it meanwhile.
"""

import glob
import json
import os

import pynvml as N
import pytest

from cyborg.drivers.nvidia import models
from cyborg_emulators.nvidia import fake_nvml
from tools import nvidia_host_check
from tools import nvidia_mig_probe

FIXTURES = sorted(glob.glob(os.path.join(
    os.path.dirname(__file__), os.pardir, os.pardir, 'fixtures', 'nvml',
    '*-mutate.json')))


def _model_for(name):
    for path in sorted(glob.glob(os.path.join(models.DIR, '*.json'))):
        if models.load(path)['devices'][0]['name'] == name:
            return os.path.basename(path)[:-len('.json')]
    raise LookupError('no shipped model named %r' % name)


def _comparable(result):
    """The probe's findings without what is random by nature (MIG UUIDs,
    timings, provenance).
    """
    out = {k: v for k, v in result.items() if k not in (
        'elapsed_s', 'source', 'synthetic', 'driver_version', 'gpu',
        'virtualization_mode')}
    out['placements'] = [
        dict({k: v for k, v in row.items() if k != 'mig_uuid'},
             recreated={k: v for k, v in row['recreated'].items()
                        if k != 'mig_uuid'})
        if 'recreated' in row else
        {k: v for k, v in row.items() if k != 'mig_uuid'}
        for row in result.get('placements', [])]
    return out


def test_there_is_at_least_one_fixture_and_synthetic_ones_say_so():
    assert FIXTURES
    for path in FIXTURES:
        with open(path) as f:
            fixture = json.load(f)
        if fixture['synthetic']:
            assert 'SYNTHETIC' in fixture['source']
            assert 'synthetic' in os.path.basename(path)


@pytest.mark.parametrize('path', FIXTURES,
                         ids=[os.path.basename(p) for p in FIXTURES])
def test_fake_replays_the_fixture(path):
    with open(path) as f:
        fixture = json.load(f)
    fake = fake_nvml.FakeNvml([{
        'model': _model_for(fixture['gpu']), 'pci_address': '0000:00:06.0',
        'mig_mode': fixture['mig_mode_before'][0],
        'virtualization_mode': fixture['virtualization_mode']}])
    with fake:
        N.nvmlInit()
        try:
            replay = nvidia_mig_probe.run(N.nvmlDeviceGetHandleByIndex(0))
        finally:
            N.nvmlShutdown()
    assert _comparable(replay) == _comparable(fixture)
    for row in fixture.get('placements', []):
        assert row['mig_uuid'].startswith('MIG-')


def test_the_probe_refuses_a_gpu_with_instances():
    fake = fake_nvml.FakeNvml([{'model': 'h200',
                                'pci_address': '0000:00:06.0',
                                'mig_mode': 1}])
    with fake:
        gpu = fake.gpu_info()[0]['uuid']
        fake.create_gi(gpu, 19, 0)
        N.nvmlInit()
        try:
            with pytest.raises(nvidia_mig_probe.Refused):
                nvidia_mig_probe.run(N.nvmlDeviceGetHandleByIndex(0))
        finally:
            N.nvmlShutdown()
        assert len(fake.to_state()['gpus'][gpu]['gpu_instances']) == 1


def test_the_probe_stops_at_its_deadline_and_cleans_up():
    ticks = iter(range(10 ** 6))
    fake = fake_nvml.FakeNvml([{'model': 'h200',
                                'pci_address': '0000:00:06.0'}])
    with fake:
        N.nvmlInit()
        try:
            result = nvidia_mig_probe.run(
                N.nvmlDeviceGetHandleByIndex(0), deadline_s=5,
                clock=lambda: next(ticks))
        finally:
            N.nvmlShutdown()
        state = fake.to_state()['gpus']
    assert 'deadline' in result['stopped']
    [gpu] = state.values()
    assert gpu['gpu_instances'] == [] and gpu['mig_mode'] == [0, 0]


def test_host_check_is_read_only_on_a_mig_on_gpu(tmp_path):
    """The old check created a 3g instance on a GPU with MIG on and still
    said "unchanged": now it works out what a bind would do instead.
    """
    out = tmp_path / 'report.json'
    assert nvidia_host_check.main(['--fake', 'h200', '--fake-mig-on',
                                   '--json', str(out)]) == 0
    report = json.loads(out.read_text())
    assert report['refusals']['0000:00:06.0 MIG 3g'] == \
        'would create MIG 3g.71gb at start 4'
    assert report['state_unchanged'] is True
    assert report['state_before']['0000:00:06.0']['instances'] == []


def test_host_check_notices_a_change_it_did_not_make(tmp_path,
                                                     monkeypatch):
    real_health = nvidia_host_check.health

    def health_and_someone_else(backend, uuid):
        fake_nvml._active.create_gi(uuid, 19, 0)   # not the check's doing
        return real_health(backend, uuid)

    monkeypatch.setattr(nvidia_host_check, 'health',
                        health_and_someone_else)
    out = tmp_path / 'report.json'
    assert nvidia_host_check.main(['--fake', 'h200', '--fake-mig-on',
                                   '--json', str(out)]) == 1
    report = json.loads(out.read_text())
    assert report['state_unchanged'] is False
    [line] = report['changes']
    assert line.startswith('0000:00:06.0:')


def test_mutate_writes_a_labelled_fixture_over_the_fake(tmp_path):
    out = tmp_path / 'fixture.json'
    assert nvidia_host_check.main([
        '--fake', 'h100-pcie', '--mutate', '--gpu', '0000:00:06.0',
        '--fixture', str(out)]) == 0
    fixture = json.loads(out.read_text())
    assert fixture['synthetic'] is True and fixture['gpu'] == \
        'NVIDIA H100 PCIe'
    assert fixture['mig_enable']['activation'] == 'Success'
    assert fixture['mig_disable']['current'] == 0
    assert [row['gi_id'] for row in fixture['placements']
            if row['profile_id'] == 19] == [7, 8, 9, 10, 11, 12, 13]
