# SPDX-License-Identifier: Apache-2.0
"""RabbitMQ: the machine's broker, and a virtual host of our own on it.

oslo.messaging names its queues after the topic whatever the exchange, so
on a shared broker another Cyborg's conductor (a test run, a benchmark,
the reference service) would consume our messages: a deployment gets a
virtual host of its own, never just a control_exchange of its own.
"""

import subprocess
import uuid

from cyborg_harness import net


class Broker:
    """A running RabbitMQ node, administered with rabbitmqctl."""

    def __init__(self, host=net.LOOPBACK, port=5672, user='guest',
                 password='guest', ctl='rabbitmqctl', node=None, env=None):
        self.host, self.port = host, port
        self.user, self.password = user, password
        self._ctl = ctl
        self.node = node
        self.env = env

    def url(self, vhost=''):
        """The transport_url of `vhost` ('' : the default vhost /)."""
        return 'rabbit://%s:%s@%s:%d/%s' % (self.user, self.password,
                                            self.host, self.port, vhost)

    def reachable(self):
        return net.reachable(self.host, self.port)

    def ctl(self, *args, timeout=60):
        """rabbitmqctl ARGS against this node."""
        argv = [self._ctl, '-q'] + (['-n', self.node] if self.node else [])
        return subprocess.run(argv + list(args), check=True,
                              capture_output=True, timeout=timeout,
                              env=self.env, text=True).stdout


class VirtualHost:
    """A virtual host of our own on `broker` (the guest user may use it);
    `url` is its transport_url; delete() removes it and all its queues.
    """

    def __init__(self, broker=None, prefix='cyborg'):
        self.broker = broker or Broker()
        self.name = '%s-%s' % (prefix, uuid.uuid4().hex[:8])
        self.broker.ctl('add_vhost', self.name)
        try:
            self.broker.ctl('set_permissions', '-p', self.name,
                            self.broker.user, '.*', '.*', '.*')
        except BaseException:
            self.delete()
            raise
        self.url = self.broker.url(self.name)

    def delete(self):
        self.broker.ctl('delete_vhost', self.name)
