# SPDX-License-Identifier: Apache-2.0
"""cyborg-aio: the whole service in one foreground process.

Our API and the real Placement service on loopback, SQLite databases in a
state directory, no Keystone (or, with --keystone, a real one).
SIGINT/SIGTERM stop it; starting again with the same --state-dir keeps the
data.
"""

import argparse
import logging
import os
import signal
import sys
import threading

from cyborg.common import config
from cyborg.common import service
from cyborg.conf import CONF
from cyborg import data
from cyborg_aio import stack as embedded


def _host_spec(value):
    """--host-spec: a shipped host's name or a file, as a path."""
    try:
        return data.fake_host(value)
    except data.NotFound as e:
        raise argparse.ArgumentTypeError(str(e))


def _parser():
    parser = argparse.ArgumentParser(
        prog='cyborg-aio',
        description='Run the accelerator API and OpenStack Placement in one '
                    'process, with SQLite state and no authentication '
                    '(API: auth_strategy=noauth; Placement: noauth2, send '
                    '"X-Auth-Token: admin").',
        epilog='Once both servers listen it prints one line to stdout, '
               '"cyborg-aio ready: api=http://127.0.0.1:PORT/v2 '
               'placement=http://127.0.0.1:PLACEMENT_PORT" (logs go to '
               'stderr). Then, unless --no-demo, the demo: it creates the '
               'device profiles demo-gpu, demo-fpga and demo-gpu-fpga if '
               'absent, boots one instance with each the way Nova does '
               '(Placement candidates and claim, ARQs, bind, events) and '
               'prints their libvirt <hostdev> XML and ARQs; the '
               'instances stay, and the next start replaces them. With a '
               'host spec of NVIDIA GPUs the demo boots what a VM can get '
               'there with the shipped device profiles instead: on '
               'h200-vgpu (vGPU Manager) time-sliced and MIG-backed '
               'vGPUs, on h200-dc (data-center driver) a whole H200, and '
               'it shows that a vGPU profile finds no candidate there. '
               'On the terminal only warnings and errors are logged '
               '(everything with --debug); STATE_DIR/cyborg-aio.log has '
               'the INFO log. '
               'Ctrl-C or SIGTERM stops it (exit status 0); '
               'starting again with the same --state-dir keeps the data.')
    parser.add_argument(
        '--state-dir', default=embedded.default_state_dir(),
        help='Directory for cyborg.sqlite and placement.sqlite; created if '
             'missing, kept across restarts (default: '
             '$XDG_DATA_HOME/cyborg-aio, i.e. ~/.local/share/cyborg-aio; '
             'here %(default)s).')
    parser.add_argument('--port', type=int, default=6666,
                        help='API port on 127.0.0.1; 0 picks a free one '
                             '(default: %(default)s).')
    parser.add_argument('--placement-port', type=int, default=8778,
                        help='Placement port on 127.0.0.1; 0 picks a free '
                             'one (default: %(default)s).')
    parser.add_argument('--nova-port', type=int, default=8774,
                        help='Port on 127.0.0.1 of the Nova external events '
                             'API (POST /os-server-external-events, from '
                             'nova_cyborg_client) that [nova] points at; 0 '
                             'picks a free one (default: %(default)s).')
    parser.add_argument('--nova-endpoint', metavar='URL',
                        help='Send the events to this Nova instead (e.g. '
                             'python -m nova_cyborg_client.flow, which '
                             'listens on http://127.0.0.1:8774); no events '
                             'API is served here and there is no demo.')
    parser.add_argument('--no-demo', action='store_true',
                        help='Do not run the demo (see below).')
    parser.add_argument('--metrics-port', type=int, default=9740,
                        help='Port of the agent\'s Prometheus /metrics '
                             '(default 9740; the API serves its own at '
                             '/metrics).')
    parser.add_argument('--host-spec', metavar='NAME|FILE',
                        type=_host_spec,
                        help='Fake host description: the name of a shipped '
                             'one (%s) or a YAML file of your own: '
                             '"devices" for the fake driver, "nvidia" for '
                             'GPUs served by the nvidia driver over a fake '
                             'NVML and sysfs (default: gpu-host).'
                             % ', '.join(data.names(data.FAKE_HOSTS)))
    parser.add_argument('--config-file', action='append', default=[],
                        metavar='PATH',
                        help='Optional cyborg.conf file(s); the state '
                             'directory, database and auth settings above '
                             'win over them. May be repeated.')
    parser.add_argument('--auth-strategy', choices=('noauth', 'keystone'),
                        default='noauth',
                        help='noauth (default): no Keystone anywhere. '
                             'keystone: the API, Placement and the Nova '
                             'events API validate tokens with the Keystone '
                             'of the config files\' [keystone_authtoken]; '
                             'the conductor and the agent call Placement and '
                             'Nova as the service user of [placement] and '
                             '[nova]')
    parser.add_argument('--keystone', action='store_true',
                        help='Start a real Keystone too (the keystone '
                             'package: pip install keystone), its state in '
                             'STATE_DIR/keystone, and run behind it as with '
                             '--auth-strategy keystone: the API, Placement '
                             'and the events API are in its catalog, and '
                             'STATE_DIR/clouds.yaml has a password-auth cloud '
                             '"cyborg-aio" (an admin with the service role) '
                             'and one per persona ("cyborg-aio-member_a", '
                             '...): OS_CLIENT_CONFIG_FILE=STATE_DIR/'
                             'clouds.yaml openstack --os-cloud cyborg-aio '
                             'accelerator device list.')
    parser.add_argument('--keystone-port', type=int, default=5000,
                        help='Keystone\'s port on 127.0.0.1 with '
                             '--keystone; 0 picks a free one (default: '
                             '%(default)s).')
    parser.add_argument('--debug', action='store_true',
                        help='Log at DEBUG level, on the terminal too '
                             '(otherwise the terminal gets warnings and '
                             'errors only, the log file INFO).')
    return parser


