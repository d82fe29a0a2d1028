# SPDX-License-Identifier: Apache-2.0
"""Loopback HTTP servers in front of a test's wsgi-intercept apps.

Nova's functional tests serve Placement and Nova's API in the test
process through wsgi-intercept, which only requests made in that process
reach. Our service runs in another process (service.py), so each app it
calls is also served on 127.0.0.1 here: the same app object, looked up
in wsgi-intercept's table at each request.
"""

import socketserver
import threading
from wsgiref import simple_server

import wsgi_intercept


class _Quiet(simple_server.WSGIRequestHandler):
    def log_message(self, *args):
        pass


class _Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True


def intercepts():
    """{(host, port): script_name} of the installed intercepts."""
    return {key: value[1]
            for key, value in wsgi_intercept._wsgi_intercept.items()}


class Bridge:
    """Serve the intercepted app at (host, port) on a loopback port.

    headers: environ entries set when a request lacks them (Nova's
    stubbed Keystone context reads the caller from X-Auth-User etc.).
    """

    def __init__(self, host, port, headers=None):
        self.key = (host, port)
        self.script_name = wsgi_intercept._wsgi_intercept[self.key][1]
        self.headers = headers or {}
        if _green():
            # Nova's tests run on eventlet: a native select() loop would
            # block every green thread of the process.
            import eventlet
            self._sock = eventlet.listen(('127.0.0.1', 0))
            self.port = self._sock.getsockname()[1]
            self._server = None
        else:
            self._server = simple_server.make_server(
                '127.0.0.1', 0, self._app, server_class=_Server,
                handler_class=_Quiet)
            self.port = self._server.server_port
        self._runner = None

    @property
    def url(self):
        return 'http://127.0.0.1:%d%s' % (self.port, self.script_name)

    def _app(self, environ, start_response):
        make_app = wsgi_intercept._wsgi_intercept[self.key][0]
        path = environ.get('PATH_INFO', '')
        if self.script_name and path.startswith(self.script_name):
            environ['SCRIPT_NAME'] = self.script_name
            environ['PATH_INFO'] = path[len(self.script_name):]
        for name, value in self.headers.items():
            environ.setdefault(name, value)
        return make_app()(environ, start_response)

    def start(self):
        if self._server is None:
            import eventlet
            from eventlet import wsgi
            self._runner = eventlet.spawn(
                wsgi.server, self._sock, self._app, log_output=False)
        else:
            self._runner = threading.Thread(
                target=self._server.serve_forever,
                name='bridge-%s' % self.key[0], daemon=True)
            self._runner.start()
        return self

    def stop(self):
        if self._server is None:
            self._runner.kill()
            self._sock.close()
        else:
            self._server.shutdown()
            self._server.server_close()


def _green():
    try:
        from eventlet import patcher
    except ImportError:
        return False
    return patcher.is_monkey_patched('socket')
