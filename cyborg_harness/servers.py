# SPDX-License-Identifier: Apache-2.0
"""Private MariaDB and RabbitMQ servers that a check may stop, kill and
restart: their own data directory, ports and socket under a directory of
their own, never the machine's shared servers.
"""

import os
import shutil
import signal
import subprocess

import sqlalchemy as sa

from cyborg_harness import net
from cyborg_harness import rabbit
from cyborg_harness import waiting


class MariaDB:
    """mariadbd --no-defaults on a data directory of its own."""

    @staticmethod
    def installed():
        return bool(shutil.which('mariadbd')
                    and shutil.which('mariadb-install-db'))

    def __init__(self, base):
        self.base = os.path.join(base, 'mariadb')
        self.datadir = os.path.join(self.base, 'data')
        self.socket = os.path.join(self.base, 'mariadb.sock')
        self.log = os.path.join(self.base, 'mariadb.log')
        self.port = net.free_port()
        self.proc = None
        os.makedirs(self.base)
        install = subprocess.run(
            [shutil.which('mariadb-install-db'), '--no-defaults',
             '--datadir=' + self.datadir, '--skip-test-db',
             '--auth-root-authentication-method=normal'],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if install.returncode != 0:
            raise RuntimeError('mariadb-install-db failed:\n%s'
                               % install.stdout[-3000:])

    @property
    def server_url(self):
        """For databases.Database(..., server_url=)."""
        return 'mysql+pymysql://root@127.0.0.1:%d' % self.port

    def start(self, timeout=60):
        argv = [shutil.which('mariadbd'), '--no-defaults',
                '--datadir=' + self.datadir, '--port=%d' % self.port,
                '--bind-address=127.0.0.1', '--socket=' + self.socket,
                '--pid-file=' + os.path.join(self.base, 'mariadb.pid'),
                '--skip-log-bin', '--innodb-buffer-pool-size=64M',
                '--max-connections=500']
        if os.geteuid() == 0:
            argv.append('--user=root')
        with open(self.log, 'a') as log:
            self.proc = subprocess.Popen(argv, stdout=log,
                                         stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        waiting.eventually(self.answers, 'MariaDB on port %d' % self.port,
                           timeout)

    def answers(self):
        if self.proc is None or self.proc.poll() is not None:
            return False
        engine = sa.create_engine(self.server_url + '/')
        try:
            with engine.connect() as conn:
                conn.execute(sa.text('SELECT 1'))
            return True
        except sa.exc.DBAPIError:
            return False
        finally:
            engine.dispose()

    def stop(self, kill=False, timeout=60):
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        self.proc.wait(timeout)
        self.proc = None


class RabbitMQ(rabbit.Broker):
    """A RabbitMQ node of its own name, ports, Mnesia and log directories
    (and Erlang cookie), started detached and stopped with rabbitmqctl.
    """

    BIN = '/usr/lib/rabbitmq/bin'

    @classmethod
    def script(cls, name):
        # Not /usr/sbin's wrapper: run as root, it su's to the rabbitmq
        # user, who cannot write our temporary directories.
        path = os.path.join(cls.BIN, name)
        return path if os.path.exists(path) else shutil.which(name)

    @classmethod
    def installed(cls):
        return bool(cls.script('rabbitmq-server'))

    def __init__(self, base):
        self.base = os.path.join(base, 'rabbitmq')
        port = net.free_port()
        node = 'cyharness%d@localhost' % port
        home = os.path.join(self.base, 'home')
        for d in ('mnesia', 'log', 'home'):
            os.makedirs(os.path.join(self.base, d))
        plugins = os.path.join(self.base, 'enabled_plugins')
        with open(plugins, 'w') as f:
            f.write('[].\n')
        # The distribution port must differ from every other node's.
        env = dict(
            os.environ, HOME=home, RABBITMQ_NODENAME=node,
            RABBITMQ_NODE_PORT=str(port),
            RABBITMQ_DIST_PORT=str(net.free_port()),
            RABBITMQ_MNESIA_BASE=os.path.join(self.base, 'mnesia'),
            RABBITMQ_LOG_BASE=os.path.join(self.base, 'log'),
            RABBITMQ_ENABLED_PLUGINS_FILE=plugins,
            RABBITMQ_CONFIG_FILE=os.path.join(self.base, 'rabbitmq'))
        super().__init__(port=port, ctl=self.script('rabbitmqctl'),
                         node=node, env=env)

    def start(self, timeout=120):
        subprocess.run([self.script('rabbitmq-server'), '-detached'],
                       env=self.env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        waiting.eventually(self.reachable,
                           'RabbitMQ on port %d' % self.port, timeout)

    def stop(self, timeout=60):
        subprocess.run([self.script('rabbitmqctl'), '-n', self.node, 'stop'],
                       env=self.env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=timeout)
        waiting.eventually(lambda: not self.reachable(), 'RabbitMQ stop',
                           timeout)
