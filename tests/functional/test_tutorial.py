# SPDX-License-Identifier: Apache-2.0
"""docs/tutorial.md, run as written.

Every `$ ` line of the tutorial's ```console blocks is run in order, in one
bash session (so its `export`s carry over, as in a user's terminal), from
the repository root, against a cyborg-aio started with the tutorial's own
arguments. Only the loopback URLs are rewritten to the ports this run got
(the tutorial's defaults may be taken on a test machine). Each command must
exit 0 and print what the tutorial says it prints; STEPS below pairs them
in order, so a command added to or removed from the tutorial without a
check here fails too.
"""

import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
import uuid

import pytest
import requests

from cyborg import data
from cyborg_aio import cli as aio_cmd
from cyborg_harness import aio as harness_aio
from cyborg_harness import net
from cyborg_harness import waiting

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
TUTORIAL = os.path.join(ROOT, 'docs', 'tutorial.md')
HOST = 'myhost'  # the host name the tutorial's outputs show
COMMAND_TIMEOUT = 60

# The tutorial's URLs (cyborg-aio's and nova-cyborg-flow's defaults).
DOC_API = 'http://127.0.0.1:6666'
DOC_PLACEMENT = 'http://127.0.0.1:8778'
DOC_METRICS = 'http://127.0.0.1:9740'
DOC_NOVA = 'http://127.0.0.1:8774'

HOSTDEV_PCI = '<hostdev mode="subsystem" type="pci" managed="yes">'

# (regex the command must match, [(regex, times it must occur in the
# output; None: at least once)]), in the tutorial's order.
STEPS = [
    (r'^cyborg-aio ', []),  # started by the test, see _start
    (r'^export OS_CLOUD= OS_AUTH_TYPE=none OS_ENDPOINT=', []),
    (r'^openstack accelerator device list ', [
        (r'\| GPU  \| 10de   \| %s ' % HOST, 2)]),
    (r'^openstack accelerator deployable list$', [
        (r'\| 0000:1b:00\.0 \|', 1), (r'\| 0000:43:00\.0 \|', 1)]),
    (r"^curl .*accelerator 2\.4.*/v2/devices ", [
        (r'"phase": "Ready"', 2), (r'"management_state": "Unclaimed"', 2),
        (r'"mode": "Compute"', 2)]),
    (r'^openstack accelerator device profile create h200-whole ', [
        (r'\| name  \| h200-whole +\|', 1)]),
    (r'^openstack accelerator device profile create h200-vgpu-1g-18gb ', [
        (r'\| name  \| h200-vgpu-1g-18gb +\|', 1)]),
    (r'^openstack accelerator device profile list ', [
        (r'\| h200-whole +\| One whole NVIDIA H200', 1),
        (r'\| h200-vgpu-1g-18gb +\| MIG-backed vGPU', 1)]),
    (r'^export PLACEMENT=', []),
    (r'^openstack \$PLACEMENT resource provider list ', [
        (r'\| %s +\| None ' % HOST, 1),
        (r'\| %s_0000:1b:00\.0 +\|' % HOST, 1),
        (r'\| %s_0000:43:00\.0 +\|' % HOST, 1)]),
    (r'^export GPU0=\$\(openstack \$PLACEMENT resource provider list ', []),
    (r'^openstack \$PLACEMENT resource provider inventory list \$GPU0 ', [
        (r'\| CUSTOM_GPU_MEM_SLICE +\| +0 \| +8 \| +0 \|', 1),
        (r'\| CUSTOM_GPU_OFA +\| +0 \| +1 \| +0 \|', 1)]),
    (r'^openstack \$PLACEMENT --os-placement-api-version 1\.6 resource '
     r'provider trait list \$GPU0$', [
        (r'\| OWNER_CYBORG +\|', 1),
        (r'\| CUSTOM_GPU_MODEL_H200 +\|', 1),
        (r'\| CUSTOM_GPU_PASSTHROUGH_CAPABLE +\|', 1),
        (r'\| CUSTOM_GPU_HOST_DATACENTER +\|', 1),
        (r'\| CUSTOM_GPU_MIG_NON_VM +\|', 1),
        (r'\| CUSTOM_MIG_FIT_1G_18GB +\|', 1),
        (r'CUSTOM_VGPU_', 0)]),
    # A vGPU asks for VGPU: a data-center host has none (empty answer).
    (r'^openstack \$PLACEMENT --os-placement-api-version 1\.17 allocation '
     r'candidate list --resource VGPU=1 ', [(r'.', 0)]),
    (r'^nova-cyborg-flow .* --profile h200-whole --count 2$', [
        (r'^events API: http://127\.0\.0\.1:\d+$', 1),
        (r'^instance [0-9a-f-]{36} on %s$' % HOST, 2),
        (re.escape(HOSTDEV_PCI), 2),
        (r'<address domain="0x0000" bus="0x1b" slot="0x00" '
         r'function="0x0" />', 1),
        (r'<address domain="0x0000" bus="0x43" slot="0x00" '
         r'function="0x0" />', 1),
        (r'  Bound  h200-whole  0 +%s .*PCI 0000:(1b|43):00\.0$' % HOST, 2),
        ('boot failed', 0)]),
    (r'^openstack accelerator arq list -c ', [
        (r'\| Bound \| h200-whole +\|', 2)]),
    (r"^curl .*accelerator 2\.4.*/v2/devices ", [
        (r'"phase": "Passthrough"', 2),
        (r'"management_state": "Managed"', 2)]),
    (r'^curl -s http://127\.0\.0\.1:9740/metrics ', [
        (r'^cyborg_gpu_mig_instances\{.*\} [1-9]', 0),
        (r'^cyborg_device_phase\{device="0000:1b:00\.0",.*'
         r'phase="Passthrough".*\} 1\.0$', 1),
        (r'^cyborg_device_phase\{device="0000:43:00\.0",.*'
         r'phase="Passthrough".*\} 1\.0$', 1),
        (r'^cyborg_device_management_state\{.*state="Managed".*\} 1\.0$',
         2)]),
    (r'^nova-cyborg-flow .*/--delete /', [(r'^deleted [0-9a-f-]{36}$', 2)]),
    (r'^openstack accelerator arq list$', [(r'.', 0)]),
]


