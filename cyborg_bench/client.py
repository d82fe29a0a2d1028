# SPDX-License-Identifier: Apache-2.0
"""HTTP to the endpoint under test: one keep-alive connection per client
thread, JSON in and out, an unexpected status raised as an error.
"""

import http.client
import json
import time
import urllib.parse

# Nova's identity on its calls to the accelerator API (service token).
NOVA_HEADERS = {'X-Roles': 'member', 'X-Service-Roles': 'service',
                'X-Project-Id': 'cyborg-bench-project', 'X-User-Id': 'nova',
                'Content-Type': 'application/json'}


def bind_body(arq_uuid, hostname, rp_uuid, instance):
    """What Nova's cyborg client PATCHes to bind one ARQ."""
    return {arq_uuid: [
        {'path': '/hostname', 'op': 'add', 'value': hostname},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]}


class UnexpectedStatus(Exception):
    """A response whose status was not the one the workload expects."""

    def __init__(self, method, path, status, body):
        self.status = status
        super().__init__('%s %s -> %s %s' % (
            method, path, status, body[:300].decode(errors='replace')))


class Endpoint:
    """Where the API lives and what every request carries.

    url is the API root (``http://host:port`` or ``.../accelerator``); a
    trailing ``/v2`` is dropped since workload paths start with it.
    """

    def __init__(self, url, headers=None, timeout=60.0):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ('http', 'https'):
            raise ValueError('--url must be http(s)://HOST[:PORT][/PATH]')
        self.https = parts.scheme == 'https'
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        prefix = parts.path.rstrip('/')
        if prefix.endswith('/v2'):
            prefix = prefix[:-3]
        self.prefix = prefix
        self.headers = dict(headers or {})
        self.timeout = timeout

    def client(self):
        return Client(self)


def local(port, prefix='', headers=None, timeout=30.0):
    """A client of http://127.0.0.1:port with paths starting at `prefix`
    (a trailing /v2 is dropped: paths start with it).
    """
    return Endpoint('http://127.0.0.1:%d%s' % (port, prefix), headers,
                    timeout).client()


class Client:
    """One connection, reopened when the server closed it (uWSGI and
    gunicorn's sync worker close after every response).
    """

    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.conn = None

    def _connect(self):
        cls = (http.client.HTTPSConnection if self.endpoint.https
               else http.client.HTTPConnection)
        self.conn = cls(self.endpoint.host, self.endpoint.port,
                        timeout=self.endpoint.timeout)

    def request(self, method, path, body=None, headers=None):
        """(status, body bytes) of one request; body is sent as JSON."""
        data = None if body is None else json.dumps(body).encode()
        hdrs = dict(self.endpoint.headers)
        if data is not None:
            hdrs['Content-Type'] = 'application/json'
        hdrs.update(headers or {})
        url = self.endpoint.prefix + path
        for attempt in (1, 2):
            if self.conn is None:
                self._connect()
            try:
                self.conn.request(method, url, body=data, headers=hdrs)
                resp = self.conn.getresponse()
                payload = resp.read()
                if resp.will_close:
                    self.close()
                return resp.status, payload
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError):
                # A kept-alive connection the server had already closed.
                self.close()
                if attempt == 2:
                    raise

    def call(self, method, path, body=None, expect=200, headers=None):
        """The decoded JSON body (None when empty); UnexpectedStatus when
        the status is not `expect`.
        """
        status, payload = self.request(method, path, body, headers)
        if status != expect:
            raise UnexpectedStatus(method, path, status, payload)
        return json.loads(payload) if payload else None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def wait_for_deployables(client, count, timeout=60.0):
    """GET /v2/deployables until it lists `count` (the agent's first report
    may land after the API answers); what it lists at the timeout.
    """
    deadline = time.monotonic() + timeout
    while True:
        deps = client.call('GET', '/v2/deployables')['deployables']
        if len(deps) >= count or time.monotonic() > deadline:
            return deps
        time.sleep(0.3)
