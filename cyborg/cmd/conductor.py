# SPDX-License-Identifier: Apache-2.0
"""cyborg-conductor: stores agents' reports, binds ARQs, tells Nova.

Without a usable [database] connection (unset, not a URL, or its Python
driver not installed) it says so in one line on stderr and exits 1.
"""

import sys

from cyborg.common import config
from cyborg.common import service
from cyborg.conductor import service as conductor_service
from cyborg.db import api as db_api
from cyborg import rpc


def main(argv=None):
    rpc.quick_stop_defaults()
    config.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        db_api.configure()
    except db_api.NotConfigured as e:
        print('cyborg-conductor: %s' % e, file=sys.stderr)
        return 1
    # As oslo.db's services do: wait for the database at the start
    # ([database] max_retries, retry_interval); later outages are
    # the heartbeat's and the binder's to ride out.
    db_api.wait_until_reachable()
    conductor = conductor_service.ConductorService()

    def stop():
        conductor.stop()
        rpc.cleanup()

    return service.run_until_signalled('cyborg-conductor', conductor.start,
                                       stop)


if __name__ == '__main__':
    sys.exit(main())