def tutorial_commands(path=TUTORIAL):
    """The `$ ` lines of the ```console blocks, `\\` continuations
    joined.
    """
    commands, in_block, pending = [], False, None
    with open(path) as f:
        for line in f:
            line = line.rstrip('\n')
            if line.startswith('```'):
                in_block = line == '```console'
                continue
            if not in_block:
                continue
            if pending is not None:
                pending += ' ' + line.strip()
            elif line.startswith('$ '):
                pending = line[2:].strip()
            else:
                continue  # output
            if pending.endswith('\\'):
                pending = pending[:-1].rstrip()
            else:
                commands.append(pending)
                pending = None
    assert pending is None, 'unfinished command %r' % pending
    return commands


class Shell:
    """One bash session; run() returns (exit status, stdout + stderr)."""

    def __init__(self, cwd, env):
        self.proc = subprocess.Popen(
            ['bash', '--noprofile', '--norc'], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            cwd=cwd, env=env)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.proc.stdin.write('set -o pipefail\n')

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, command, timeout=COMMAND_TIMEOUT):
        marker = '__tutorial_rc_%s__' % uuid.uuid4().hex
        self.proc.stdin.write('%s\necho; echo "%s=$?"\n' % (command, marker))
        self.proc.stdin.flush()
        out = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(
                    timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail('%r still running after %ss:\n%s'
                            % (command, timeout, ''.join(out)))
            if line is None:
                pytest.fail('bash exited during %r:\n%s'
                            % (command, ''.join(out)))
            if line.startswith(marker + '='):
                # Drop the newline the `echo` added before the marker.
                return int(line.split('=')[1]), ''.join(out)[:-1]
            out.append(line)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _start(command, tmp_path, nova_url):
    """cyborg-aio with the tutorial's arguments, on free ports, with a
    state directory of the test's own.
    """
    argv = shlex.split(command)
    assert argv[0] == 'cyborg-aio'
    args = aio_cmd._parser().parse_args(argv[1:])
    assert args.no_demo, command
    assert args.nova_endpoint == DOC_NOVA, command
    # --host-spec: a shipped name or a path, resolved to the file.
    host_spec = argv[argv.index('--host-spec') + 1]
    assert os.path.isfile(args.host_spec), command
    # Everything else the tutorial passes must be one of these.
    known = {'--host-spec', host_spec, '--no-demo', '--state-dir',
             args.state_dir, '--nova-endpoint', args.nova_endpoint}
    assert set(argv[1:]) <= known, command
    config_file = tmp_path / 'cyborg.conf'
    config_file.write_text('[DEFAULT]\nhost = %s\n' % HOST)
    return harness_aio.Aio(
        tmp_path, state_dir=tmp_path / 'state', config_file=config_file,
        host_spec=args.host_spec, nova_endpoint=nova_url)


def _metrics_root(aio):
    """The agent's metrics URL (--metrics-port 0: from the log)."""
    return waiting.eventually(
        lambda: re.search(r'agent-metrics listening on (http://\S+)',
                          aio.logs()),
        'the metrics URL in the log', timeout=10,
        detail=aio.log_tail).group(1)


def _misses(output, checks):
    """[(pattern, found, times)] of the checks `output` fails."""
    missed = []
    for pattern, times in checks:
        found = len(re.findall(pattern, output, re.MULTILINE))
        if not (found >= 1 if times is None else found == times):
            missed.append((pattern, found, times))
    return missed


def _check(command, output, checks):
    for pattern, found, times in _misses(output, checks):
        raise AssertionError(
            '%r: %r found %d time(s), expected %s; output:\n%s' % (
                command, pattern, found, times, output))


def _settled(shell, run, output, checks, timeout=15):
    """The output of a devices listing right after a bind: the phase
    and management state follow the agent's report pass that the bind
    wakes (cyborg.conductor.binder's resync), a second or two later on
    a busy machine. Run again until it shows them, or `timeout` passes.
    """
    deadline = time.monotonic() + timeout
    while _misses(output, checks) and time.monotonic() < deadline:
        time.sleep(0.2)
        _, output = shell.run(run)
    return output


def _wait_settled(aio, timeout=30):
    """After the deletes: both GPUs free again (the first one back on
    nvidia), as the report pass the unbinds trigger records it.
    """
    deadline = time.monotonic() + timeout
    while True:
        devices = requests.get(
            aio.api + '/devices', timeout=10,
            headers={'OpenStack-API-Version': 'accelerator 2.4'},
        ).json()['devices']
        if sorted((d['phase'], d['management_state'])
                  for d in devices) == [('Ready', 'Unclaimed')] * 2:
            return
        assert time.monotonic() < deadline, (devices, aio.logs())
        time.sleep(0.2)


def _shipped_profile(name):
    [profile] = data.profile(name)
    return profile


def test_tutorial_commands_are_checked():
    commands = tutorial_commands()
    assert len(commands) == len(STEPS), commands
    for command, (pattern, _) in zip(commands, STEPS):
        assert re.search(pattern, command), (command, pattern)


def test_tutorial_runs(tmp_path):
    commands = tutorial_commands()
    assert len(commands) == len(STEPS), commands
    nova_port = net.free_port()
    nova_url = 'http://127.0.0.1:%d' % nova_port
    aio = _start(commands[0], tmp_path, nova_url)
    shell = None
    try:
        api_root = aio.api[:-len('/v2')]
        metrics_root = _metrics_root(aio)
        env = dict(os.environ, OS_CLOUD='')
        for name in list(env):
            if name.startswith('OS_') and name != 'OS_CLOUD':
                del env[name]  # the tutorial sets what it needs
        env['PATH'] = os.path.dirname(sys.executable) + os.pathsep + \
            env.get('PATH', '')
        shell = Shell(ROOT, env)
        for command, (pattern, checks) in zip(commands[1:], STEPS[1:]):
            assert re.search(pattern, command), (command, pattern)
            run = (command.replace(DOC_API, api_root)
                   .replace(DOC_PLACEMENT, aio.placement)
                   .replace(DOC_METRICS, metrics_root))
            if command.startswith('nova-cyborg-flow ') \
                    and '--profile' in command:
                run += ' --listen 127.0.0.1:%d' % nova_port
            code, output = shell.run(run)
            assert code == 0, '%r exited %d:\n%s\n%s' % (
                command, code, output, aio.logs())
            if '/v2/devices' in command:
                output = _settled(shell, run, output, checks)
            _check(command, output, checks)
            if 'profile create' in command:
                # The tutorial's --group is the shipped JSON's group.
                name = shlex.split(command)[5]
                shipped = _shipped_profile(name)
                got = requests.get(aio.api + '/device_profiles',
                                   params={'name': name}, timeout=10).json()
                [profile] = got['device_profiles']
                assert profile['groups'] == shipped['groups'], name
                assert profile['description'] == shipped['description']
        resp = requests.get(aio.api + '/accelerator_requests', timeout=10)
        assert resp.json()['arqs'] == []
        _wait_settled(aio)
    finally:
        if shell is not None:
            shell.close()
        code = aio.stop()
    assert code == 0, aio.logs()
