# SPDX-License-Identifier: Apache-2.0
"""A fake `nvidia-cuda-mps-control`: the MPS control program as a test
double that keeps its daemon's state in the pipe directory and records
every command, the way the real daemon logs them to control.log.

Run it as the real program is run (`[nvidia] mps_control_command =
python -m cyborg_emulators.nvidia.fake_mps_control`):

- `-d` starts "the daemon" for CUDA_MPS_PIPE_DIRECTORY (default
  /tmp/nvidia-mps) pinned to CUDA_VISIBLE_DEVICES; a second `-d` on the
  same pipe directory fails while one runs;
- without arguments it reads commands, one a line, from stdin and answers
  them like the daemon's interactive shell; with no daemon on the pipe
  directory it fails.

Modelled on NVIDIA's MPS guide (docs.nvidia.com/deploy/mps, "Appendix:
Tools and Interface Reference" and "MPS Logging Format"): the command
names and arguments, defaults that only reach servers spawned later,
set_* <PID> for running servers, memory values "<int>M|G", thread
percentages (default 100), servers per user id, the control daemon's PID
file nvidia-cuda-mps-control.pid in the pipe directory and "Cmd:" lines
in <log dir>/control.log. The answers' wording is ours, not NVIDIA's.
Standard library only, so it starts fast as a subprocess.
"""

import json
import os
import re
import sys
import time

STATE = 'fake-mps-control.json'
PID_FILE = 'nvidia-cuda-mps-control.pid'
DEFAULT_PIPE = '/tmp/nvidia-mps'
DEFAULT_LOG = '/var/log/nvidia-mps'
_VALUE = re.compile(r'^(\d+)([MG])$')
_FIRST_PID = 41000


class Refused(Exception):
    pass


def _path(pipe):
    return os.path.join(pipe, STATE)


