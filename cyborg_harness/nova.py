# SPDX-License-Identifier: Apache-2.0
"""Nova's external events API for a deployment under test: the real one
of nova_cyborg_client (its validation, codes and 207 answers), served on
a loopback port, recording every event it is sent.

Nova answers an event for an instance it does not know with 404, and for
one not yet on a host with 422. The service under test binds ARQs for
instances no Nova booted, so by default every instance not added to
`receiver.instances` is taken to be on host `every_instance_on`; pass
None for Nova's own answers. Accepted events nobody waits for are
recorded, not logged as unexpected (Nova's compute would warn).
"""

import json
import threading
import time

from nova_cyborg_client import events as nova_events

from cyborg_harness import net

EVENT_NAME = nova_events.EVENT_NAME
DEFAULT_HOST = 'nova-compute'


class _Instances(nova_events.Instances):
    """Nova's instances, an instance not added being on `default_host`."""

    def __init__(self, default_host):
        super().__init__()
        self.default_host = default_host

    def lookup(self, instance_uuid):
        known, host = super().lookup(instance_uuid)
        if not known and self.default_host:
            return True, self.default_host
        return known, host


class _Sink:
    def set(self, event):
        pass


class _InstanceEvents(nova_events.InstanceEvents):
    """Waiters as Nova keeps them; an event nobody waits for is taken
    quietly (it is in the record already).
    """

    def pop_instance_event(self, instance_uuid, name, tag):
        waiter = super().pop_instance_event(instance_uuid, name, tag)
        return _Sink() if waiter is None else waiter


class NovaEvents:
    """nova_cyborg_client's events Receiver, served on `port` (0: a free
    one), plus a record of what arrived.

    events     every event sent, as sent, in order of arrival
    posts      how many POSTs arrived
    batches    (perf_counter at arrival, number of events) per POST
    arrivals   tag -> (perf_counter, event) of the first event per tag
    duplicates events whose tag had arrived already
    versions   {(OpenStack-API-Version, X-OpenStack-Nova-API-Version)}
    refused    (status, body) of answers other than 200 and 207
    """

    def __init__(self, port=0, every_instance_on=DEFAULT_HOST, start=True):
        self.receiver = nova_events.Receiver()
        self.receiver.instances = self.receiver.app.instances = \
            _Instances(every_instance_on)
        self.receiver.instance_events = \
            self.receiver.app.instance_events = _InstanceEvents()
        self.port = port or net.free_port()
        self.url = net.url(self.port)
        self._cond = threading.Condition()
        self.events = []
        self.posts = 0
        self.batches = []
        self.arrivals = {}
        self.duplicates = []
        self.versions = set()
        self.refused = []
        self._last_version = None
        self.server = None
        if start:
            self.up()

    # -- serving ------------------------------------------------------------

    def up(self):
        """Listen on `port` (again, after down())."""
        from cyborg.common import wsgi_server

        self.server = wsgi_server.ThreadedServer('nova-events', self,
                                                 port=self.port)
        self.server.start()
        return self

    def down(self):
        """Stop listening: Nova is unreachable until up()."""
        if self.server is not None:
            self.server.stop()
            self.server = None

    stop = down

    def __call__(self, environ, start_response):
        raw = environ['wsgi.input'].read(
            int(environ.get('CONTENT_LENGTH') or 0))
        arrived = time.perf_counter()
        try:
            sent = json.loads(raw)['events']
            if not isinstance(sent, list):
                sent = []
        except (ValueError, KeyError, TypeError):
            sent = []
        self._record(arrived, sent, environ)
        environ = dict(environ, CONTENT_LENGTH=str(len(raw)))
        environ['wsgi.input'] = _Body(raw)
        answer = {}

        def recording_start_response(status, headers, *args):
            answer['status'] = int(status.split()[0])
            return start_response(status, headers, *args)

        body = self.receiver.app(environ, recording_start_response)
        if answer.get('status') not in (200, 207):
            with self._cond:
                self.refused.append((answer.get('status'),
                                     b''.join(body).decode()))
        return body

    def _record(self, arrived, sent, environ):
        with self._cond:
            self.posts += 1
            self._last_version = environ.get('HTTP_OPENSTACK_API_VERSION')
            self.batches.append((arrived, len(sent)))
            self.versions.add((environ.get('HTTP_OPENSTACK_API_VERSION'),
                               environ.get(
                                   'HTTP_X_OPENSTACK_NOVA_API_VERSION')))
            for event in sent:
                self.events.append(event)
                tag = event.get('tag') if isinstance(event, dict) else None
                if tag in self.arrivals:
                    self.duplicates.append(event)
                else:
                    self.arrivals[tag] = (arrived, event)
            self._cond.notify_all()

    # -- reading the record -------------------------------------------------

    @property
    def version(self):
        """The OpenStack-API-Version of the last POST."""
        with self._cond:
            return self._last_version

    def by_tag(self):
        """tag -> [events with that tag], in order of arrival."""
        with self._cond:
            found = {}
            for event in self.events:
                found.setdefault(event.get('tag'), []).append(event)
            return found

    def wait_events(self, count, timeout=60):
        """The events once at least `count` arrived (fewer at the
        timeout).
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.events) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return list(self.events)

    def wait_for(self, tags, timeout=60):
        """True once an event arrived for every tag; False at the
        timeout.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while not all(t in self.arrivals for t in tags):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def take(self, tag, timeout=60):
        """(perf_counter at arrival, event) of the first event for `tag`,
        forgotten once taken; TimeoutError if none came in time.
        """
        if not self.wait_for([tag], timeout):
            raise TimeoutError('no event for %s in %.0fs' % (tag, timeout))
        with self._cond:
            return self.arrivals.pop(tag)


class _Body:
    """wsgi.input for the receiver: the body already read."""

    def __init__(self, raw):
        self._raw = raw

    def read(self, size=-1):
        data = self._raw if size is None or size < 0 else self._raw[:size]
        self._raw = self._raw[len(data):]
        return data
