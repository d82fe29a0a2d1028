# SPDX-License-Identifier: Apache-2.0
"""Serve a WSGI app (the events API) on a loopback port in a thread."""

import threading

from cheroot import wsgi
from oslo_log import log

LOG = log.getLogger(__name__)


class Server:
    """cheroot in a daemon thread; port 0 picks a free port."""

    def __init__(self, app, host='127.0.0.1', port=0, threads=8):
        self._server = wsgi.Server((host, port), app, numthreads=threads,
                                   server_name='nova-events',
                                   shutdown_timeout=2)
        # How often the serve loop looks up: bounds how long stop() takes.
        self._server.expiration_interval = 0.05
        self._thread = None

    @property
    def url(self):
        host, port = self._server.bind_addr[:2]
        return 'http://%s:%d' % (host, port)

    def start(self):
        """Listening on return."""
        self._server.prepare()
        self._thread = threading.Thread(target=self._server.serve,
                                        name='nova-events-server',
                                        daemon=True)
        self._thread.start()
        LOG.info('Nova external events API listening on %s', self.url)
        return self

    def is_alive(self):
        return self._thread is not None and self._thread.is_alive()

    def stop(self):
        if self._thread is not None:
            self._server.stop()
            self._thread.join(10)
            self._thread = None
