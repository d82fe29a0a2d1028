# SPDX-License-Identifier: Apache-2.0
"""Instance external events: Nova's POST /os-server-external-events and the
waiters the compute side blocks on.

The service POSTs one `accelerator-request-bound` event per ARQ (tag = ARQ
uuid, status completed|failed) at compute microversion 2.82. The app answers
with Nova's rules and codes, then hands each accepted event to the waiter
registered for (name, tag) on that instance. As in Nova, an event nobody
waits for is logged ("Received unexpected event") and dropped: the waiter
therefore polls the service once after registering (see compute.py).

Beyond Nova: the name `arq_resolved` and status `ok` (the spelling of the
original Train spec) are accepted at any microversion as aliases of
`accelerator-request-bound` and `completed`.
"""

import contextlib
import json
import threading
import time

import jsonschema
import microversion_parse
from oslo_log import log
from oslo_utils import uuidutils

from nova_cyborg_client import exception

LOG = log.getLogger(__name__)

EVENT_NAME = 'accelerator-request-bound'
ALIAS_NAME = 'arq_resolved'
ALIAS_STATUS = 'ok'
TAG_REQUIRED = ('volume-extended', 'power-update', EVENT_NAME)
PATH = '/os-server-external-events'

MIN_VERSION = (2, 1)
MAX_VERSION = (2, 96)
VERSION_HEADER = 'OpenStack-API-Version'
LEGACY_VERSION_HEADER = 'X-OpenStack-Nova-API-Version'
# Event names and the microversion that introduced each.
_NAMES_SINCE = (
    ((2, 0), ('network-changed', 'network-vif-plugged',
              'network-vif-unplugged', 'network-vif-deleted')),
    ((2, 51), ('volume-extended',)),
    ((2, 76), ('power-update',)),
    ((2, 82), (EVENT_NAME,)),
    ((2, 93), ('volume-reimaged',)),
)


def make_key(name, tag=None):
    """Nova's event key: `<name>-<tag>`, or the name when untagged."""
    return name if tag is None else '%s-%s' % (name, tag)


def event_names(version):
    names = [ALIAS_NAME]
    for since, added in _NAMES_SINCE:
        if version >= since:
            names.extend(added)
    return names


def request_schema(version):
    return {
        'type': 'object',
        'properties': {
            'events': {
                'type': 'array', 'minItems': 1,
                'items': {
                    'type': 'object',
                    'properties': {
                        'server_uuid': {'type': 'string'},
                        'name': {'type': 'string',
                                 'enum': event_names(version)},
                        'status': {'type': 'string',
                                   'enum': ['failed', 'completed',
                                            'in-progress', ALIAS_STATUS]},
                        'tag': {'type': 'string', 'maxLength': 255},
                    },
                    'required': ['name', 'server_uuid'],
                    'additionalProperties': False,
                },
            },
        },
        'required': ['events'],
        'additionalProperties': False,
    }


# -- waiting for events -------------------------------------------------------

class _Waiter:
    def __init__(self):
        self._done = threading.Event()
        self.event = None

    def set(self, event):
        self.event = event
        self._done.set()

    def wait(self, timeout):
        self._done.wait(max(0.0, timeout))
        return self.event


class InstanceEvents:
    """Waiters by instance and event key (Nova's compute InstanceEvents)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._events = {}

    def prepare_for_instance_event(self, instance_uuid, name, tag):
        waiter = _Waiter()
        with self._lock:
            self._events.setdefault(instance_uuid, {})[
                make_key(name, tag)] = waiter
        return waiter

    def pop_instance_event(self, instance_uuid, name, tag):
        with self._lock:
            waiters = self._events.get(instance_uuid)
            if not waiters:
                return None
            waiter = waiters.pop(make_key(name, tag), None)
            if not waiters:
                del self._events[instance_uuid]
            return waiter

    def clear_events_for_instance(self, instance_uuid):
        with self._lock:
            return self._events.pop(instance_uuid, {})


class ExitEarly(Exception):
    """Raised in a wait's body: these events need no waiting for."""

    def __init__(self, events):
        super().__init__()
        self.events = events


def exit_wait_early(events):
    raise ExitEarly(events)


def _default_error_callback(event_name, instance_uuid, event):
    raise exception.InstanceEventFailed(event_name=event_name)


