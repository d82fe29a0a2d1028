"""cyborg-conductor: stores agents' reports (and binds ARQs)."""

import sys

from cyborg.cmd import common
from cyborg.common import service
from cyborg.conductor import manager
from cyborg.db import api as db_api
from cyborg import rpc


def build():
    """The conductor's RPC server (not started)."""
    return rpc.get_server(rpc.CONDUCTOR_TOPIC, [manager.ConductorManager()])


def main(argv=None):
    common.parse_args(sys.argv[1:] if argv is None else argv)
    db_api.configure()
    server = build()

    def stop():
        server.stop()
        server.wait()
        rpc.cleanup()

    return service.run_until_signalled('cyborg-conductor', server.start, stop)


if __name__ == '__main__':
    sys.exit(main())
