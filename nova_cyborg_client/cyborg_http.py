# SPDX-License-Identifier: Apache-2.0
"""Talking HTTP to the accelerator API: one request helper, typed errors.

`AcceleratorAPI.request()` is the only place a call to the service is
made. It returns the decoded JSON body of a 2xx answer, or raises one of
the errors below, each saying what was asked and what the service
answered (its own reason, taken from Cyborg's error body):

    CyborgError                  anything that kept a call from succeeding
      Unreachable                no HTTP answer (refused, timeout, DNS)
      HTTPError                  an HTTP answer of 400 or more
        BadRequest               400
        NotAuthorized            401, 403
        NotFound                 404
        Conflict                 409
        ServerError              5xx
      InvalidBody                2xx whose body is not JSON

Like Nova's client it sends no microversion header (the service answers
at its base version, 2.0), lets no HTTP status raise inside keystoneauth,
and authenticates with the caller's token (the context's auth plugin).
"""

import json

from keystoneauth1 import exceptions as ks_exc

from nova_cyborg_client import conf as nova_conf

# How much of a service's reason an error message quotes.
REASON_LIMIT = 300


class CyborgError(Exception):
    """A call to the accelerator API that did not succeed."""

    status = None

    def __init__(self, method, path, detail):
        self.method = method
        self.path = path
        self.detail = detail
        super().__init__('%s %s: %s' % (method, path, detail))


class Unreachable(CyborgError):
    """No HTTP answer at all."""


class InvalidBody(CyborgError):
    """A success status with a body that is not JSON."""


class HTTPError(CyborgError):
    """An answer with status >= 400; `reason` is the service's own."""

    def __init__(self, method, path, status, reason):
        self.status = status
        self.reason = reason
        super().__init__(method, path, 'HTTP %d: %s' % (status, reason))


class BadRequest(HTTPError):
    pass


class NotAuthorized(HTTPError):
    pass


class NotFound(HTTPError):
    pass


class Conflict(HTTPError):
    pass


class ServerError(HTTPError):
    pass


_BY_STATUS = {400: BadRequest, 401: NotAuthorized, 403: NotAuthorized,
              404: NotFound, 409: Conflict}


def error_for(method, path, status, reason):
    """The typed error for an HTTP failure status."""
    if status >= 500:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(status, HTTPError)
    return cls(method, path, status, reason)


def reason_of(response):
    """The service's reason for a failure, from Cyborg's error body
    {"error_message": "<JSON of {faultstring, ...}>"}; otherwise the body
    text, or the status line's phrase when the body is empty.
    """
    text = response.text or ''
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and 'error_message' in body:
        fault = body['error_message']
        if isinstance(fault, str):
            try:
                fault = json.loads(fault)
            except ValueError:
                pass
        if isinstance(fault, dict) and fault.get('faultstring'):
            fault = fault['faultstring']
        text = fault if isinstance(fault, str) else json.dumps(fault)
    text = ' '.join(text.split())
    if not text:
        text = response.reason or 'no reason given'
    if len(text) > REASON_LIMIT:
        text = text[:REASON_LIMIT] + '...'
    return text


class AcceleratorAPI:
    """The accelerator endpoint of [cyborg], as the context's caller."""

    def __init__(self, context, conf=None):
        self._adapter = nova_conf.adapter(context, nova_conf.CYBORG_GROUP,
                                          conf)

    def request(self, method, path, params=None, body=None):
        """The JSON body of the answer (None when empty), or a CyborgError.

        path is relative to the endpoint (`/accelerator_requests`);
        params become the query string, body the JSON request body.
        """
        kwargs = {}
        if params is not None:
            kwargs['params'] = params
        if body is not None:
            kwargs['json'] = body
        try:
            response = self._adapter.request(path, method, **kwargs)
        except ks_exc.ClientException as exc:
            raise Unreachable(method, path, 'could not reach the '
                              'accelerator service (%s)' % exc) from exc
        if response.status_code >= 400:
            raise error_for(method, path, response.status_code,
                            reason_of(response))
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise InvalidBody(method, path, 'HTTP %d with a body that is '
                              'not JSON' % response.status_code) from exc