@contextlib.contextmanager
def wait_for_instance_event(instance_events, instance_uuid, events,
                            deadline=300, error_callback=None):
    """Register waiters for `events` ([(name, tag)]), run the body, then
    wait for every event the body did not exit early for, all under ONE
    deadline of `deadline` seconds from now.

    An event with a status other than `completed` goes to error_callback
    (default: raise InstanceEventFailed; returning False stops waiting).
    Missing events at the deadline raise InstanceEventTimeout. Waiters left
    over on the way out are removed.
    """
    error_callback = error_callback or _default_error_callback
    end = time.monotonic() + deadline
    waiters = {make_key(name, tag): instance_events.prepare_for_instance_event(
        instance_uuid, name, tag) for name, tag in events}
    try:
        try:
            yield
        except ExitEarly as e:
            early = {make_key(name, tag) for name, tag in e.events}
        else:
            early = set()
        for key, waiter in waiters.items():
            if key in early:
                continue
            event = waiter.wait(end - time.monotonic())
            if event is None:
                states = ', '.join(
                    '%s: %s' % (k, 'received' if w.event else 'not received')
                    for k, w in waiters.items() if k not in early)
                LOG.warning('Timeout waiting for %s for instance %s. Event '
                            'states are: %s', list(waiters), instance_uuid,
                            states)
                raise exception.InstanceEventTimeout(
                    'Timeout after %ss waiting for events of instance %s: %s'
                    % (deadline, instance_uuid, states))
            if event['status'] == 'completed':
                continue
            if error_callback(key, instance_uuid, event) is False:
                break
    finally:
        for name, tag in events:
            instance_events.pop_instance_event(instance_uuid, name, tag)


# -- the instances Nova knows -------------------------------------------------

class Instances:
    """uuid → host; host None until the instance is claimed on one."""

    def __init__(self):
        self._lock = threading.Lock()
        self._hosts = {}

    def add(self, instance_uuid, host=None):
        with self._lock:
            self._hosts[instance_uuid] = host

    def set_host(self, instance_uuid, host):
        self.add(instance_uuid, host)

    def remove(self, instance_uuid):
        with self._lock:
            self._hosts.pop(instance_uuid, None)

    def lookup(self, instance_uuid):
        """(known, host)."""
        with self._lock:
            if instance_uuid not in self._hosts:
                return False, None
            return True, self._hosts[instance_uuid]


# -- the API ------------------------------------------------------------------

def _version_string(version):
    return '%d.%d' % version


class ExternalEventsApp:
    """WSGI app serving POST /os-server-external-events (also under a
    /v2.1 or /v2 prefix, where Nova's endpoints usually end).
    """

    def __init__(self, instances, instance_events):
        self.instances = instances
        self.instance_events = instance_events

    def __call__(self, environ, start_response):
        version = MIN_VERSION
        try:
            version = self._version(environ)
            path = environ.get('PATH_INFO', '')
            for prefix in ('/v2.1', '/v2'):
                if path.startswith(prefix + '/'):
                    path = path[len(prefix):]
                    break
            if path.rstrip('/') != PATH:
                raise _Fault(404, 'itemNotFound', 'Not found')
            if environ['REQUEST_METHOD'] != 'POST':
                raise _Fault(405, 'methodNotAllowed',
                             'The method is not allowed for this resource.')
            status, body = self.create(self._body(environ), version)
        except _Fault as fault:
            status, body = fault.code, fault.body()
        return self._respond(start_response, status, body, version)

    def _version(self, environ):
        headers = microversion_parse.headers_from_wsgi_environ(environ)
        raw = microversion_parse.get_version(
            headers, service_type='compute',
            legacy_headers=[LEGACY_VERSION_HEADER])
        if raw is None:
            return MIN_VERSION
        if raw.strip() == 'latest':
            return MAX_VERSION
        try:
            major, minor = (int(p) for p in raw.strip().split('.'))
        except ValueError:
            raise _Fault(400, 'badRequest',
                         'API Version String %s is of invalid format. Must '
                         'be of format MajorNum.MinorNum.' % raw)
        version = (major, minor)
        if not MIN_VERSION <= version <= MAX_VERSION:
            raise _Fault(406, 'notAcceptable',
                         'Version %s is not supported by the API. Minimum is '
                         '%s and maximum is %s.'
                         % (raw, _version_string(MIN_VERSION),
                            _version_string(MAX_VERSION)))
        return version

    @staticmethod
    def _body(environ):
        try:
            length = int(environ.get('CONTENT_LENGTH') or 0)
        except ValueError:
            length = 0
        raw = environ['wsgi.input'].read(length) if length else b''
        try:
            return json.loads(raw)
        except ValueError:
            raise _Fault(400, 'badRequest',
                         'Malformed request body')

    def create(self, body, version):
        """(status, body) for one POST, dispatching accepted events."""
        try:
            jsonschema.validate(body, request_schema(version))
        except jsonschema.ValidationError as e:
            field = '/'.join(str(p) for p in e.absolute_path) or 'body'
            raise _Fault(400, 'badRequest',
                         'Invalid input for field/attribute %s. Value: %s. %s'
                         % (field, json.dumps(e.instance), e.message))
        for event in body['events']:
            if not uuidutils.is_uuid_like(event['server_uuid']):
                raise _Fault(400, 'badRequest',
                             'Invalid input for field/attribute server_uuid. '
                             'Value: %s. %r is not a \'uuid\''
                             % (event['server_uuid'], event['server_uuid']))
        result = 200
        response_events = []
        accepted = []
        for event in body['events']:
            response_events.append(event)
            instance_uuid = event['server_uuid']
            name = EVENT_NAME if event['name'] == ALIAS_NAME \
                else event['name']
            status = event.get('status', 'completed')
            if status == ALIAS_STATUS:
                status = 'completed'
            tag = event.get('tag')
            known, host = self.instances.lookup(instance_uuid)
            if not known:
                LOG.debug('Dropping event %s:%s for unknown instance %s',
                          name, tag, instance_uuid)
                event['status'], event['code'] = 'failed', 404
                result = 207
            elif name in TAG_REQUIRED and tag is None:
                LOG.debug('Event tag is missing for instance %s. Dropping '
                          'event %s', instance_uuid, name)
                event['status'], event['code'] = 'failed', 400
                result = 207
            elif host:
                LOG.info('Creating event %s:%s for instance %s on %s',
                         name, tag, instance_uuid, host)
                accepted.append({'instance_uuid': instance_uuid,
                                 'name': name, 'tag': tag, 'status': status})
                event['status'], event['code'] = 'completed', 200
            else:
                LOG.debug('Unable to find a host for instance %s. Dropping '
                          'event %s', instance_uuid, name)
                event['status'], event['code'] = 'failed', 422
                result = 207
        for event in accepted:
            self._dispatch(event)
        return result, {'events': response_events}

    def _dispatch(self, event):
        waiter = self.instance_events.pop_instance_event(
            event['instance_uuid'], event['name'], event['tag'])
        if waiter is None:
            LOG.warning('Received unexpected event %s for instance %s',
                        make_key(event['name'], event['tag']),
                        event['instance_uuid'])
            return
        waiter.set(event)

    @staticmethod
    def _respond(start_response, status, body, version):
        data = json.dumps(body).encode()
        reasons = {200: 'OK', 207: 'Multi-Status', 400: 'Bad Request',
                   404: 'Not Found', 405: 'Method Not Allowed',
                   406: 'Not Acceptable'}
        version_string = _version_string(version)
        headers = [('Content-Type', 'application/json'),
                   ('Content-Length', str(len(data))),
                   (VERSION_HEADER, 'compute ' + version_string),
                   (LEGACY_VERSION_HEADER, version_string),
                   ('Vary', '%s, %s' % (VERSION_HEADER,
                                        LEGACY_VERSION_HEADER))]
        if status == 405:
            headers.append(('Allow', 'POST'))
        start_response('%d %s' % (status, reasons.get(status, '')), headers)
        return [data]


