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


def test_stop_wakes_a_poll_at_once(monkeypatch):
    """A listener's stop() wakes its poll instead of leaving it to notice
    at its next look (a service's stop waits for the poll).
    """
    from cyborg.rpc import inproc

    # Naps long enough that only the wake can end this poll in time.
    monkeypatch.setattr(inproc, '_MAX_WAIT', 3600.0)
    listener = inproc._Listener(inproc._ExchangeManager('t-stop-ex'),
                                [messaging.Target(topic='t-stop')])
    got = []
    polling = threading.Thread(target=lambda: got.append(listener.poll()))
    polling.start()
    try:
        listener.stop()
        polling.join(30)
        assert not polling.is_alive()
        assert got == [[]]
    finally:
        if polling.is_alive():
            monkeypatch.setattr(inproc, '_MAX_WAIT', 0.01)
            with inproc._DELIVERED:
                inproc._DELIVERED.notify_all()
