# SPDX-License-Identifier: Apache-2.0
"""Loopback ports: a free one to listen on, and whether one answers."""

import socket

LOOPBACK = '127.0.0.1'


def free_port(host=LOOPBACK):
    """A TCP port nothing listens on right now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def reachable(host, port, timeout=1.0):
    """True if a TCP connection to host:port is accepted."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def url(port, path='', host=LOOPBACK):
    return 'http://%s:%d%s' % (host, port, path)
