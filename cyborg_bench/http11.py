# SPDX-License-Identifier: Apache-2.0
"""One HTTP/1.1 client connection over a socket, for the benchmarks'
client (cyborg_bench.client).

It is the measuring instrument of single-client latencies, so it does as
little as a correct client can: the request goes out in one sendall, a
small answer comes in with one recv, and of the headers only what frames
the body is looked at (Content-Length, Transfer-Encoding, Connection).
http.client parses every header with the email package and cannot tell
that the server closed a kept connection (uWSGI's --http-socket and
gunicorn's sync worker close after every response without saying so), so
it sent every second request twice.

Bodies: Content-Length, chunked, or up to the close (no length); none for
HEAD, 1xx, 204 and 304. Anything else raises ProtocolError, a body cut
short IncompleteBody, never a hang past the socket's timeout.
"""

import re
import select
import socket

_RECV = 65536
_MAX_HEAD = 65536  # longest status line and headers accepted
_MAX_LINE = 8192  # longest chunk-size or trailer line accepted
_NO_BODY = frozenset((204, 304))
_HEX = re.compile(rb'[0-9A-Fa-f]+\Z').match


class ProtocolError(Exception):
    """The server's answer is not HTTP/1.x as this client reads it."""


class IncompleteBody(ProtocolError):
    """The connection ended before the body's announced end."""


class ServerClosed(ConnectionResetError):
    """The connection was closed or reset before any byte of the answer
    (an OSError, as http.client's RemoteDisconnected): on a kept
    connection the server had closed it before reading the request.
    """


def open_socket(addresses, timeout):
    """A connected TCP socket to the first of `addresses` (getaddrinfo
    tuples) that accepts; the one that did is moved to the front so that
    the next connect tries it first (no refused ::1 before 127.0.0.1 on
    every request to a server that closes after each).

    Python's timeout (a poll(2) before each operation) bounds connect,
    sends and receives. The kernel's (SO_SNDTIMEO, SO_RCVTIMEO, one system
    call less each) measured slower against the uWSGI floor, where every
    request is a new connection and the two options cost a setsockopt each.
    """
    error = None
    for i, (family, kind, proto, _, address) in enumerate(addresses):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            # The request goes out in one write; no waiting for an ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as e:
            sock.close()
            error = e
            continue
        if i:
            addresses.insert(0, addresses.pop(i))
        return sock
    raise error or OSError('no address to connect to')


