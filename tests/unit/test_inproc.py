# SPDX-License-Identifier: Apache-2.0
"""The in-process RPC transport of the embedded stack (inproc://)."""

import threading

import oslo_messaging as messaging

from cyborg.conf import CONF


class Echo:
    target = messaging.Target(version='1.0')

    def __init__(self):
        self.cast_seen = threading.Event()

    def echo(self, context, value):
        return value

    def note(self, context):
        self.cast_seen.set()


def test_call_and_cast_reach_the_server_and_stop_is_prompt():
    transport = messaging.get_rpc_transport(CONF, url='inproc://')
    endpoint = Echo()
    server = messaging.get_rpc_server(
        transport, messaging.Target(topic='t-inproc', server='s1'),
        [endpoint], executor='threading')
    server.start()
    try:
        client = messaging.get_rpc_client(
            transport, messaging.Target(topic='t-inproc', version='1.0'),
            timeout=10)
        assert client.call({}, 'echo', value=42) == 42
        client.prepare(server='s1').cast({}, 'note')
        assert endpoint.cast_seen.wait(10)
    finally:
        stopped = threading.Thread(target=lambda: (server.stop(),
                                                   server.wait()))
        stopped.start()
        stopped.join(10)
        transport.cleanup()
    assert not stopped.is_alive()
