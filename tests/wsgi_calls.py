# SPDX-License-Identifier: Apache-2.0
"""One request to a WSGI app in process, through webob, for the tests
that call the API's app directly."""

import json

import webob


def call(app, method, path, body=None, headers=None):
    """webob's response to `method path` (`body` sent as JSON)."""
    request = webob.Request.blank(path, method=method,
                                  headers=headers or {})
    if body is not None:
        request.body = json.dumps(body).encode()
        request.content_type = 'application/json'
    return request.get_response(app)
