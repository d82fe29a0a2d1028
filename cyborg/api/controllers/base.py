# SPDX-License-Identifier: Apache-2.0
"""What every handler shares: JSON in and out, query parameters, links."""

import datetime
import functools
import inspect
import json
import re

import jsonschema
from oslo_utils import uuidutils
import pecan
import pecan.core
import webob.request
import webob.response

from cyborg.api import errors
from cyborg.api import hooks
from cyborg.api import microversion
from cyborg.api import quickcheck
from cyborg.common import exception
from cyborg.conf import CONF
from cyborg import policy


def handler(status=200):
    """Render a handler's return value as JSON with `status` (None → no
    body) and turn domain exceptions into Cyborg error bodies.

    A handler answers through its return value only: the answer is a
    new Response, not pecan's (which no handler touches).
    """
    status_line = webob.response.Response(status=status).status

    def decorate(fn):
        takes_extra = inspect.getfullargspec(fn).varargs is not None

        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            if args and not takes_extra:
                # Pecan hands unmatched path segments to the index handler.
                return errors.response_for(exception.NotFound(
                    'The resource could not be found.'))
            try:
                result = fn(self, *args)
            except exception.CyborgException as e:
                return errors.response_for(e)
            if result is None:
                return Response.answer(status_line, [('Content-Length', '0')],
                                       b'')
            if isinstance(result, bytes):
                data = result                   # JSON, encoded already
            elif isinstance(result, Encoded):
                data = result.encode()
            else:
                data = json.dumps(result).encode()
            return Response.answer(status_line, json_headers(data), data)
        return wrapper
    return decorate


class Response(webob.response.Response):
    """webob's Response, made with less work.

    Pecan makes one for every request (response_cls) before routing, and
    handlers answer with another (answer()): webob's constructor works
    out a default content type, charset and length each time, and its
    setters each rewrite the header list. Both are the same object
    webob's constructor makes for the same arguments (tests check it).
    """

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            super().__init__(*args, **kwargs)
            return
        # What webob.Response() is: a 200, an empty HTML body.
        self.__dict__.update(_FRESH)
        self._headerlist = list(_FRESH['_headerlist'])
        self._app_iter = [b'']

    @classmethod
    def answer(cls, status, headerlist, body):
        """Response(status=status, headerlist=headerlist, app_iter=[body]):
        `status` a status line, `headerlist` the answer's whole list.
        """
        response = cls.__new__(cls)
        response.__dict__.update(_status=status, _headers=None,
                                 _headerlist=headerlist,
                                 conditional_response=False,
                                 _app_iter=[body])
        return response

    def __call__(self, environ, start_response):
        # webob's, less its copy of the header list (to make a Location
        # absolute) and its check for a conditional answer, when neither
        # applies: nothing reads or changes the response once it answers.
        headerlist = self._headerlist
        if self.conditional_response:
            return super().__call__(environ, start_response)
        for name, _ in headerlist:
            if name.lower() == 'location':
                return super().__call__(environ, start_response)
        start_response(self._status, headerlist)
        if environ['REQUEST_METHOD'] == 'HEAD':
            return webob.response.EmptyResponse(self._app_iter)
        return self._app_iter


_FRESH = webob.response.Response().__dict__


def json_headers(data):
    """The headers of a JSON answer whose body is `data` (bytes)."""
    return [('Content-Type', 'application/json'),
            ('Content-Length', str(len(data)))]


class Encoded(str):
    """A handler's answer already encoded as JSON text."""


def collection(key, items_json):
    """json.dumps({key: items}) from each item's json.dumps()."""
    return Encoded('{%s: [%s]}' % (json.dumps(key), ', '.join(items_json)))


class EncodedCache:
    """JSON text of items, keyed by everything their encoded form is
    made of (so a hit is what encoding anew would give), up to `size`.
    """

    def __init__(self, size=4096):
        self.size = size
        self._items = {}

    def get(self, key, encode):
        """The text kept for `key`, or encode()'s (JSON text), kept."""
        text = self._items.get(key)
        if text is None:
            if len(self._items) >= self.size:
                self._items.clear()
            text = self._items[key] = encode()
        return text

    def many(self, rows, extra, encode):
        """The text of each row, keyed by (row, extra); encode(row) for
        those not kept.
        """
        items = self._items
        out = []
        for row in rows:
            text = items.get((row, extra))
            if text is None:
                text = self.get((row, extra), lambda: encode(row))
            out.append(text)
        return out


