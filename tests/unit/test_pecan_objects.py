# SPDX-License-Identifier: Apache-2.0
"""The request and response objects pecan works with (app._Request,
base.Response) are what webob's would be, made with less work.
"""

import pytest
import webob
import webob.acceptparse
import webob.exc

from cyborg.api import app as api_app
from cyborg.api.controllers import base


def test_a_fresh_response_is_webobs_default_one():
    made = base.Response()
    assert vars(made) == vars(webob.Response())
    # Its lists are its own.
    made.headerlist.append(('X-Test', '1'))
    made.app_iter.append(b'more')
    assert vars(base.Response()) == vars(webob.Response())


@pytest.mark.parametrize('status', [200, 201, 202, 204])
@pytest.mark.parametrize('headers, body', [
    ([('Content-Length', '0')], b''),
    ([('Content-Type', 'application/json'), ('Content-Length', '2')],
     b'{}'),
])
def test_an_answer_is_what_webobs_constructor_makes(status, headers, body):
    line = webob.Response(status=status).status
    made = base.Response.answer(line, list(headers), body)
    expected = webob.Response(status=line, headerlist=list(headers),
                              app_iter=[body])
    assert vars(made) == vars(expected)
    assert made.status_int == status
    assert made.body == body


def test_arguments_make_a_response_as_webob_does():
    made = base.Response(status=404, body=b'x', content_type='text/plain')
    expected = webob.Response(status=404, body=b'x',
                              content_type='text/plain')
    assert vars(made) == vars(expected)


@pytest.mark.parametrize('header', [None, 'application/json', 'text/html',
                                    '*/*', 'application/xml;q=0.5'])
def test_accept_reads_as_webobs(header):
    environ = webob.Request.blank('/').environ
    if header is not None:
        environ['HTTP_ACCEPT'] = header
    got = api_app._Request(environ).accept
    expected = webob.Request(environ).accept
    assert type(got) is type(expected)
    assert got.header_value == expected.header_value
    offers = ['text/plain', 'text/html', 'application/json']
    assert got.acceptable_offers(offers) == \
        expected.acceptable_offers(offers)


@pytest.mark.parametrize('query', ['', 'a=1', 'a=1&a=2&b=', 'a', '&'])
def test_query_parameters_read_as_webobs(query):
    environ = webob.Request.blank('/').environ
    environ['QUERY_STRING'] = query
    got = api_app._Request(environ).GET
    expected = webob.Request(dict(environ)).GET
    assert list(got.items()) == list(expected.items())
    assert got.mixed() == expected.mixed()
    assert len(got) == len(expected)


def test_no_query_string_has_read_only_parameters():
    environ = webob.Request.blank('/').environ
    params = api_app._Request(environ).GET
    with pytest.raises(KeyError):
        params['a'] = '1'
    # What pecan takes its keyword arguments from is a new dict each time.
    mixed = params.mixed()
    mixed['a'] = '1'
    assert params.mixed() == {}


def _wsgi(response, method='GET', **environ):
    got = []
    env = webob.Request.blank('/v2/x', environ={'REQUEST_METHOD': method,
                                                **environ}).environ
    body = b''.join(response(env, lambda status, headers, exc_info=None:
                             got.append((status, list(headers)))))
    return got, body


@pytest.mark.parametrize('method', ['GET', 'HEAD', 'DELETE'])
@pytest.mark.parametrize('headers', [
    [('Content-Type', 'application/json'), ('Content-Length', '2')],
    [('Content-Length', '2'), ('Location', '/v2/elsewhere')],
])
def test_a_response_answers_as_webobs(method, headers):
    def both():
        return (base.Response(status=201, headerlist=list(headers),
                              app_iter=[b'{}']),
                webob.Response(status=201, headerlist=list(headers),
                               app_iter=[b'{}']))
    made, expected = both()
    assert _wsgi(made, method) == _wsgi(expected, method)
    made, expected = both()
    made.conditional_response = expected.conditional_response = True
    made.etag = expected.etag = 'abc'
    assert _wsgi(made, method, HTTP_IF_NONE_MATCH='"abc"') == \
        _wsgi(expected, method, HTTP_IF_NONE_MATCH='"abc"')


@pytest.mark.parametrize('environ', [
    {'PATH_INFO': '/v2/device_profiles'},
    {'PATH_INFO': '/v2/caf\xc3\xa9'},           # UTF-8, as WSGI has it
    {'PATH_INFO': '/v2/caf\xe9'},               # not UTF-8
    {'PATH_INFO': '/v2/caf\xe9', 'webob.url_encoding': 'latin-1'},
    {'PATH_INFO': '/v2/x', 'SCRIPT_NAME': '/accelerator'},
    {'PATH_INFO': '/v2/x', 'SCRIPT_NAME': '/caf\xc3\xa9'},
])
def test_the_path_reads_as_webobs(environ):
    env = webob.Request.blank('/').environ
    env.update(environ)

    def read(request):
        try:
            return request.path_info, request.script_name
        except (UnicodeError, webob.exc.HTTPBadRequest):
            return 'refused'
    got = read(api_app._Request(dict(env)))
    expected = read(webob.Request(dict(env)))
    assert got == expected