class _Fault(Exception):
    def __init__(self, code, kind, message):
        super().__init__(message)
        self.code = code
        self.kind = kind
        self.message = message

    def body(self):
        return {self.kind: {'code': self.code, 'message': self.message}}


# Nova's rule for POST /os-server-external-events
# (os_compute_api:os-server-external-events:create): the service role.
EVENTS_POLICY = 'os_compute_api:os-server-external-events:create'
SERVICE_ROLE = 'service'


class ServiceRoleRequired:
    """Behind keystonemiddleware: only a caller whose token carries the
    service role may post events, as Nova's default policy says; another
    valid token is a 403 with Nova's message.
    """

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        roles = {r.strip().lower()
                 for r in environ.get('HTTP_X_ROLES', '').split(',')}
        if SERVICE_ROLE not in roles:
            fault = _Fault(403, 'forbidden', 'Policy doesn\'t allow %s to be '
                           'performed.' % EVENTS_POLICY)
            return ExternalEventsApp._respond(start_response, 403,
                                              fault.body(), MIN_VERSION)
        return self.app(environ, start_response)


def keystone_protected(app, authtoken_conf):
    """`app` behind keystonemiddleware's auth_token, configured by
    `authtoken_conf` (an oslo.config ConfigOpts holding a
    [keystone_authtoken] section, or a dict of its options as in a paste
    file), requiring the service role.
    """
    from keystonemiddleware import auth_token
    from oslo_config import cfg

    if isinstance(authtoken_conf, dict):
        # Options as a paste file gives them, read through a private option
        # object (keystonemiddleware's fallback is oslo.config's global
        # CONF, where the auth plugin's options would stay registered).
        private = cfg.ConfigOpts()
        private([], project='nova-events', default_config_files=[])
        conf = dict(authtoken_conf, oslo_config_config=private)
    else:
        conf = {'oslo_config_config': authtoken_conf}
    return auth_token.AuthProtocol(ServiceRoleRequired(app), conf)


class Receiver:
    """What the service sees of Nova: the instances and the events API;
    and what the compute side waits on.

    With `authtoken_conf` the events API validates tokens with
    keystonemiddleware and wants the service role (keystone_protected);
    without, it trusts every caller (the embedded stack's noauth mode).
    """

    def __init__(self, authtoken_conf=None):
        self.instances = Instances()
        self.instance_events = InstanceEvents()
        self.app = ExternalEventsApp(self.instances, self.instance_events)
        if authtoken_conf is not None:
            self.app = keystone_protected(self.app, authtoken_conf)