class CollectionCache:
    """Whole encoded answers of a list, keyed by every row listed and
    `extra` (so a hit is the answer listing those rows anew would give),
    the last `size` of them; each answer built from its items' texts in
    `items` (an EncodedCache).

    Listing the same page again is the common case (a dashboard, Nova's
    periodic calls): one lookup of the page's rows, instead of one per row
    plus joining and encoding some 76 KB for 200 profiles (about a tenth
    of the list's time in process).
    """

    def __init__(self, key, items, size=8):
        self.key = key
        self.items = items
        self.size = size
        self._answers = {}

    def answer(self, rows, extra, encode):
        """The encoded (bytes) collection of `rows`; encode(row) (JSON
        text) for the items not kept.
        """
        key = (tuple(rows), extra)
        data = self._answers.get(key)
        if data is None:
            data = collection(self.key, self.items.many(
                rows, extra, encode)).encode()
            if len(self._answers) >= self.size:
                self._answers.clear()
            self._answers[key] = data
        return data


def not_allowed(allowed):
    """The fallback of a generic pecan index: 405 with an Allow header."""
    response = errors.response_for(_MethodNotAllowed(pecan.request.method))
    response.allow = allowed
    return response


class _MethodNotAllowed(exception.CyborgException):
    code = 405
    msg_fmt = 'Method %(method)s is not allowed for this resource.'

    def __init__(self, method):
        super().__init__(method=method)


def context():
    """The caller's request context, made when a handler first asks."""
    return hooks.context(pecan.core.state.request.environ)


def authorize(action, target=None):
    policy.authorize(context(), action, target)


def version():
    return pecan.core.state.request.environ[microversion.ENVIRON_KEY]


def query(*allowed):
    """The request's query parameters, 400 for any not in `allowed`."""
    request = pecan.core.state.request
    if not request.environ.get('QUERY_STRING'):
        return {}
    params = {}
    for key, value in request.GET.items():
        if key not in allowed:
            raise exception.Invalid('Unknown argument: "%s"'
                                    % exception.excerpt(key))
        params[key] = value
    return params


def show(resource, uuid, load, serialize):
    """GET /v2/<resources>/<uuid>: policy first, no query parameters, a
    400 for a non-uuid, the loader's 404, the serialized object.
    """
    authorize('cyborg:%s:get_one' % resource)
    query()
    return serialize(load(require_uuid(uuid, resource)))


# The [api] options. Read through this group object, an option costs half
# of what CONF.api.<option> does (oslo.config looks the group up on every
# read); what it reads is the same, overrides and reloads included.
_API = CONF.api


def pagination(params):
    """limit (clipped to [api] max_limit) and marker from query params."""
    limit = params.get('limit')
    if limit is not None:
        try:
            limit = int(limit)
        except ValueError:
            limit = -1
        if limit < 1:
            raise exception.Invalid('limit must be a positive integer')
        limit = min(limit, _API.max_limit)
    else:
        limit = _API.max_limit
    marker = params.get('marker')
    if marker is not None:
        require_uuid(marker, 'marker')
    return {'limit': limit, 'marker': marker}


# The usual form of a uuid, which oslo.utils' is_uuid_like accepts too.
_UUID = quickcheck.UUID


def is_uuid_like(value):
    """oslo.utils' is_uuid_like, answered at once for the usual form."""
    return (type(value) is str and _UUID.fullmatch(value) is not None) \
        or uuidutils.is_uuid_like(value)


def require_uuid(value, what='uuid'):
    if not is_uuid_like(value):
        raise exception.Invalid('Expected a uuid for %s but received %s'
                                % (what, exception.excerpt(value)))
    return value


def body(schema=None):
    """The parsed JSON body, validated against `schema` when given."""
    raw = _raw_body() or b'null'
    try:
        data = json.loads(raw)
    except ValueError:
        raise exception.Invalid('Malformed JSON in request body.')
    except RecursionError:
        raise exception.Invalid('Malformed JSON in request body: nested '
                                'too deeply.')
    if _MAYBE_UNSTORABLE.search(raw):
        _require_storable_strings(data)
    if schema is not None:
        validate(data, schema)
    return data


def _raw_body():
    """The request body. Read straight from the input when its length is
    declared (BodySizeLimit has checked it, and given a chunked body one)
    and nothing has read it yet; otherwise webob's copy of it.
    """
    request = pecan.core.state.request
    environ = request.environ
    length = environ.get('CONTENT_LENGTH')
    if length and length.isdigit() and 'webob.is_body_seekable' not in \
            environ and 'cyborg.body' not in environ:
        environ['cyborg.body'] = environ['wsgi.input'].read(int(length))
    if 'cyborg.body' in environ:
        return environ['cyborg.body']
    return request.body


# NUL (PostgreSQL refuses it in text) and unpaired UTF-16 surrogates
# (which cannot be encoded to UTF-8 for any database) only reach a string
# through JSON \u escapes.
_UNSTORABLE = re.compile('[\x00\ud800-\udfff]')
# Only a body with one of these bytes can decode to such a string: a \u
# escape, UTF-8's first byte of an encoded surrogate (json reads UTF-8
# with surrogatepass), or the NUL bytes every UTF-16 or UTF-32 body has.
_MAYBE_UNSTORABLE = re.compile(rb'\\u|[\x00\xed]')


