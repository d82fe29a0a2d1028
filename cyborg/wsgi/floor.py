# SPDX-License-Identifier: Apache-2.0
"""A WSGI app that does nothing: ``GET /`` answers 200 ``{}``.

Served by the same uWSGI set-up as the API (cyborg-bench side-by-side),
it measures the floor of the web stack itself: what a request costs before
any routing, policy or database work. Nothing but the standard library is
imported, and nothing is configured.

``GET /v2/device_profiles`` answers a list of LIST_ROWS profiles shaped
as the API lists those cyborg-bench's dp-list creates (the same fields,
the default groups, a link with this request's host; built once, then
served as is). Measured with cyborg-bench's dp-list workload, it is the
floor of the list: what moving and decoding an answer of that size costs
the server and the client (on the 2-vCPU bench machine the client's read
and json.loads of the 76 KB answer alone are about 0.8 ms, against
0.4 ms for ``{}``), before any routing, policy or database work.
"""

import json
import uuid

_BODY = b'{}'
_HEADERS = [('Content-Type', 'application/json'),
            ('Content-Length', str(len(_BODY)))]
LIST_PATH = '/v2/device_profiles'
# cyborg-bench load's --dp-list-rows default.
LIST_ROWS = 200
# cyborg_bench.workloads.GPU_GROUPS, load's default --groups.
_GROUPS = [{'resources:CUSTOM_ACCELERATOR_GPU': '1',
            'trait:CUSTOM_GPU_NVIDIA': 'required'}]
_lists = {}


def list_body(base_url, rows=LIST_ROWS):
    """The JSON answer of the API's list of `rows` profiles as dp-list
    makes them (cyborg.api.controllers.device_profiles.encode).
    """
    profiles = []
    for i in range(rows):
        ident = str(uuid.UUID(int=i + 1, version=4))
        profiles.append({
            'uuid': ident, 'name': 'bench-list-%08x-%d' % (i, i),
            'description': None, 'groups': _GROUPS,
            'links': [{'href': '%s/v2/device_profiles/%s' % (base_url, ident),
                       'rel': 'self'}],
            'created_at': '2026-12-03T13:42:39.%06d+00:00' % i,
            'updated_at': None})
    return json.dumps({'device_profiles': profiles}).encode()


def _list(environ):
    base = '%s://%s' % (environ.get('wsgi.url_scheme', 'http'),
                        environ.get('HTTP_HOST', ''))
    body = _lists.get(base)
    if body is None:
        if len(_lists) >= 8:
            _lists.clear()
        body = _lists[base] = list_body(base)
    return body


def application(environ, start_response):
    length = environ.get('CONTENT_LENGTH')
    if length:
        # A body is read, as any real handler would (and a keep-alive
        # connection needs it gone before the next request).
        environ['wsgi.input'].read(int(length))
    path = environ.get('PATH_INFO', '/')
    if path in ('', '/'):
        start_response('200 OK', list(_HEADERS))
        return [_BODY]
    if path == LIST_PATH and environ.get('REQUEST_METHOD') == 'GET':
        body = _list(environ)
        start_response('200 OK', [('Content-Type', 'application/json'),
                                  ('Content-Length', str(len(body)))])
        return [body]
    start_response('404 Not Found', [('Content-Length', '0')])
    return [b'']
