# SPDX-License-Identifier: Apache-2.0
"""The API service: the app under gunicorn, [api] api_workers worker
processes (one per CPU by default) listening on [api] host_ip:port.

Each worker builds its own app (database engine, policy) after the fork.
uWSGI or mod_wsgi users load cyborg.wsgi.api:application instead (see
etc/cyborg/api-uwsgi.ini).
"""

import os

from gunicorn.app import base as gunicorn_base

from cyborg.common import service
from cyborg.conf import CONF


def load_app(conf=CONF):
    """One worker's app, built after the fork (its own database engine);
    the master process never imports the app.
    """
    from cyborg.api import pipeline
    from cyborg.db import api as db_api
    db_api.configure()
    application = pipeline.load(conf)
    service.settle_heap()
    return application


def workers(conf=CONF):
    """[api] api_workers, or one per CPU this process may run on."""
    if conf.api.api_workers:
        return conf.api.api_workers
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class Server(gunicorn_base.BaseApplication):
    """gunicorn configured from our options, not from its command line."""

    def __init__(self, conf=CONF):
        self.conf = conf
        super().__init__()

    def load_config(self):
        host = self.conf.api.host_ip
        bind = '[%s]:%d' % (host, self.conf.api.port) if ':' in host else (
            '%s:%d' % (host, self.conf.api.port))
        for key, value in {
                'bind': [bind],
                'workers': workers(self.conf),
                'proc_name': 'cyborg-api',
                # Stop serving before exiting on SIGTERM, but don't hang.
                'graceful_timeout': 10,
                # gunicorn >= 23's control socket sits at one path per
                # user; two servers would fight over it.
                'control_socket_disable': True,
        }.items():
            if key in self.cfg.settings:
                self.cfg.set(key, value)

    def load(self):
        return load_app(self.conf)
