# SPDX-License-Identifier: Apache-2.0
"""The MPS control daemon per GPU (cyborg.drivers.nvidia.mps) against the
fake control program, run as a subprocess exactly as the real one is."""

import os
import sys

import pytest

from cyborg.drivers.nvidia import mps
from cyborg_emulators.nvidia import fake_mps_control

FAKE = '%s -m cyborg_emulators.nvidia.fake_mps_control' % sys.executable
GPU = 'GPU-5c1a0d0e-0000-4000-8000-000000000001'


@pytest.fixture
def daemons(tmp_path):
    return mps.MpsDaemons(str(tmp_path / 'mps'), FAKE)


def test_daemon_pinned_to_its_gpu_with_the_ceiling(daemons, tmp_path):
    assert not daemons.running(GPU)
    daemons.ensure(GPU, 25, 16384)
    pipe, logs = daemons.directories(GPU)
    assert pipe == str(tmp_path / 'mps' / GPU / 'pipe')
    state = fake_mps_control.load(pipe)
    assert (state['visible_devices'], state['log_dir']) == (GPU, logs)
    assert state['default_thread_percentage'] == 25.0
    assert state['default_pinned_mem_limit'] == {'0': '16384M'}
    assert os.path.exists(os.path.join(pipe, fake_mps_control.PID_FILE))
    # The daemon logs each command, as the real one does in control.log.
    with open(os.path.join(logs, 'control.log')) as f:
        assert 'Cmd:set_default_device_pinned_mem_limit 0 16384M' in f.read()
    # Seen alive a moment ago: not even asked again.
    before = fake_mps_control.commands(pipe)
    daemons.ensure(GPU, 25, 16384)
    assert fake_mps_control.commands(pipe) == before
    # A restarted agent adopts the running daemon (not started twice) and
    # sets its ceiling again.
    again = mps.MpsDaemons(str(tmp_path / 'mps'), FAKE)
    again.ensure(GPU, 30, 8192)
    assert fake_mps_control.load(pipe)['pid'] == state['pid']
    assert fake_mps_control.commands(pipe)[len(before):] == [
        'get_server_list', 'get_server_list',
        'set_default_active_thread_percentage 30',
        'set_default_device_pinned_mem_limit 0 8192M']


def test_dead_daemon_started_again(daemons, monkeypatch):
    monkeypatch.setattr(mps, 'RECHECK_AFTER', 0.0)
    daemons.ensure(GPU, 25, 16384)
    pipe, _ = daemons.directories(GPU)
    # Gone behind the agent's back (killed, host cleanup).
    assert fake_mps_control.control(
        {'CUDA_MPS_PIPE_DIRECTORY': pipe}, 'quit\n') == (0, '')
    daemons.ensure(GPU, 25, 16384)
    assert fake_mps_control.load(pipe)['default_pinned_mem_limit'] == {
        '0': '16384M'}


def test_ceiling_reaches_running_servers(daemons):
    daemons.ensure(GPU, 10, 1024)
    pipe, _ = daemons.directories(GPU)
    daemons.control(GPU, 'start_server -uid 1000')
    [server] = daemons.servers(GPU)
    daemons.set_ceiling(GPU, 50, 40960)
    assert daemons.control(GPU, 'get_active_thread_percentage %d'
                           % server).strip() == '50.0'
    assert daemons.control(GPU, 'get_device_pinned_mem_limit %d 0'
                           % server).strip() == '40960M'
    # Unchanged ceiling: no command sent.
    before = len(fake_mps_control.commands(pipe))
    daemons.set_ceiling(GPU, 50, 40960)
    assert len(fake_mps_control.commands(pipe)) == before


def test_client_env_only_lowers_the_ceiling(daemons):
    daemons.ensure(GPU, 50, 32768)
    pipe, _ = daemons.directories(GPU)
    env = daemons.client_env(GPU, 25, 16384)
    assert env == {'CUDA_MPS_PIPE_DIRECTORY': pipe,
                   'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': '25',
                   'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT': '0=16384M'}
    assert fake_mps_control.connect_client(pipe, 7, 1000, env) == {
        'thread_percentage': 25.0, 'pinned_mem_limit_mib': 16384}
    greedy = dict(env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='100',
                  CUDA_MPS_PINNED_DEVICE_MEM_LIMIT='0=140G')
    assert fake_mps_control.connect_client(pipe, 8, 1000, greedy) == {
        'thread_percentage': 50.0, 'pinned_mem_limit_mib': 32768}


def test_refusals_are_errors(daemons):
    with pytest.raises(mps.MpsError, match='refused get_server_list'):
        daemons.servers(GPU)
    daemons.ensure(GPU, 10, 1024)
    with pytest.raises(mps.MpsError, match='Invalid memory limit 12'):
        daemons.control(GPU, 'set_default_device_pinned_mem_limit 0 12')
    with pytest.raises(mps.MpsError, match='Invalid percentage 0'):
        daemons.control(GPU, 'set_default_active_thread_percentage 0')
    with pytest.raises(mps.MpsError, match='No MPS server with PID 1'):
        daemons.control(GPU, 'set_active_thread_percentage 1 10')


def test_stop_quits_the_daemon(daemons):
    daemons.ensure(GPU, 10, 1024)
    pipe, _ = daemons.directories(GPU)
    daemons.stop(GPU)
    assert fake_mps_control.load(pipe) is None
    assert not os.path.exists(os.path.join(pipe, fake_mps_control.PID_FILE))
    daemons.stop(GPU)           # nothing running: nothing to do


def test_missing_program_is_a_start_failure(tmp_path):
    daemons = mps.MpsDaemons(str(tmp_path), '/nonexistent/mps-control')
    with pytest.raises(mps.MpsError, match='did not start'):
        daemons.ensure(GPU, 10, 1024)


@pytest.mark.parametrize('cc, ok', [((9, 0), True), ((7, 0), True),
                                    ((6, 1), False), ((), False)])
def test_compute_capability(cc, ok):
    assert (mps.supported(cc) is None) == ok
