"""A stand-in for Nova's external events API, so the bench can time
PATCH → ``accelerator-request-bound`` on the service under test.

Point the service's ``[nova]`` endpoint at http://127.0.0.1:PORT (for
cyborg-aio: ``--nova-endpoint``); every event is answered with code 200.
"""

import http.server
import json
import threading
import time


def reply_json(handler, status, body):
    """Answer a BaseHTTPRequestHandler's request with `body` as JSON."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header('Content-Type', 'application/json')
    handler.send_header('Content-Length', str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class Receiver:
    """Records when each event tag (an ARQ uuid) first arrived."""

    def __init__(self, port=0, host='127.0.0.1'):
        self._cond = threading.Condition()
        self._seen = {}
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def do_POST(self):
                raw = self.rfile.read(int(self.headers['Content-Length']
                                          or 0))
                arrived = time.perf_counter()
                try:
                    events = json.loads(raw)['events']
                except (ValueError, KeyError, TypeError):
                    reply_json(self, 400, {})
                    return
                owner._record(arrived, events)
                reply_json(self, 200, {'events': [dict(e, code=200)
                                                  for e in events]})

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         name='nova-events').start()

    def _record(self, arrived, events):
        with self._cond:
            for event in events:
                self._seen.setdefault(event.get('tag'), (arrived, event))
            self._cond.notify_all()

    def wait(self, tag, timeout):
        """(perf_counter at arrival, event); TimeoutError if none came."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while tag not in self._seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError('no event for %s in %.0fs'
                                       % (tag, timeout))
                self._cond.wait(left)
            return self._seen.pop(tag)

    def close(self):
        self._server.shutdown()
        self._server.server_close()