class Connection:
    """One socket, requests and answers one at a time (no pipelining)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b''  # received, not yet consumed
        self._poll = select.poll()
        # POLLHUP and POLLERR are reported whatever is asked for.
        self._poll.register(sock, select.POLLIN)
        self._pending = getattr(sock, 'pending', None)  # TLS only

    def reusable(self):
        """False once the server closed it (or sent anything unasked): an
        idle HTTP/1.1 connection has nothing to read. One poll(2), no wait.
        """
        if self._poll.poll(0):
            return False
        return not (self._pending and self._pending())

    def close(self):
        self.sock.close()

    def exchange(self, request, head_only=False):
        """(status, body bytes, keep) of one request (bytes, body
        included). ServerClosed when the connection ended before any byte
        of the answer came; keep is False when the connection cannot carry
        another request.
        """
        try:
            self.sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise ServerClosed('connection closed by the server before '
                               'the request was sent: %s' % e) from e
        status = None
        while True:
            try:
                status, version11, length, chunked, close, keep_alive = (
                    self._head())
            except ServerClosed:
                if status is None:
                    raise
                # The server did read the request: not one to send again.
                raise ProtocolError('connection closed after an interim '
                                    '%d answer' % status) from None
            # Interim answers (100 Continue, 103 Early Hints) precede the
            # real one; 101 means the connection is no longer HTTP.
            if status >= 200 or status == 101:
                break
        keep = not close and (version11 or keep_alive) and status != 101
        if head_only or status < 200 or status in _NO_BODY:
            body = b''
        elif chunked:
            body = self._chunked()
        elif length is not None:
            body = self._exact(length)
        else:
            body = self._to_close()
            keep = False
        if self.buf:
            keep = False  # bytes nobody asked for: not a clean connection
        return status, body, keep

    def _head(self):
        """The parsed status line and framing headers of the next answer."""
        buf = self.buf
        while True:
            end = buf.find(b'\r\n\r\n')
            # Bare LF line ends are tolerated, as by http.client.
            lf = buf.find(b'\n\n', 0, end if end >= 0 else len(buf))
            if lf >= 0:
                self.buf = buf[lf + 2:]
                head = buf[:lf]
                break
            if end >= 0:
                self.buf = buf[end + 4:]
                head = buf[:end]
                break
            if len(buf) > _MAX_HEAD:
                raise ProtocolError('no end of the response head in %d '
                                    'bytes' % len(buf))
            try:
                data = self.sock.recv(_RECV)
            except ConnectionResetError as e:
                if buf:
                    raise
                raise ServerClosed('connection reset before the response: '
                                   '%s' % e) from e
            if not data:
                if buf:
                    raise ProtocolError(
                        'connection closed inside the response head: %r'
                        % buf[:200])
                raise ServerClosed('connection closed by the server '
                                   'without a response')
            buf += data
        lines = head.split(b'\n')
        status_line = lines[0].rstrip(b'\r')
        version, _, rest = status_line.partition(b' ')
        code = rest[:3]
        if (not version.startswith(b'HTTP/1.') or len(code) != 3
                or not code.isdigit() or rest[3:4] not in (b'', b' ')):
            raise ProtocolError('malformed status line: %r'
                                % status_line[:200])
        length = None
        chunked = close = keep_alive = other_coding = False
        for line in lines[1:]:
            name, sep, value = line.partition(b':')
            # Whitespace before the colon is not allowed (RFC 9112 5.1),
            # and a folded line (leading whitespace) matches no name here.
            name = name.lower()
            if name == b'content-length':
                value = value.strip()
                if not value.isdigit() or (
                        length is not None and int(value) != length):
                    raise ProtocolError('bad Content-Length: %r' % value)
                length = int(value)
            elif name == b'transfer-encoding':
                # Chunked when it is the last coding; any other coding
                # ends at the close (RFC 9112 6.3).
                chunked = value.lower().rsplit(b',', 1)[-1].strip() == (
                    b'chunked')
                other_coding = not chunked
            elif name == b'connection':
                tokens = [t.strip() for t in value.lower().split(b',')]
                close = close or b'close' in tokens
                keep_alive = keep_alive or b'keep-alive' in tokens
            elif not sep and line.strip() and line[:1] not in b' \t':
                raise ProtocolError('malformed header line: %r' % line[:200])
        if other_coding:
            length = None
        return (int(code), version != b'HTTP/1.0', length, chunked, close,
                keep_alive)

    def _exact(self, n):
        """The next n bytes of the body."""
        buf = self.buf
        have = len(buf)
        if have >= n:
            self.buf = buf[n:]
            return buf[:n] if have > n else buf
        self.buf = b''
        body = bytearray(n)
        body[:have] = buf
        view = memoryview(body)
        recv_into = self.sock.recv_into
        while have < n:
            got = recv_into(view[have:])
            if not got:
                raise IncompleteBody('connection closed after %d of %d body '
                                     'bytes' % (have, n))
            have += got
        view.release()
        return bytes(body)

    def _to_close(self):
        """A body without length: everything up to the server's close."""
        parts = [self.buf]
        self.buf = b''
        recv = self.sock.recv
        while True:
            data = recv(_RECV)
            if not data:
                return b''.join(parts)
            parts.append(data)

    def _chunked(self):
        """A chunked body, its trailers read and dropped."""
        buf = bytearray(self.buf)
        parts = []
        while True:
            line = self._line(buf, 'a chunk size line')
            size = line.split(b';', 1)[0].strip()
            if not _HEX(size):
                raise ProtocolError('bad chunk size line: %r' % line[:200])
            size = int(size, 16)
            if not size:
                break
            while len(buf) < size + 2:
                self._more(buf, 'a chunk')
            if buf[size:size + 2] != b'\r\n' and buf[size:size + 1] != b'\n':
                raise ProtocolError('chunk of %d bytes not followed by a '
                                    'line end' % size)
            parts.append(bytes(buf[:size]))
            del buf[:size + (2 if buf[size] == 13 else 1)]
        while self._line(buf, 'the trailers'):
            pass
        self.buf = bytes(buf)
        return b''.join(parts)

    def _line(self, buf, what):
        """The next line of `buf` without its end, read on as needed."""
        while True:
            i = buf.find(b'\n')
            if i >= 0:
                line = bytes(buf[:i]).rstrip(b'\r')
                del buf[:i + 1]
                return line
            if len(buf) > _MAX_LINE:
                raise ProtocolError('%s longer than %d bytes'
                                    % (what, _MAX_LINE))
            self._more(buf, what)

    def _more(self, buf, what):
        data = self.sock.recv(_RECV)
        if not data:
            raise IncompleteBody('connection closed inside %s' % what)
        buf += data
