# SPDX-License-Identifier: Apache-2.0
"""A WSGI app that does nothing: ``GET /`` answers 200 ``{}``.

Served by the same uWSGI set-up as the API (cyborg-bench side-by-side),
it measures the floor of the web stack itself: what a request costs before
any routing, policy or database work. Nothing is imported or configured.
"""

_BODY = b'{}'
_HEADERS = [('Content-Type', 'application/json'),
            ('Content-Length', str(len(_BODY)))]


def application(environ, start_response):
    length = environ.get('CONTENT_LENGTH')
    if length:
        # A body is read, as any real handler would (and a keep-alive
        # connection needs it gone before the next request).
        environ['wsgi.input'].read(int(length))
    if environ.get('PATH_INFO', '/') in ('', '/'):
        start_response('200 OK', list(_HEADERS))
        return [_BODY]
    start_response('404 Not Found', [('Content-Length', '0')])
    return [b'']
