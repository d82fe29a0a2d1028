# SPDX-License-Identifier: Apache-2.0
"""README.md's "Talking to it", followed top to bottom.

Every command of the section's code blocks is read from README.md and run
in order, in one bash session (its `export`s and `unset`s carry over as in
a user's terminal), after the quick start's `cyborg-aio` (default host,
demo included) has run its demo. Only the loopback ports and the default
state directory are rewritten to this run's own. A `cyborg-aio` line
starts that cyborg-aio (through the harness, on the same state) and
requires the one before to have been stopped: by `kill %1` in the block,
or by the README telling the reader to press Ctrl-C just before. Each
command must exit 0 and print no API error; the last block (a cloud's
Nova) is the only one not run, and that is checked too.
"""

import os
import re
import shlex
import sys

import pytest

from cyborg_aio import cli as aio_cmd
from cyborg_harness import aio as harness_aio
from cyborg_harness import keystone
from cyborg_harness import net
from tests.functional import test_tutorial

ROOT = test_tutorial.ROOT
README = os.path.join(ROOT, 'README.md')
SECTION = '## Talking to it'
DOC_API = 'http://127.0.0.1:6666'
DOC_PLACEMENT = 'http://127.0.0.1:8778'
DOC_NOVA = 'http://127.0.0.1:8774'
DOC_STATE = '~/.local/share/cyborg-aio'
# The block that needs a cloud's Nova: shown, not run.
NOT_RUN = ('openstack flavor set ',)
# What an error looks like in our API's, Placement's and curl's output.
ERRORS = re.compile(r'"error_message"|"errors": \[|^curl: \(\d+\)', re.M)
COMMAND_TIMEOUT = 120


def section_blocks(path=README):
    """[(prose before the block, [command, ...])] of "Talking to it", `\\`
    continuations joined.
    """
    with open(path) as f:
        text = f.read()
    start = text.index(SECTION)
    end = text.index('\n## ', start + len(SECTION))
    parts = text[start:end].split('```')
    blocks = []
    for prose, body in zip(parts[0::2], parts[1::2]):
        commands, pending = [], ''
        for line in body.strip('\n').replace('\\\n', ' ').splitlines():
            pending += ('\n' if pending else '') + line
            try:
                shlex.split(pending)
            except ValueError:
                continue    # a quoted string goes on on the next line
            if pending.strip():
                commands.append(pending.strip())
            pending = ''
        assert not pending, 'unfinished command %r' % pending
        blocks.append((prose, commands))
    return blocks


def test_readme_blocks_are_known():
    blocks = section_blocks()
    run = [c for _, cs in blocks for c in cs
           if not c.startswith(NOT_RUN)]
    assert [c for c in run if c.startswith('cyborg-aio ')] == [
        'cyborg-aio --no-demo --nova-endpoint %s &' % DOC_NOVA,
        'cyborg-aio --keystone --no-demo &']
    assert [cs[0] for _, cs in blocks if cs[0].startswith(NOT_RUN)] == [
        'openstack flavor set --property accel:device_profile=one-h200 '
        'gpu.large']


class Stack:
    """The cyborg-aio the README has running at each point."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.state = tmp_path / 'state'
        self.nova_port = net.free_port()
        self.aio = None
        self.count = 0

    def start(self, command):
        argv = shlex.split(command.rstrip('&').strip())
        assert argv[0] == 'cyborg-aio', command
        args = aio_cmd._parser().parse_args(argv[1:])
        extra = []
        nova = None
        if args.nova_endpoint:
            assert args.nova_endpoint == DOC_NOVA, command
            nova = 'http://127.0.0.1:%d' % self.nova_port
        if args.keystone:
            if not keystone.available():
                pytest.skip('the keystone package is not installed')
            extra = ['--keystone', '--keystone-port', '0']
        known = {'--no-demo', '--keystone', '--nova-endpoint',
                 args.nova_endpoint, '&'}
        assert set(argv[1:]) <= known, command
        self.count += 1
        self.aio = harness_aio.Aio(
            self.tmp_path, state_dir=self.state, host_spec=None,
            demo=not args.no_demo, nova_endpoint=nova, extra_args=extra,
            timeout=300 if args.keystone else 120,
            name='aio-%d' % self.count)
        if not args.no_demo:
            out = self.aio.read_until(
                r'^demo: \d+ of \d+ instance\(s\) booted')
            assert 'demo: 2 of 2 instance(s) booted' in out, (
                out + self.aio.logs())

    def stop(self):
        assert self.aio is not None, 'no cyborg-aio to stop'
        assert self.aio.stop() == 0, self.aio.logs()
        self.aio = None

    def rewrite(self, command):
        root = self.aio.api[:-len('/v2')]
        out = (command.replace(DOC_API, root)
               .replace(DOC_PLACEMENT, self.aio.placement)
               .replace(DOC_STATE, str(self.state)))
        if command.startswith('nova-cyborg-flow ') and '--profile' in out:
            out += ' --listen 127.0.0.1:%d' % self.nova_port
        return out


def test_readme_talking_to_it_in_order(tmp_path):
    blocks = section_blocks()
    stack = Stack(tmp_path)
    env = dict(os.environ, OS_CLOUD='')
    for name in list(env):
        if name.startswith('OS_') and name != 'OS_CLOUD':
            del env[name]
    env['PATH'] = os.path.dirname(sys.executable) + os.pathsep + \
        env.get('PATH', '')
    shell = None
    ran = []
    try:
        # The quick start: `cyborg-aio` in its own terminal, demo and all.
        stack.start('cyborg-aio')
        shell = test_tutorial.Shell(str(tmp_path), env)
        for prose, commands in blocks:
            if commands[0].startswith(NOT_RUN):
                continue
            for command in commands:
                if command.startswith('cyborg-aio '):
                    if stack.aio is not None:
                        # The README said to stop it, just before.
                        assert 'Ctrl-C' in prose, prose
                        stack.stop()
                    stack.start(command)
                    ran.append(command)
                    continue
                if command == 'kill %1 && wait %1':
                    stack.stop()
                    ran.append(command)
                    continue
                code, output = shell.run(stack.rewrite(command),
                                         timeout=COMMAND_TIMEOUT)
                assert code == 0, '%r exited %d:\n%s\n%s' % (
                    command, code, output, stack.aio.logs())
                assert not ERRORS.search(output), (command, output)
                ran.append(command)
                _check(command, output)
    finally:
        if shell is not None:
            shell.close()
        if stack.aio is not None:
            stack.stop()
    assert len(ran) == sum(len(cs) for _, cs in blocks
                           if not cs[0].startswith(NOT_RUN))


def _check(command, output):
    """What a few commands must show, beyond exiting 0."""
    if command.startswith('nova-cyborg-flow '):
        assert re.search(r'^instance [0-9a-f-]{36} on \S+$', output,
                         re.M), output
        assert '<hostdev' in output, output
    elif command.startswith('openstack accelerator device profile show'):
        assert 'one-h200' in output, output
    elif command.startswith('openstack accelerator arq create'):
        assert 'one-fpga-fn' in output, output
    elif 'accelerator device list' in command:
        assert output.count('| GPU ') == 2, output
