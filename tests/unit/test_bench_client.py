# SPDX-License-Identifier: Apache-2.0
"""cyborg_bench.client over its own HTTP/1.1 (cyborg_bench.http11),
against real servers on loopback: how many connections a run of requests
takes, that no request reaches a server twice, every way a body ends, and
the errors of broken answers. Nothing is timed.
"""

import http.server
import json
import shutil
import socket
import socketserver
import ssl
import subprocess
import threading

import pytest

from cyborg_bench import client
from cyborg_bench import http11


class _Scripted(socketserver.ThreadingTCPServer):
    """Answers each path with fixed bytes, then closes the connection or
    reads the next request on it; records connections and requests.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answers):
        self.answers = answers  # path -> (response bytes, close after)
        self.connections = 0
        self.requests = []  # (connection number, method, path, headers, body)
        self.closed = threading.Event()  # set after each close by us
        self.lock = threading.Lock()
        super().__init__(('127.0.0.1', 0), _ScriptedHandler)

    @property
    def port(self):
        return self.server_address[1]

    @property
    def paths(self):
        return [r[2] for r in self.requests]


class _ScriptedHandler(socketserver.StreamRequestHandler):
    def handle(self):
        srv = self.server
        with srv.lock:
            srv.connections += 1
            number = srv.connections
        while True:
            line = self.rfile.readline()
            if not line:
                return
            method, path, _ = line.decode().split(' ', 2)
            headers = []
            while True:
                h = self.rfile.readline().decode().rstrip('\r\n')
                if not h:
                    break
                name, _, value = h.partition(':')
                headers.append((name, value.strip()))
            length = sum(int(v) for n, v in headers
                         if n.lower() == 'content-length')
            body = self.rfile.read(length)
            with srv.lock:
                srv.requests.append((number, method, path, headers, body))
            answer, close = srv.answers[path.split('?')[0]]
            self.wfile.write(answer)
            if close:
                return

    def finish(self):
        super().finish()
        self.request.close()
        self.server.closed.set()


def _ok(body=b'{"ok": true}', extra=b''):
    return (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
            b'Content-Length: %d\r\n%s\r\n%s' % (len(body), extra, body))


@pytest.fixture
def scripted():
    servers = []

    def start(answers):
        server = _Scripted(answers)
        threading.Thread(target=server.serve_forever, args=(0.01,),
                         daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


class _KeepAliveHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    disable_nagle_algorithm = True  # headers and body are two writes
    connections = []

    def setup(self):
        super().setup()
        self.connections.append(self.client_address)

    def do_GET(self):
        if self.path == '/chunked':
            self.send_response(200)
            self.send_header('Transfer-Encoding', 'chunked')
            self.end_headers()
            for piece in (b'{"parts": ', b'[1, 2, 3]', b'}'):
                self.wfile.write(b'%x\r\n%s\r\n' % (len(piece), piece))
            self.wfile.write(b'0\r\n\r\n')
            return
        if self.path == '/gone':
            self.send_response(404)
            body = b'{"error": "no such thing"}'
        else:
            self.send_response(200)
            body = json.dumps({'path': self.path}).encode()
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_DELETE(self):
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def _start_keepalive(tls=None):
    """http.server speaking HTTP/1.1 with keep-alive (TLS with `tls`)."""
    _KeepAliveHandler.connections = []
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                             _KeepAliveHandler)
    server.daemon_threads = True
    if tls:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.01,),
                     daemon=True).start()
    return server


@pytest.fixture
def keepalive():
    server = _start_keepalive()
    yield server
    server.shutdown()
    server.server_close()


def test_a_keep_alive_server_gets_one_connection(keepalive):
    c = client.local(keepalive.server_address[1])
    for i in range(20):
        assert c.call('GET', '/n/%d' % i) == {'path': '/n/%d' % i}
    assert c.call('GET', '/chunked') == {'parts': [1, 2, 3]}
    assert c.call('DELETE', '/x', expect=204) is None
    with pytest.raises(client.UnexpectedStatus) as e:
        c.call('GET', '/gone')
    assert e.value.status == 404 and 'no such thing' in str(e.value)
    assert c.call('GET', '/last') == {'path': '/last'}
    c.close()
    assert len(_KeepAliveHandler.connections) == 1


def test_a_server_closing_after_each_answer_gets_each_request_once(
        scripted):
    # uWSGI's --http-socket: closes after every response without saying
    # Connection: close.
    server = scripted({'/r': (_ok(), True)})
    c = client.local(server.port)
    for i in range(30):
        assert c.call('GET', '/r?i=%d' % i) == {'ok': True}
    c.close()
    assert server.paths == ['/r?i=%d' % i for i in range(30)]
    assert server.connections == 30


def test_a_closed_connection_is_seen_before_the_request_is_sent(
        scripted, monkeypatch):
    server = scripted({'/r': (_ok(), True)})
    sent = []
    exchange = http11.Connection.exchange
    monkeypatch.setattr(http11.Connection, 'exchange',
                        lambda self, *a: sent.append(self) or exchange(
                            self, *a))
    c = client.local(server.port)
    for _ in range(5):
        server.closed.clear()
        c.call('GET', '/r')
        assert server.closed.wait(5)
    # One send per request: none went out on the closed connection first.
    assert len(sent) == 5 and len(set(map(id, sent))) == 5
    assert server.connections == 5


def test_a_request_lost_to_a_race_with_the_close_is_sent_once_more(
        scripted, monkeypatch):
    server = scripted({'/r': (_ok(), True)})
    c = client.local(server.port)
    c.call('GET', '/r')
    assert server.closed.wait(5)
    # As if the server closed just after the check.
    monkeypatch.setattr(http11.Connection, 'reusable', lambda self: True)
    c.call('POST', '/r', {'a': 1})
    assert [(r[1], r[2]) for r in server.requests] == [
        ('GET', '/r'), ('POST', '/r')]
    assert server.connections == 2


def test_a_fresh_connection_closed_without_answer_is_not_retried(scripted):
    server = scripted({'/r': (b'', True)})
    c = client.local(server.port)
    with pytest.raises(http11.ServerClosed):
        c.request('GET', '/r')
    assert server.paths == ['/r'] and server.connections == 1
    assert isinstance(http11.ServerClosed(), OSError)


def test_what_the_request_carries(scripted):
    server = scripted({'/accelerator/v2/x': (_ok(b''), False)})
    endpoint = client.Endpoint(
        'http://127.0.0.1:%d/accelerator/v2' % server.port,
        {'content-type': 'text/plain', 'X-Roles': 'member'})
    c = endpoint.client()
    c.request('POST', '/v2/x', {'a': [1, 2]})
    c.request('POST', '/v2/x')
    c.request('GET', '/v2/x', headers={'x-roles': 'admin'})
    c.close()
    (_, m1, p1, h1, b1), (_, m2, _, h2, b2), (_, _, _, h3, _) = (
        server.requests)
    assert (m1, p1) == ('POST', '/accelerator/v2/x')
    assert json.loads(b1) == {'a': [1, 2]}
    assert sorted(h1) == sorted([
        ('Host', '127.0.0.1:%d' % server.port),
        ('Accept-Encoding', 'identity'),
        ('Content-Type', 'application/json'), ('X-Roles', 'member'),
        ('Content-Length', str(len(b1)))])
    assert ('Content-Length', '0') in h2 and b2 == b''
    assert ('x-roles', 'admin') in h3
    assert not [h for h in h3 if h[0].lower() == 'content-length']
    assert server.connections == 1
    with pytest.raises(ValueError):
        c.request('GET', '/a b')
    with pytest.raises(ValueError):
        c.request('GET', '/', headers={'X-A': 'x\r\nX-B: y'})


@pytest.mark.parametrize('answer, body', [
    # Chunk extensions and trailers are read and dropped.
    (b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n'
     b'4;ext=1\r\n{"a"\r\n5\r\n: 1}\n\r\n0\r\nTrailer: x\r\n\r\n',
     b'{"a": 1}\n'),
    (b'HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}', b'{}'),
    (b'HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n', b''),
    (b'HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n', b''),
    (b'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\n'
     b'Content-Length: 2\r\n\r\n[]', b'[]'),
    (b'HTTP/1.1 200 OK\nContent-Length: 3\n\nabc', b'abc'),
], ids=['chunked', 'lowercase-length', '204', '304', 'after-100',
        'bare-lf'])
def test_bodies_on_a_kept_connection(scripted, answer, body):
    server = scripted({'/r': (answer, False), '/next': (_ok(), False)})
    c = client.local(server.port)
    assert c.request('GET', '/r')[1] == body
    assert c.call('GET', '/next') == {'ok': True}
    assert server.connections == 1


@pytest.mark.parametrize('answer, body', [
    # No length: the body ends at the close.
    (b'HTTP/1.1 200 OK\r\n\r\n{"to": "close"}', b'{"to": "close"}'),
    # HTTP/1.0 without keep-alive, and Connection: close.
    (b'HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}', b'{}'),
    (b'HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}',
     b'{}'),
    (b'HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxyz', b'xyz'),
], ids=['no-length', 'http10', 'connection-close', 'not-chunked'])
def test_answers_that_end_the_connection(scripted, answer, body):
    server = scripted({'/r': (answer, True)})
    c = client.local(server.port)
    for _ in range(3):
        assert c.request('GET', '/r') == (200, body)
        assert c.conn is None  # closed by the client too
    assert server.connections == 3


def test_http10_keep_alive_is_kept(scripted):
    server = scripted({'/r': (b'HTTP/1.0 200 OK\r\nConnection: Keep-Alive'
                              b'\r\nContent-Length: 2\r\n\r\n{}', False)})
    c = client.local(server.port)
    for _ in range(3):
        assert c.call('GET', '/r') == {}
    assert server.connections == 1


def test_head_has_no_body(scripted):
    server = scripted({'/r': (b'HTTP/1.1 200 OK\r\nContent-Length: 10\r\n'
                              b'\r\n', False), '/next': (_ok(), False)})
    c = client.local(server.port)
    assert c.request('HEAD', '/r') == (200, b'')
    assert c.call('GET', '/next') == {'ok': True}
    assert server.connections == 1


@pytest.mark.parametrize('answer, error, text', [
    (b'HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n{"cut": ',
     http11.IncompleteBody, '8 of 20'),
    (b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc',
     http11.IncompleteBody, 'chunk'),
    (b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
     http11.ProtocolError, 'chunk size'),
    (b'HTTX/1.1 200 OK\r\n\r\n', http11.ProtocolError, 'status line'),
    (b'HTTP/1.1 2000 OK\r\n\r\n', http11.ProtocolError, 'status line'),
    (b'HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n', http11.ProtocolError,
     'Content-Length'),
    (b'HTTP/1.1 200 OK\r\nNo colon\r\n\r\n', http11.ProtocolError, 'header'),
    (b'HTTP/1.1 200 OK\r\nContent-Len', http11.ProtocolError, 'head'),
    (b'HTTP/1.1 103 Early Hints\r\n\r\n', http11.ProtocolError,
     'interim 103'),
], ids=['cut-body', 'cut-chunk', 'bad-chunk-size', 'bad-protocol',
        'bad-status', 'bad-length', 'bad-header', 'cut-head',
        'interim-then-close'])
def test_broken_answers_raise(scripted, answer, error, text):
    server = scripted({'/r': (answer, True), '/next': (_ok(), False)})
    c = client.local(server.port)
    with pytest.raises(error, match=text):
        c.request('GET', '/r')
    assert c.conn is None
    assert c.call('GET', '/next') == {'ok': True}  # on a new connection
    assert server.paths == ['/r', '/next']


def test_an_answer_that_stops_coming_times_out(scripted):
    server = scripted({'/r': (b'HTTP/1.1 200 OK\r\nContent-Length: 9\r\n'
                              b'\r\n{', False)})
    c = client.Endpoint('http://127.0.0.1:%d' % server.port,
                        timeout=0.2).client()
    with pytest.raises(TimeoutError):
        c.request('GET', '/r')
    assert c.conn is None and server.connections == 1


def test_a_refused_connection_raises_an_os_error():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionRefusedError):
        client.local(port).request('GET', '/')


@pytest.fixture
def tls_files(tmp_path):
    if not shutil.which('openssl'):
        pytest.skip('no openssl to make a certificate')
    cert, key = tmp_path / 'cert.pem', tmp_path / 'key.pem'
    subprocess.run(
        ['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes',
         '-keyout', str(key), '-out', str(cert), '-days', '1',
         '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'],
        check=True, capture_output=True)
    return str(cert), str(key)


@pytest.fixture
def tls_server(tls_files):
    cert, key = tls_files
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server = _start_keepalive(tls)
    yield server, cert
    server.shutdown()
    server.server_close()


def test_https(tls_server):
    server, cert = tls_server
    url = 'https://127.0.0.1:%d' % server.server_address[1]
    trusting = ssl.create_default_context(cafile=cert)
    c = client.Endpoint(url, ssl_context=trusting).client()
    for i in range(5):
        assert c.call('GET', '/s/%d' % i) == {'path': '/s/%d' % i}
    assert c.call('GET', '/chunked') == {'parts': [1, 2, 3]}
    c.close()
    assert len(_KeepAliveHandler.connections) == 1
    # The default context checks the certificate.
    with pytest.raises(ssl.SSLCertVerificationError):
        client.Endpoint(url).client().request('GET', '/')
