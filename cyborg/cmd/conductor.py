"""cyborg-conductor: stores agents' reports, binds ARQs, tells Nova."""

import sys
import threading

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.cmd import common
from cyborg.common import service
from cyborg.conductor import binder as conductor_binder
from cyborg.conductor import manager
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg import rpc


class ConductorService:
    """The RPC server, the Nova notifier and start-up recovery."""

    def __init__(self, notifier=None):
        self.binder = conductor_binder.Binder(
            agent_rpcapi.AgentAPI(), notifier,
            sweep_interval=CONF.conductor.bind_sweep_interval,
            stale_after=CONF.conductor.bind_stale_after)
        self.server = rpc.get_server(rpc.CONDUCTOR_TOPIC,
                                     [manager.ConductorManager(self.binder)])

    def start(self):
        self.server.start()
        self.binder.start()
        # Re-drive what a previous run left half-done, without delaying
        # start-up (it may wait on agents).
        threading.Thread(target=self._recover, name='bind-recovery',
                         daemon=True).start()

    def _recover(self):
        self.binder.recover()
        self.binder.notify_soon()

    def stop(self):
        self.server.stop()
        self.server.wait()
        self.binder.stop()


def main(argv=None):
    common.parse_args(sys.argv[1:] if argv is None else argv)
    db_api.configure()
    conductor = ConductorService()

    def stop():
        conductor.stop()
        rpc.cleanup()

    return service.run_until_signalled('cyborg-conductor', conductor.start,
                                       stop)


if __name__ == '__main__':
    sys.exit(main())
