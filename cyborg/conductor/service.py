# SPDX-License-Identifier: Apache-2.0
"""The conductor service: RPC server, binder (Nova events) and start-up
recovery."""

import threading

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conductor import binder as conductor_binder
from cyborg.conductor import manager
from cyborg.conf import CONF
from cyborg import rpc


class ConductorService:
    """The RPC server, the Nova notifier and start-up recovery."""

    def __init__(self, notifier=None):
        self.binder = conductor_binder.Binder(
            agent_rpcapi.AgentAPI(), notifier,
            sweep_interval=CONF.conductor.bind_sweep_interval,
            stale_after=CONF.conductor.bind_stale_after,
            name=conductor_binder.conductor_name(CONF.host),
            heartbeat_interval=CONF.conductor.heartbeat_interval,
            heartbeat_timeout=CONF.conductor.heartbeat_timeout,
            bind_timeout=CONF.conductor.bind_timeout,
            prepare_batch_wait=CONF.conductor.prepare_batch_wait)
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
