# SPDX-License-Identifier: Apache-2.0
"""`/` and `/v2`: version documents (no auth), and routing to resources."""

import json

import pecan
import pecan.routing
import webob.exc

from cyborg.api.controllers import arqs
from cyborg.api.controllers import attributes
from cyborg.api.controllers import base
from cyborg.api.controllers import deployables
from cyborg.api.controllers import device_profiles
from cyborg.api.controllers import devices
from cyborg.api import microversion

DESCRIPTION = ('Cyborg is the OpenStack project for lifecycle management of '
               'hardware accelerators, such as GPUs,FPGAs, AI chips, security '
               'accelerators, etc.')


def _version(id_, href):
    return {'id': id_, 'status': 'CURRENT',
            'max_version': microversion.fmt(microversion.MAX_VERSION),
            'min_version': microversion.fmt(microversion.MIN_VERSION),
            'links': [{'href': href, 'rel': 'self'}]}


def _root(url):
    v2 = _version('v2', url + '/v2')
    return {'name': 'OpenStack Cyborg API', 'description': DESCRIPTION,
            'versions': [v2], 'default_version': v2}


_DOCUMENTS = {'root': _root,
              'v2': lambda url: _version('v2.0', url + '/v2/')}
# The JSON of each version document, per base URL (base.base_url keeps
# at most a thousand of these).
_ENCODED = base.EncodedCache(2048)


def _document(name, url):
    return base.Encoded(_ENCODED.get(
        (name, url), lambda: json.dumps(_DOCUMENTS[name](url))))


def answer_root(environ, start_response, request_cls):
    """GET /, answered as RootController.get answers it through pecan,
    without pecan's request, response and dispatch (about 40 us a request
    in process, most of what `/` costs): every client's version discovery
    (keystoneauth reads it at the start of each session) asks for it, and
    it needs no auth, policy or database. `request_cls` reads the URL as
    the app's request would (a 400 for a mount prefix that is not UTF-8).
    """
    try:
        data = _document('root', base.base_url_of(
            environ, request_cls)).encode()
    except webob.exc.HTTPException as e:
        return e(environ, start_response)
    start_response('200 OK', base.json_headers(data))
    return [data]


class V2Controller:
    device_profiles = device_profiles.DeviceProfilesController()
    accelerator_requests = arqs.ARQsController()
    devices = devices.DevicesController()
    deployables = deployables.DeployablesController()
    attributes = attributes.AttributesController()

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET')

    @index.when(method='GET')
    @base.handler()
    def get(self):
        return _document('v2', base.base_url())


class RootController:
    v2 = V2Controller()

    @pecan.expose(generic=True)
    def index(self):
        return base.not_allowed('GET')

    @index.when(method='GET')
    @base.handler()
    def get(self):
        return _document('root', base.base_url())

    @pecan.expose()
    def _lookup(self, *remainder):
        # /device_profiles is /v2/device_profiles, as in Cyborg.
        return self.v2, remainder


# The collections of /v2: each has an index and a _lookup(ident, *rest)
# to its item, and no custom path segments (pecan.expose(route=...)).
COLLECTIONS = frozenset(('device_profiles', 'accelerator_requests',
                         'devices', 'deployables', 'attributes'))


class Root(RootController):
    """The root pecan routes from: RootController's tree, with the paths of
    every CRUD request (a collection or one of its items) resolved
    directly, through pecan's `_route` hook.

    Pecan walks object attributes, and finds an item by failing to find
    it as an attribute (an HTTPNotFound raised and caught), calling the
    collection's `_lookup`, then failing to find a trailing slash (a
    NonCanonicalPath raised and caught). For the same path this ends at
    the same controller, through the same `_lookup`; any other path (a
    version document, an action such as /devices/<uuid>/enable, a segment
    that names an attribute) is walked by pecan through RootController,
    as before.
    """

    # RootController's _lookup runs inside the tree walk below.
    _lookup = None

    def __init__(self):
        self._tree = RootController()

    @pecan.expose()
    def _route(self, args, request):
        found = direct(self.v2, args)
        if found is not None:
            return found
        try:
            found = pecan.routing.lookup_controller(self._tree, args,
                                                    request)
        except pecan.routing.NonCanonicalPath as e:
            _handler(e.controller)
            raise
        _handler(found[0])
        return found


def _handler(found):
    """Refuse, as not found, a walk that did not end on a request
    handler (a public method of one of our controller objects): a segment
    naming a Python attribute pecan walked into (/v2/__class__,
    /v2/devices/<uuid>/__class__) or one of pecan's hooks itself
    (/v2/device_profiles/_lookup).
    """
    if (getattr(found, '__self__', None) is None
            or found.__name__.startswith('_')):
        raise webob.exc.HTTPNotFound()


def direct(v2, args):
    """(controller, remainder) pecan would route `args` to, for
    [v2/]<collection>[/] and [v2/]<collection>/<ident>[/]; None for any
    other path.
    """
    rest = args[1:] if args[0] == 'v2' else args
    count = len(rest)
    if not count or count > 3 or rest[0] not in COLLECTIONS:
        return None
    collection = getattr(v2, rest[0])
    if count == 1 or (count == 2 and rest[1] == ''):
        return collection.index, []
    ident = rest[1]
    if ident == '' or (count == 3 and rest[2] != ''):
        return None
    try:
        if getattr(collection, ident, None) is not None:
            # A segment pecan would walk into (a method's name).
            return None
    except UnicodeEncodeError:
        pass
    item, _ = collection._lookup(ident)
    return item.index, []