def load(pipe):
    """The daemon state of a pipe directory, or None (no daemon)."""
    try:
        with open(_path(pipe)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _save(pipe, state):
    tmp = _path(pipe) + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(state, f, indent=1, sort_keys=True)
    os.replace(tmp, _path(pipe))


def commands(pipe):
    """Every command the daemon of `pipe` received, in order."""
    state = load(pipe)
    return list(state['commands']) if state else []


def _log(state, line):
    path = os.path.join(state['log_dir'], 'control.log')
    try:
        with open(path, 'a') as f:
            f.write('[%s Control %6d] %s\n' % (
                time.strftime('%Y-%m-%d %H:%M:%S'), state['pid'], line))
    except OSError:
        pass


def start(env):
    pipe = env.get('CUDA_MPS_PIPE_DIRECTORY') or DEFAULT_PIPE
    logs = env.get('CUDA_MPS_LOG_DIRECTORY') or DEFAULT_LOG
    if load(pipe) is not None:
        raise Refused('An MPS control daemon already runs on %s' % pipe)
    if not os.path.isdir(pipe) or not os.path.isdir(logs):
        raise Refused('Cannot use %s / %s' % (pipe, logs))
    state = {'pid': os.getpid(), 'pipe_dir': pipe, 'log_dir': logs,
             'visible_devices': env.get('CUDA_VISIBLE_DEVICES'),
             'default_thread_percentage': 100.0,
             'default_pinned_mem_limit': {},
             'servers': {}, 'next_pid': _FIRST_PID, 'commands': []}
    with open(os.path.join(pipe, PID_FILE), 'w') as f:
        f.write('%d\n' % state['pid'])
    _log(state, 'Starting control daemon using socket %s/control' % pipe)
    _save(pipe, state)


def _percent(text):
    try:
        value = float(text)
    except ValueError:
        raise Refused('Invalid percentage %s' % text)
    if not 0 < value <= 100:
        raise Refused('Invalid percentage %s' % text)
    return value


def _mem(text):
    if not _VALUE.match(text or ''):
        raise Refused('Invalid memory limit %s: an integer and M or G'
                      % text)
    return text


def _server(state, pid):
    server = state['servers'].get(str(pid))
    if server is None:
        raise Refused('No MPS server with PID %s' % pid)
    return server


def _new_server(state, uid):
    pid = state['next_pid']
    state['next_pid'] += 1
    state['servers'][str(pid)] = {
        'uid': uid, 'clients': [],
        'thread_percentage': state['default_thread_percentage'],
        'pinned_mem_limit': dict(state['default_pinned_mem_limit'])}
    return pid


def execute(state, line):
    """One command of the interactive shell: its answer, or Refused."""
    words = line.split()
    if not words:
        return ''
    cmd, args = words[0], words[1:]
    state['commands'].append(' '.join(words))
    _log(state, 'Cmd:' + ' '.join(words))
    if cmd == 'get_server_list':
        return ''.join('%s\n' % pid for pid in sorted(state['servers']))
    if cmd == 'start_server' and len(args) == 2 and args[0] == '-uid':
        uid = int(args[1])
        for pid, server in state['servers'].items():
            if server['uid'] == uid:
                return ''
        _new_server(state, uid)
        return ''
    if cmd == 'get_client_list' and len(args) == 1:
        return ''.join('%d\n' % c['pid']
                       for c in _server(state, args[0])['clients'])
    if cmd == 'set_default_active_thread_percentage' and len(args) == 1:
        state['default_thread_percentage'] = _percent(args[0])
        return ''
    if cmd == 'get_default_active_thread_percentage' and not args:
        return '%.1f\n' % state['default_thread_percentage']
    if cmd == 'set_active_thread_percentage' and len(args) == 2:
        _server(state, args[0])['thread_percentage'] = _percent(args[1])
        return ''
    if cmd == 'get_active_thread_percentage' and len(args) == 1:
        return '%.1f\n' % _server(state, args[0])['thread_percentage']
    if cmd == 'set_default_device_pinned_mem_limit' and len(args) == 2:
        state['default_pinned_mem_limit'][args[0]] = _mem(args[1])
        return ''
    if cmd == 'get_default_device_pinned_mem_limit' and len(args) == 1:
        return '%s\n' % state['default_pinned_mem_limit'].get(args[0], '0')
    if cmd == 'set_device_pinned_mem_limit' and len(args) == 3:
        _server(state, args[0])['pinned_mem_limit'][args[1]] = _mem(args[2])
        return ''
    if cmd == 'get_device_pinned_mem_limit' and len(args) == 2:
        return '%s\n' % _server(state, args[0])['pinned_mem_limit'].get(
            args[1], '0')
    if cmd == 'quit' and not args:
        return None
    raise Refused('Invalid command: %s' % line.strip())


def control(env, text):
    """The interactive shell over `text`: (exit status, output)."""
    pipe = env.get('CUDA_MPS_PIPE_DIRECTORY') or DEFAULT_PIPE
    state = load(pipe)
    if state is None:
        return 1, 'Cannot find MPS control daemon process on %s\n' % pipe
    out = []
    status = 0
    for line in text.splitlines():
        try:
            answer = execute(state, line)
        except Refused as e:
            out.append('%s\n' % e)
            status = 1
            break
        if answer is None:          # quit
            _log(state, 'Exit')
            os.remove(_path(pipe))
            try:
                os.remove(os.path.join(pipe, PID_FILE))
            except OSError:
                pass
            return status, ''.join(out)
        out.append(answer)
    _save(pipe, state)
    return status, ''.join(out)


def _limit_mib(value):
    m = _VALUE.match(value or '')
    if not m:
        return None
    return int(m.group(1)) * (1024 if m.group(2) == 'G' else 1)


def connect_client(pipe, pid, uid, client_env):
    """A CUDA process connecting through `pipe`: the daemon spawns (or
    reuses) the server of its user id, and the client gets the server's
    limits, further constrained by its own CUDA_MPS_* environment (never
    loosened). Returns the client's effective {thread_percentage,
    pinned_mem_limit_mib}; None without a daemon (CUDA then runs
    without MPS, as the guide says).
    """
    state = load(pipe)
    if state is None:
        return None
    server_pid = next((int(p) for p, s in state['servers'].items()
                       if s['uid'] == uid), None)
    if server_pid is None:
        server_pid = _new_server(state, uid)
    server = state['servers'][str(server_pid)]
    percent = server['thread_percentage']
    wanted = client_env.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE')
    if wanted:
        percent = min(percent, float(wanted))
    limit = _limit_mib(server['pinned_mem_limit'].get('0'))
    for item in (client_env.get('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT')
                 or '').split(','):
        dev, _, value = item.partition('=')
        mib = _limit_mib(value.strip())
        if dev.strip() == '0' and mib is not None:
            limit = mib if limit is None else min(limit, mib)
    client = {'pid': pid, 'thread_percentage': percent,
              'pinned_mem_limit_mib': limit}
    server['clients'].append(client)
    _save(pipe, state)
    return {k: client[k] for k in ('thread_percentage',
                                   'pinned_mem_limit_mib')}


def main(argv=None, env=None, stdin=None):
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    if argv == ['-d']:
        try:
            start(env)
        except Refused as e:
            sys.stdout.write('%s\n' % e)
            return 1
        return 0
    if argv:
        sys.stdout.write('usage: nvidia-cuda-mps-control [-d]\n')
        return 1
    status, out = control(env, (stdin or sys.stdin).read())
    sys.stdout.write(out)
    return status


if __name__ == '__main__':
    sys.exit(main())