LOG_FILE = 'cyborg-aio.log'


def ready_line(stack, log_file=None):
    line = 'cyborg-aio ready: api=%s placement=%s' % (stack.api_url,
                                                      stack.placement_url)
    return line + (' log=%s' % log_file if log_file else '')


def _start_demo(stack):
    """The demo runs beside wait(), so a signal still stops us at once."""
    from cyborg_aio import demo

    kwargs = {}
    if stack.fake_gpus is not None:
        from cyborg_emulators.nvidia import fake_mdev

        # Nova's mdevs on the fake tree, made at the write as the kernel
        # makes them.
        kwargs = {'plan': demo.gpu_plan(stack.fake_gpus.spec),
                  'metrics_url': stack.metrics_url,
                  'mdev_creator': fake_mdev.KernelMdevCreator(
                      stack.fake_gpus.root)}
    # Stopped (Ctrl-C) while the demo still calls the services: one line,
    # not the errors of its refused requests.
    kwargs['stopping'] = lambda: stack.stop_requested
    threading.Thread(target=demo.run, name='demo', daemon=True, args=(
        stack.nova_receiver, stack.api_url, stack.placement_url, sys.stdout,
    ), kwargs=kwargs).start()


CLOUD = 'cyborg-aio'
# The persona of the `cyborg-aio` cloud: an admin with the service role,
# allowed everything the clients do (binding is the service role's).
CLOUD_PERSONA = 'operator'


def _start_keystone(args):
    """A real Keystone in STATE_DIR/keystone; the cyborg.conf lines for
    running behind it come first among the config files (the user's may
    override them).
    """
    from cyborg_aio import keystone

    if not keystone.available():
        raise OSError('--keystone needs the keystone package '
                      '(pip install keystone)')
    os.makedirs(args.state_dir, exist_ok=True)
    server = keystone.Keystone(os.path.join(args.state_dir, 'keystone'),
                               port=args.keystone_port).start()
    path = os.path.join(args.state_dir, 'keystone-auth.conf')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        f.write(server.cyborg_config())
    args.config_file = [path] + args.config_file
    args.auth_strategy = 'keystone'
    return server


def _publish(keystone, stack, state_dir):
    """The stack's endpoints in Keystone's catalog, and clouds.yaml."""
    keystone.set_endpoint('accelerator', stack.api_url)
    keystone.set_endpoint('placement', stack.placement_url)
    if stack.nova_receiver is not None:
        keystone.set_endpoint('compute', stack.nova_url)
    return keystone.clouds_yaml(os.path.join(state_dir, 'clouds.yaml'),
                                prefix=CLOUD + '-',
                                aliases={CLOUD: CLOUD_PERSONA})


def main(argv=None):
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    args.state_dir = os.path.abspath(args.state_dir)
    keystone = None
    if args.keystone:
        try:
            keystone = _start_keystone(args)
        except Exception as e:
            print('cyborg-aio: cannot start keystone: %s' % e,
                  file=sys.stderr)
            return 1
    try:
        return _run(args, keystone)
    finally:
        if keystone is not None:
            keystone.stop()


def _run(args, keystone):
    oslo_args = ['--debug'] if args.debug else []
    for path in args.config_file:
        oslo_args += ['--config-file', path]
    # Only the files named: an all-in-one never reads /etc/cyborg. The
    # terminal gets warnings and errors (the demo's output stays
    # readable), the log file in the state directory INFO and up.
    os.makedirs(args.state_dir, exist_ok=True)
    config.parse_args(oslo_args, config_files=[], log_to_stderr=True,
                      log_file=os.path.join(args.state_dir, LOG_FILE),
                      stderr_level=logging.WARNING)

    stack = embedded.EmbeddedStack(args.state_dir, port=args.port,
                                   placement_port=args.placement_port,
                                   host_spec=args.host_spec, conf=CONF,
                                   nova_port=args.nova_port,
                                   nova_endpoint=args.nova_endpoint,
                                   metrics_port=args.metrics_port,
                                   auth_strategy=args.auth_strategy)

    def _on_signal(signum, frame):
        stack.request_stop()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    try:
        stack.start()
    except OSError as e:  # typically a port already in use
        print('cyborg-aio: cannot start: %s' % e, file=sys.stderr)
        return 1
    service.settle_heap()
    try:
        if keystone is not None:
            clouds = _publish(keystone, stack, args.state_dir)
        print(ready_line(stack, config.log_file_path()), flush=True)
        if keystone is not None:
            print('cyborg-aio keystone: %s clouds.yaml: %s (cloud %s)'
                  % (keystone.auth_url, clouds, CLOUD), flush=True)
        # The demo calls the API without tokens: noauth only.
        if not args.no_demo and stack.nova_receiver is not None \
                and args.auth_strategy == 'noauth':
            _start_demo(stack)
        clean = stack.wait()
    finally:
        stack.stop()
    return 0 if clean else 1


if __name__ == '__main__':
    sys.exit(main())
