# SPDX-License-Identifier: Apache-2.0
"""A threaded WSGI server (cheroot) running in a background thread."""

import threading

from cheroot import wsgi
from oslo_log import log

LOG = log.getLogger(__name__)

# Request line and headers together, as gunicorn's defaults roughly allow
# per header field (8 KiB) times a few.
MAX_HEADER_BYTES = 64 * 1024


class ThreadedServer:
    """Serve `app` on host:port; port 0 picks a free port (see `port`)."""

    def __init__(self, name, app, host='127.0.0.1', port=0, threads=10,
                 shutdown_timeout=5):
        self.name = name
        self._server = wsgi.Server((host, port), app, numthreads=threads,
                                   server_name=name,
                                   request_queue_size=128,
                                   shutdown_timeout=shutdown_timeout)
        # cheroot reads headers without limit by default; this one (413
        # beyond it) is far above any real request's, tokens included.
        self._server.max_request_header_size = MAX_HEADER_BYTES
        self._thread = None

    @property
    def host(self):
        return self._server.bind_addr[0]

    @property
    def port(self):
        return self._server.bind_addr[1]

    @property
    def url(self):
        return 'http://%s:%d' % (self.host, self.port)

    def start(self):
        """Bind and listen (so the port is known and accepting on return),
        then serve in a thread.
        """
        self._server.prepare()
        self._thread = threading.Thread(target=self._serve,
                                        name='%s-server' % self.name,
                                        daemon=True)
        self._thread.start()
        LOG.info('%s listening on %s', self.name, self.url)

    def _serve(self):
        try:
            self._server.serve()
        except Exception:
            LOG.exception('%s server stopped with an error', self.name)

    def is_alive(self):
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout=10):
        if self._thread is None:
            return
        self._server.stop()
        self._thread.join(timeout)
        self._thread = None
        LOG.info('%s stopped', self.name)
