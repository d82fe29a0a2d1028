# SPDX-License-Identifier: Apache-2.0
"""Requests refused before authentication and routing.

A body larger than any request of this API needs is refused unread (413),
and input that webob or pecan would fail to parse while routing (a path
or query string that is not UTF-8, a multipart or odd-charset form body)
is answered with a client error here rather than surfacing as a 500 from
inside pecan. Both sit inside the error wrapper, so the answers carry the
Cyborg fault body.
"""

import io

import webob

from cyborg.api import errors
from cyborg.common import exception


class RequestTooLarge(exception.CyborgException):
    code = 413
    msg_fmt = ('The request body is larger than %(limit)d bytes '
               '([api] max_request_body_size).')


class UnsupportedMediaType(exception.CyborgException):
    code = 415
    msg_fmt = ('Content-Type %(media_type)s is not supported; the API reads '
               'JSON (application/json) bodies.')


def refuse(exc, environ, start_response):
    """Answer with the Cyborg fault of `exc` (a CyborgException)."""
    return errors.response_for(exc)(environ, start_response)


class BodySizeLimit:
    """413 for a body over `limit` bytes.

    A declared Content-Length is checked before anything is read. A body
    without one (chunked) is read up to one byte past the limit and either
    refused or handed on as an ordinary, sized body.
    """

    def __init__(self, app, limit):
        self.app = app
        self.limit = limit

    def __call__(self, environ, start_response):
        refused = self.refusal(environ)
        if refused is not None:
            return refuse(refused, environ, start_response)
        return self.app(environ, start_response)

    def refusal(self, environ):
        """The error refusing this request's body, or None (a chunked
        body that passes is read, and handed on sized).
        """
        declared = environ.get('CONTENT_LENGTH')
        if declared:
            try:
                length = int(declared)
            except ValueError:
                length = -1
            if length < 0:
                return exception.Invalid('Malformed Content-Length header.')
            if length > self.limit:
                return RequestTooLarge(limit=self.limit)
        elif environ.get('wsgi.input_terminated'):
            body = environ['wsgi.input'].read(self.limit + 1)
            if len(body) > self.limit:
                return RequestTooLarge(limit=self.limit)
            environ['wsgi.input'] = io.BytesIO(body)
            environ['CONTENT_LENGTH'] = str(len(body))
            environ['wsgi.input_terminated'] = False
        return None


def _nul():
    # PostgreSQL cannot compare with, nor store, a NUL.
    return exception.Invalid(
        'The path or query string contains a NUL character.')


def _utf8(*names):
    """Whether webob can read these WSGI path strings (SCRIPT_NAME,
    PATH_INFO): the server hands them on as one latin-1 character per
    byte, and webob reads the bytes as UTF-8 (its url_encoding, which
    nothing here changes).
    """
    try:
        for name in names:
            name.encode('latin-1').decode('utf-8')
    except UnicodeError:
        # A character past latin-1 (UnicodeEncodeError) is no path a WSGI
        # server hands on, but webob fails on it just as well.
        return False
    return True


NOT_UTF8 = 'The URL path is not UTF-8 once percent-decoded.'


class Parseable:
    """400/415 for what routing cannot parse.

    Pecan reads the path, the query string and, for form media types, the
    body (`request.params`) before any handler runs, and handlers read
    the mount prefix (SCRIPT_NAME, in links); webob raises on bytes that
    are not UTF-8, on a multipart body without a boundary and on a form in
    another charset.
    """

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        refused = self.refusal(environ)
        if refused is not None:
            return refuse(refused, environ, start_response)
        return self.app(environ, start_response)

    @staticmethod
    def refusal(environ):
        """The error refusing what routing could not parse, or None."""
        path = environ.get('PATH_INFO', '')
        prefix = environ.get('SCRIPT_NAME', '')
        if not (prefix + path).isascii() and not _utf8(prefix, path):
            return exception.Invalid(NOT_UTF8)
        if '\x00' in path:
            return _nul()
        media_type = environ.get('CONTENT_TYPE')
        # Most requests (GET, DELETE) have none: three calls fewer.
        media_type = media_type.split(';')[0].strip().lower() \
            if media_type else ''
        if not environ.get('QUERY_STRING') and (
                media_type == 'application/json' or (
                    not media_type and environ.get('REQUEST_METHOD')
                    != 'POST')):
            # No query string, and a body webob does not parse as a form
            # (webob parses a POST without a Content-Type as one): there
            # are no parameters to check.
            return None
        if media_type.startswith('multipart/'):
            return UnsupportedMediaType(
                media_type=exception.excerpt(media_type))
        try:
            # Parsed once; webob keeps the result in the environ, where
            # pecan finds it.
            params = webob.Request(environ).params
        except (ValueError, DeprecationWarning) as e:
            # webob raises DeprecationWarning for a non-UTF-8 form charset.
            return exception.Invalid(
                'Malformed query string or form body: %s' % e)
        if any('\x00' in key or '\x00' in value
               for key, value in params.items()):
            return _nul()
        return None
