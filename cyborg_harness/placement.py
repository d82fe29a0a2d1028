# SPDX-License-Identifier: Apache-2.0
"""The real Placement service: as a process of its own (distributed
deployments; `python -m cyborg_harness.placement`), or served in this
process (one per process: its DB layer is process-global).

Both run cyborg_aio.placement's app (noauth2: send X-Auth-Token: admin),
on SQLite in the state directory unless given another database URL.
"""

import argparse
import os
import re
import sys

from cyborg_harness import net
from cyborg_harness import processes

READY = re.compile(r'placement ready (\S+)')
HEADERS = {'X-Auth-Token': 'admin',
           'OpenStack-API-Version': 'placement 1.26'}


def _app(state_dir, connection=None):
    from cyborg_aio import placement

    conf = placement.build_conf(state_dir)
    if connection:
        conf.set_override('connection', connection,
                          group='placement_database')
    return placement.load_app(conf)


class PlacementProcess(processes.Process):
    """Placement in a child process; `url` once it listens. Its state
    (SQLite database) in `state_dir`, default WORKDIR/placement: a
    restart on the same port and state_dir is the same Placement.
    """

    def __init__(self, workdir, connection=None, port=0, timeout=180,
                 name='placement', state_dir=None):
        self.state_dir = state_dir or os.path.join(workdir, 'placement')
        os.makedirs(self.state_dir, exist_ok=True)
        # A port named, never 0: cheroot sets SO_REUSEADDR only then, and
        # without it the connections a stopped Placement left half-closed
        # (FIN-WAIT-2 until clients close theirs) keep a restart on the
        # same port from binding.
        port = port or net.free_port()
        argv = [sys.executable, '-m', 'cyborg_harness.placement',
                '--state-dir', self.state_dir, '--port', str(port)]
        if connection:
            argv += ['--connection', connection]
        super().__init__(name, argv, workdir,
                         env={'PYTHONWARNINGS': 'ignore::DeprecationWarning'})
        self.url = None
        try:
            match = self.wait_for(lambda: READY.search(self.logs()),
                                  'ready line', timeout)
        except BaseException:
            self.stop()
            raise
        self.url = match.group(1)
        self.port = int(self.url.rsplit(':', 1)[1])

    def problems(self, keys=('Traceback', 'ERROR', 'CRITICAL', 'locked',
                             'Error')):
        return super().problems(keys)


class InProcessPlacement:
    """Placement served on a loopback port by a thread of this process."""

    def __init__(self, state_dir, connection=None, port=0):
        from cyborg.common import wsgi_server

        self.server = wsgi_server.ThreadedServer(
            'placement', _app(state_dir, connection), port=port)
        self.server.start()
        self.url = self.server.url

    def adapter(self, conf=None):
        """A keystoneauth adapter for it, built the way the agent builds
        one ([placement] of cyborg's CONF now points here).
        """
        from cyborg.common import ksa
        from cyborg.conf import CONF

        conf = conf or CONF
        conf.set_override('auth_type', 'none', group='placement')
        conf.set_override('endpoint_override', self.url, group='placement')
        return ksa.get_adapter('placement', conf)

    def stop(self):
        self.server.stop()


def register_node(url, name):
    """What nova-compute does on its host first: create the compute
    node's resource provider `name` (no inventory). Returns its uuid.
    """
    import requests

    r = requests.post(url + '/resource_providers', json={'name': name},
                      headers=HEADERS, timeout=30)
    if r.status_code != 200:
        raise RuntimeError('Placement refused compute node %s: %s %s'
                           % (name, r.status_code, r.text[:500]))
    return r.json()['uuid']


def main(argv=None):
    """Serve Placement until SIGTERM; prints `placement ready URL` once
    it listens.
    """
    from cyborg.common import service
    from cyborg.common import wsgi_server

    parser = argparse.ArgumentParser(prog='python -m cyborg_harness.'
                                          'placement')
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--port', type=int, default=0)
    parser.add_argument('--connection',
                        help="Placement's database URL (default: SQLite "
                             "in the state directory)")
    args = parser.parse_args(argv)
    server = wsgi_server.ThreadedServer(
        'placement', _app(args.state_dir, args.connection), port=args.port)

    def start():
        server.start()
        print('placement ready %s' % server.url, flush=True)

    return service.run_until_signalled('placement', start, server.stop)


if __name__ == '__main__':
    sys.exit(main())
