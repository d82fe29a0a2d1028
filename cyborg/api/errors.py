# SPDX-License-Identifier: Apache-2.0
"""Cyborg's error body: {"error_message": "<JSON string of the fault>"}."""

import json
import logging

from oslo_db import exception as db_exc
import webob
import webob.exc

from cyborg.common import exception
from cyborg.db import api as db_api

LOG = logging.getLogger(__name__)

DB_UNAVAILABLE = ('The database is unreachable; the request was not '
                  'carried out. Retry later.')
# The connection went while COMMIT was under way: the server may have
# applied the change or not.
DB_COMMIT_UNKNOWN = ('The connection to the database was lost while the '
                     'change was being committed: it may or may not have '
                     'been carried out. Look the resource up before '
                     'retrying.')
# Still a deadlock's victim after db_api.retry_on_deadlock's tries, a
# lock wait that timed out, or SQLite's busy timeout spent
# (db_api.contended): rolled back whole.
DB_CONTENDED = ('Concurrent requests held the locks this one needed; it '
                'was rolled back and not carried out. Retry.')


def fault_body(status, message):
    fault = {'faultcode': 'Client' if status < 500 else 'Server',
             'faultstring': message, 'debuginfo': None}
    return json.dumps({'error_message': json.dumps(fault)})


def response_for(exc):
    status = exc.code if isinstance(exc, exception.CyborgException) else 500
    message = exc.message if isinstance(exc, exception.CyborgException) \
        else 'Internal server error.'
    return webob.Response(status=status, body=fault_body(status, message),
                          content_type='application/json', charset='utf-8')


class ErrorWrapper:
    """Give every error answer the Cyborg body, whoever produced it.

    Handlers already emit it; this catches the rest (routing 404/405,
    keystonemiddleware 401, unexpected exceptions as a 500).
    """

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        try:
            status, headers, body = _call(self.app, environ)
            if int(status[:3]) < 400:
                # Passed on as it is, without a webob round trip.
                start_response(status, headers)
                return body
            response = webob.Response(status=status, headerlist=headers,
                                      app_iter=body,
                                      request=webob.Request(environ))
        except Exception as e:
            response = failure(environ, e)
        return as_fault(response)(environ, start_response)


def failure(environ, exc):
    """The answer to an exception `exc` raised while answering; called
    while it is being handled (its traceback is logged).
    """
    if isinstance(exc, db_exc.DBConnectionError):
        # An outage, not a bug: one line, no traceback. Nothing was
        # committed unless the connection went during the COMMIT
        # itself, which is then said as such.
        unknown = isinstance(exc, db_api.CommitOutcomeUnknown)
        return _unavailable(
            environ, 'database %s: %s' % (
                'lost during commit' if unknown else 'unreachable',
                _first_line(exc)),
            DB_COMMIT_UNKNOWN if unknown else DB_UNAVAILABLE, 5)
    if db_api.contended(exc):
        # A deadlock's victim still, a lock wait that timed out, a busy
        # SQLite.
        return _unavailable(environ, 'database contended: %s' % _first_line(
            exc), DB_CONTENDED, 1)
    LOG.exception('Unhandled API error')
    return response_for(RuntimeError())


def _first_line(exc):
    return str(exc.inner_exception or exc).splitlines()[0][:200]


def _unavailable(environ, why, message, retry_after):
    """A 503 for a request the database did not carry out: one log line
    saying why, no traceback.
    """
    request = webob.Request(environ)
    LOG.warning('%s %s: 503, %s', request.method, request.path, why)
    response = webob.Response(status=503, body=fault_body(503, message),
                              content_type='application/json',
                              charset='utf-8')
    response.retry_after = retry_after
    return response


def as_fault(response):
    """`response`, its body made the Cyborg fault if it is an error
    answer with another body.
    """
    if response.status_int >= 400 and not _is_fault(response):
        message = _plain_message(response)
        response.body = fault_body(response.status_int, message).encode()
        response.content_type = 'application/json'
        response.charset = 'utf-8'
    return response


def _call(app, environ):
    """Run a WSGI app: (status, headers, body), as webob's get_response
    has them, but without building a Response.
    """
    got = []
    written = []

    def start_response(status, headers, exc_info=None):
        got[:] = [status, headers]
        return written.append

    body = app(environ, start_response)
    if not got or written:
        body = drained(body, written)
    return got[0], got[1], body


def drained(body, written):
    """The whole body of an app that called start_response while its
    body was iterated, or used write(): what it wrote, then its chunks.
    """
    try:
        chunks = list(body)
    finally:
        if hasattr(body, 'close'):
            body.close()
    return written + chunks


def _is_fault(response):
    if response.content_type != 'application/json':
        return False
    try:
        return 'error_message' in json.loads(response.body)
    except ValueError:
        return False


def _plain_message(response):
    text = response.text.strip() if response.body else ''
    if response.content_type == 'application/json':
        try:
            body = json.loads(text)
            if isinstance(body, dict) and 'error' in body:
                err = body['error']
                if isinstance(err, dict):
                    text = err.get('message', text)
        except ValueError:
            pass
    if text.startswith(response.status):
        # webob's plain-text page: the status line, then the explanation.
        text = text[len(response.status):].strip()
    if not text or text.lstrip().startswith('<'):
        # An empty or HTML page: webob's explanation of the status.
        exc = webob.exc.status_map.get(response.status_int)
        text = getattr(exc, 'explanation', None) or response.status
    return text