def _require_storable_strings(data):
    """400 for a body string no database could store, before any handler
    writes it (iterative: the body may be nested up to json's limit).
    """
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and _UNSTORABLE.search(item):
            raise exception.Invalid(
                'Invalid input: strings must not contain NUL characters '
                'or unpaired UTF-16 surrogates.')


_VALIDATORS = {}
_QUICK = {}
_FORMATS = jsonschema.FormatChecker()


def _validator(schema):
    """Schemas are module constants: check and compile each once."""
    validator = _VALIDATORS.get(id(schema))
    if validator is None:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        validator = cls(schema, format_checker=_FORMATS)
        _VALIDATORS[id(schema)] = validator
    return validator


def validate(data, schema):
    # A body the quick check shows valid is one jsonschema accepts; any
    # other goes to jsonschema, for its verdict and its message.
    quick = _QUICK.get(id(schema))
    if quick is None or quick[0] is not schema:
        _validator(schema)
        quick = _QUICK[id(schema)] = (schema, quickcheck.compile(schema))
    if quick[1](data):
        return
    # The most relevant error, as jsonschema.validate() would raise.
    e = jsonschema.exceptions.best_match(_validator(schema).iter_errors(data))
    if e is not None:
        where = '/'.join(exception.excerpt(p) for p in e.absolute_path)
        raise exception.Invalid(
            'Invalid input%s: %s' % (' for ' + where if where else '',
                                     _message(e)))


def _message(error):
    """jsonschema's message, quoting at most an excerpt of the value (it
    quotes the whole of it: a 100 KB description would come back whole).
    """
    message = error.message
    value = error.instance
    quoted = repr(value)
    limit = exception.EXCERPT_LENGTH
    if len(quoted) > limit and quoted in message:
        if isinstance(value, str):
            short = '%r... (%d characters)' % (value[:limit], len(value))
        else:
            short = exception.excerpt(quoted)
        message = message.replace(quoted, short)
    # Other values it quotes (a huge unexpected key, say).
    message = _LONG_QUOTED.sub(
        lambda m: "'%s'... (%d characters)" % (
            m.group(1)[:limit], len(m.group(1))), message)
    return exception.excerpt(message, 4 * limit)


# A quoted string longer than an excerpt, as repr() writes it.
_LONG_QUOTED = re.compile("'([^']{%d,})'" % (exception.EXCERPT_LENGTH + 1))


# application_url per (scheme, Host header, server name and port, script
# name): a server sees a handful of these.
_APPLICATION_URLS = {}
_URL_KEYS = ('wsgi.url_scheme', 'HTTP_HOST', 'SERVER_NAME', 'SERVER_PORT',
             'SCRIPT_NAME')


def base_url():
    """Where links point: [api] public_endpoint, or the request's own
    application URL.
    """
    request = pecan.core.state.request
    return base_url_of(request.environ, type(request))


def base_url_of(environ, request_cls=webob.request.BaseRequest):
    """base_url() of the request of a WSGI `environ`, read by a
    `request_cls` (the app's: what it raises for a mount prefix it cannot
    decode).
    """
    public = _API.public_endpoint
    if public:
        return public.rstrip('/')
    key = tuple(map(environ.get, _URL_KEYS))
    url = _APPLICATION_URLS.get(key)
    if url is None:
        if len(_APPLICATION_URLS) > 1000:
            _APPLICATION_URLS.clear()
        url = _APPLICATION_URLS[key] = request_cls(
            environ).application_url.rstrip('/')
    return url


def self_href(resource, uuid, url=None):
    """The `self` link of one item; lists pass base_url() (`url`), read
    once.
    """
    return '%s/v2/%s/%s' % (url or base_url(), resource, uuid)


def links(resource, uuid, bookmark=False, url=None):
    """Links of one item; lists pass base_url() (`url`), read once."""
    url = url or base_url()
    out = [{'href': self_href(resource, uuid, url), 'rel': 'self'}]
    if bookmark:
        out.append({'href': '%s/%s/%s' % (url, resource, uuid),
                    'rel': 'bookmark'})
    return out


def isotime(value):
    """ISO 8601 in UTC; the database keeps naive UTC times."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.isoformat() + '+00:00'
    return value.replace(tzinfo=datetime.timezone.utc).isoformat()


_QUOTED = json.encoder.encode_basestring_ascii


def json_value(value):
    """json.dumps(value), at a fraction of its cost for what answers are
    mostly made of: a string (quoted by json's own C function, as
    json.dumps quotes it), None, an integer, an empty object.
    """
    kind = type(value)
    if kind is str:
        return _QUOTED(value)
    if value is None:
        return 'null'
    if kind is int:
        return int.__repr__(value)
    if kind is dict and not value:
        return '{}'
    return json.dumps(value)


def timestamps(row):
    return {'created_at': isotime(row['created_at']),
            'updated_at': isotime(row['updated_at'])}
