# SPDX-License-Identifier: Apache-2.0
"""The floor for ``cyborg-bench bind``: cyborg.wsgi.floor (a WSGI app that
does nothing) on cheroot with cyborg-aio's thread count, in a process of
its own; prints the port, serves until SIGTERM.

    python -m cyborg_bench.floor
"""

import signal
import sys


def main():
    from cyborg.common import wsgi_server
    from cyborg.wsgi import floor
    server = wsgi_server.ThreadedServer('floor', floor.application)
    server.start()
    print(server.port, flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
