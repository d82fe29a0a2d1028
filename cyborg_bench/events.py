# SPDX-License-Identifier: Apache-2.0
"""A stand-in for Nova's external events API that records when each event
arrived, so a benchmark can time PATCH → ``accelerator-request-bound``.

Point the service's ``[nova]`` endpoint at ``url`` (for cyborg-aio:
``--nova-endpoint``); every event is answered with code 200.
"""

import http.server
import json
import threading
import time

EVENT_PATH = 'os-server-external-events'


def reply_json(handler, status, body):
    """Answer a BaseHTTPRequestHandler's request with `body` as JSON."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header('Content-Type', 'application/json')
    handler.send_header('Content-Length', str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class Receiver:
    """POST .../os-server-external-events → 200, every event code 200.

    arrivals: tag (an ARQ uuid) → (perf_counter at arrival, event); the
    first event per tag counts, later ones go to `duplicates`. batches:
    (perf_counter, events in the POST); versions: the microversion headers
    seen; bad_requests: what was answered 400/404.
    """

    def __init__(self, port=0, host='127.0.0.1'):
        self.cond = threading.Condition()
        self.arrivals = {}
        self.duplicates = []
        self.batches = []
        self.versions = set()
        self.bad_requests = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'  # keep-alive, as Nova's API

            def do_POST(self):
                length = int(self.headers.get('Content-Length') or 0)
                raw = self.rfile.read(length)
                arrived = time.perf_counter()
                try:
                    events = json.loads(raw)['events']
                    if not isinstance(events, list):
                        raise TypeError('events is not a list')
                except (ValueError, KeyError, TypeError) as e:
                    owner.bad_requests.append('%s: %r' % (e, raw[:200]))
                    reply_json(self, 400, {'badRequest': {
                        'message': str(e)}})
                    return
                if self.path.rstrip('/').rsplit('/', 1)[-1] != EVENT_PATH:
                    owner.bad_requests.append('path %s' % self.path)
                    reply_json(self, 404, {'itemNotFound': {}})
                    return
                owner._record(arrived, events, self.headers)
                reply_json(self, 200, {'events': [dict(e, code=200)
                                                  for e in events]})

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = 'http://%s:%d' % (host, self.port)
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         name='nova-events').start()

    def _record(self, arrived, events, headers):
        with self.cond:
            self.batches.append((arrived, len(events)))
            self.versions.add((headers.get('OpenStack-API-Version'),
                               headers.get('X-OpenStack-Nova-API-Version')))
            for event in events:
                tag = event.get('tag')
                if tag in self.arrivals:
                    self.duplicates.append(event)
                else:
                    self.arrivals[tag] = (arrived, event)
            self.cond.notify_all()

    def wait(self, tag, timeout):
        """(perf_counter at arrival, event); TimeoutError if none came."""
        if not self.wait_all([tag], timeout):
            raise TimeoutError('no event for %s in %.0fs' % (tag, timeout))
        with self.cond:
            return self.arrivals[tag]

    def wait_all(self, tags, timeout):
        """True once every tag arrived; False at the timeout."""
        with self.cond:
            return self.cond.wait_for(
                lambda: all(t in self.arrivals for t in tags), timeout)

    def close(self):
        self._server.shutdown()
        self._server.server_close()
