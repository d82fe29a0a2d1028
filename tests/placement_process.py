"""Run the real Placement service as its own process (distributed tests).

python -m tests.placement_process --state-dir DIR --port PORT
Prints `placement ready <url>` once it listens; stops on SIGTERM.
"""

import argparse
import sys

from cyborg.common import service
from cyborg.common import wsgi_server
from cyborg_aio import placement


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--port', type=int, default=0)
    args = parser.parse_args()
    server = wsgi_server.ThreadedServer(
        'placement', placement.load_app(placement.build_conf(args.state_dir)),
        port=args.port)

    def start():
        server.start()
        print('placement ready %s' % server.url, flush=True)

    return service.run_until_signalled('placement', start, server.stop)


if __name__ == '__main__':
    sys.exit(main())
