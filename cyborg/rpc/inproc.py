# SPDX-License-Identifier: Apache-2.0
"""oslo.messaging's in-process transport for the embedded stack, without
the wait: the library's fake driver lets a listener sleep 50 ms between
looks at its queues, and a bind crosses two of them (API → conductor →
agent). Here a listener sleeps until a message is delivered.

transport_url = inproc://  (entry point oslo.messaging.drivers: inproc)
"""

import threading
import time

import oslo_messaging
from oslo_messaging._drivers import base
from oslo_messaging._drivers import impl_fake

# Notified whenever any message is delivered to any in-process exchange.
_DELIVERED = threading.Condition()
# Longest nap without a delivery or a stop (both wake it at once).
_MAX_WAIT = 1.0


class _Exchange(impl_fake.FakeExchange):

    def deliver_message(self, *args, **kwargs):
        super().deliver_message(*args, **kwargs)
        with _DELIVERED:
            _DELIVERED.notify_all()


class _ExchangeManager(impl_fake.FakeExchangeManager):
    _exchanges_lock = threading.Lock()
    _exchanges = {}

    def get_exchange(self, name):
        with self._exchanges_lock:
            return self._exchanges.setdefault(
                name or self._default_exchange,
                _Exchange(name or self._default_exchange))


class _Listener(impl_fake.FakeListener):

    def _next(self):
        for target in self._targets:
            exchange = self._exchange_manager.get_exchange(target.exchange)
            ctxt, message, reply_q, requeue = exchange.poll(target,
                                                            self._pool)
            if message is not None:
                return impl_fake.FakeIncomingMessage(ctxt, message, reply_q,
                                                     requeue)
        return None

    def stop(self):
        # Wake the poll now, not after its nap: a service's stop waits for
        # it. Under the lock the poll looks and naps under, so a stop
        # between the two is never slept through.
        with _DELIVERED:
            super().stop()
            _DELIVERED.notify_all()

    @base.batch_poll_helper
    def poll(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stopped.is_set():
            # Look and wait under the same lock deliveries notify with, so
            # a message delivered between the two is never slept through.
            with _DELIVERED:
                message = self._next()
                if message is not None:
                    return message
                if self._stopped.is_set():
                    return None
                wait = _MAX_WAIT
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        return None
                _DELIVERED.wait(wait)
        return None


class InProcessDriver(impl_fake.FakeDriver):

    def __init__(self, conf, url, default_exchange=None,
                 allowed_remote_exmods=None):
        super().__init__(conf, url, default_exchange, allowed_remote_exmods)
        self._exchange_manager = _ExchangeManager(default_exchange)

    def listen(self, target, batch_size, batch_timeout):
        exchange = target.exchange or self._default_exchange
        listener = _Listener(self._exchange_manager, [
            oslo_messaging.Target(topic=target.topic, server=target.server,
                                  exchange=exchange),
            oslo_messaging.Target(topic=target.topic, exchange=exchange)])
        return base.PollStyleListenerAdapter(listener, batch_size,
                                             batch_timeout)

    def cleanup(self):
        self._exchange_manager.cleanup()
