# SPDX-License-Identifier: Apache-2.0
"""Servers the benchmarks start as child processes.

    python -m cyborg_bench.serve floor
        cyborg.wsgi.floor (a WSGI app that does nothing) on cheroot with
        cyborg-aio's thread count; prints the port.
    python -m cyborg_bench.serve placement --state-dir DIR [--connection URL]
        the real Placement app; prints ``placement ready <url>``.
"""

import argparse
import signal
import sys


def floor():
    from cyborg.common import wsgi_server
    from cyborg.wsgi import floor as floor_app
    server = wsgi_server.ThreadedServer('floor', floor_app.application)
    server.start()
    print(server.port, flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop()
    return 0


def placement(state_dir, connection=None, port=0):
    from cyborg.common import service
    from cyborg.common import wsgi_server
    from cyborg.embedded import placement as embedded_placement

    conf = embedded_placement.build_conf(state_dir)
    if connection:
        conf.set_override('connection', connection,
                          group='placement_database')
    server = wsgi_server.ThreadedServer(
        'placement', embedded_placement.load_app(conf), port=port)

    def start():
        server.start()
        print('placement ready %s' % server.url, flush=True)

    return service.run_until_signalled('placement', start, server.stop)


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m cyborg_bench.serve')
    sub = parser.add_subparsers(dest='what', required=True)
    sub.add_parser('floor')
    p = sub.add_parser('placement')
    p.add_argument('--state-dir', required=True)
    p.add_argument('--connection')
    p.add_argument('--port', type=int, default=0)
    args = parser.parse_args(argv)
    if args.what == 'floor':
        return floor()
    return placement(args.state_dir, args.connection, args.port)


if __name__ == '__main__':
    sys.exit(main())
