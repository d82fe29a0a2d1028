# SPDX-License-Identifier: Apache-2.0
"""HTTP to the endpoint under test: one keep-alive connection per client
thread, JSON in and out, an unexpected status raised as an error. The
wire is cyborg_bench.http11 (its own overhead is in every latency).
"""

import json
import re
import socket
import ssl
import time
import urllib.parse

from cyborg_bench import http11

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
    ssl_context verifies https (default: ssl.create_default_context()).
    """

    def __init__(self, url, headers=None, timeout=60.0, ssl_context=None):
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
        self.ssl_context = ssl_context

    def client(self):
        return Client(self)

    def tls(self):
        """The SSL context of https connections (made once: loading the
        CA certificates costs milliseconds).
        """
        if self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        return self.ssl_context


def local(port, prefix='', headers=None, timeout=30.0):
    """A client of http://127.0.0.1:port with paths starting at `prefix`
    (a trailing /v2 is dropped: paths start with it).
    """
    return Endpoint('http://127.0.0.1:%d%s' % (port, prefix), headers,
                    timeout).client()


# Methods whose request without a body still says Content-Length: 0, as
# http.client did (some servers want a length on every POST).
_BODY_METHODS = frozenset(('POST', 'PUT', 'PATCH'))
# What may not appear in a request line or header value.
_UNSAFE = re.compile(r'[\x00-\x20\x7f]').search
_UNSAFE_VALUE = re.compile(r'[\x00\r\n]').search


def _header_block(endpoint, extra, json_body):
    """Host, the endpoint's headers, Content-Type for a JSON body and
    `extra`, later ones replacing earlier ones whatever their case; as
    bytes, each line ending in CRLF.
    """
    host = endpoint.host
    if ':' in host:
        host = '[%s]' % host  # an IPv6 address
    if endpoint.port != (443 if endpoint.https else 80):
        host = '%s:%d' % (host, endpoint.port)
    # identity: the body is read as sent, never decompressed.
    merged = {'host': ('Host', host),
              'accept-encoding': ('Accept-Encoding', 'identity')}
    for source in (endpoint.headers,
                   {'Content-Type': 'application/json'} if json_body else {},
                   extra or {}):
        for name, value in source.items():
            merged[name.lower()] = (name, str(value))
    merged.pop('content-length', None)  # the body's own length is sent
    lines = []
    for name, value in merged.values():
        if _UNSAFE(name) or ':' in name or _UNSAFE_VALUE(value):
            raise ValueError('bad header %r: %r' % (name, value))
        lines.append('%s: %s\r\n' % (name, value))
    return ''.join(lines).encode('latin-1')


class Client:
    """One connection, reopened when the server closed it (uWSGI and
    gunicorn's sync worker close after every response without saying
    so): a kept connection is checked before each request (one poll, no
    wait), so no request goes out on a connection already closed.
    """

    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.conn = None
        self._addresses = None
        # The headers of every request, built once.
        self._plain = _header_block(endpoint, None, False)
        self._json = _header_block(endpoint, None, True)

    def _connect(self):
        ep = self.endpoint
        if self._addresses is None:
            self._addresses = socket.getaddrinfo(
                ep.host, ep.port, 0, socket.SOCK_STREAM)
        sock = http11.open_socket(self._addresses, ep.timeout)
        if ep.https:
            try:
                sock = ep.tls().wrap_socket(sock, server_hostname=ep.host)
            except BaseException:
                sock.close()
                raise
        self.conn = http11.Connection(sock)
        return self.conn

    def _message(self, method, path, data, headers):
        """The request's bytes, body included."""
        target = self.endpoint.prefix + path
        if _UNSAFE(method) or _UNSAFE(target) or not target:
            raise ValueError('bad request line: %r %r' % (method, target))
        if headers:
            block = _header_block(self.endpoint, headers, data is not None)
        else:
            block = self._json if data is not None else self._plain
        line = ('%s %s HTTP/1.1\r\n' % (method, target)).encode('ascii')
        if data is not None:
            return b''.join((line, block, b'Content-Length: %d\r\n\r\n'
                             % len(data), data))
        if method in _BODY_METHODS:
            return line + block + b'Content-Length: 0\r\n\r\n'
        return line + block + b'\r\n'

    def request(self, method, path, body=None, headers=None):
        """(status, body bytes) of one request; body is sent as JSON."""
        data = None if body is None else json.dumps(body).encode()
        message = self._message(method, path, data, headers)
        while True:
            conn = self.conn
            if conn is not None and not conn.reusable():
                self.close()
                conn = None
            kept = conn is not None
            if not kept:
                conn = self._connect()
            try:
                status, payload, keep = conn.exchange(message,
                                                      method == 'HEAD')
            except http11.ServerClosed:
                self.close()
                # Closed between the check and the send (a race): the
                # server never read the request; once more on a new one.
                if kept:
                    continue
                raise
            except BaseException:
                self.close()  # in an unknown state
                raise
            if not keep:
                self.close()
            return status, payload

    def call(self, method, path, body=None, expect=200, headers=None):
        """The decoded JSON body (None when empty); UnexpectedStatus when
        the status is not `expect`.
        """
        status, payload = self.request(method, path, body, headers)
        if status != expect:
            raise UnexpectedStatus(method, path, status, payload)
        # JSON on the wire is UTF-8 (RFC 8259): decoding it here skips
        # json.loads' encoding detection (1.5 us of a 2 us small answer).
        return json.loads(payload.decode()) if payload else None

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
