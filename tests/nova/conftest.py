# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the Nova side: a fresh option object, a real API server on
SQLite, a scriptable stub accelerator API, and a whole stack (cyborg-aio in
a subprocess, telling this process's events API about bindings)."""

import json

import pytest
import yaml

from cyborg import data
from cyborg_harness import aio as harness_aio
from nova_cyborg_client import conf as nova_conf
from nova_cyborg_client import events as nova_events
from nova_cyborg_client import server as nova_server

HOST_SPEC = harness_aio.HOST_SPEC
START_TIMEOUT = 120


@pytest.fixture(autouse=True)
def conf(monkeypatch):
    """Every test gets default Nova-side options."""
    fresh = nova_conf.new_conf()
    monkeypatch.setattr(nova_conf, 'CONF', fresh)
    return fresh


def point_at(conf, api=None, placement=None):
    if api:
        conf.set_override('endpoint_override', api, group='cyborg')
    if placement:
        conf.set_override('endpoint_override', placement, group='placement')


# -- a stub accelerator API, for what a real one cannot be made to do -------

class StubCyborg:
    """Answers from `routes` {(METHOD, path): (status, body) or
    callable(request) -> (status, body)}, body JSON-encoded unless bytes;
    records every request.
    """

    def __init__(self):
        self.routes = {}
        self.requests = []
        self._server = nova_server.Server(self).start()
        self.url = self._server.url + '/v2'

    def __call__(self, environ, start_response):
        length = int(environ.get('CONTENT_LENGTH') or 0)
        raw = environ['wsgi.input'].read(length) if length else b''
        request = {
            'method': environ['REQUEST_METHOD'],
            'path': environ['PATH_INFO'],
            'query': environ.get('QUERY_STRING', ''),
            'headers': {k[5:].replace('_', '-').title(): v
                        for k, v in environ.items() if k.startswith('HTTP_')},
            'raw': raw.decode(),
            'json': json.loads(raw) if raw else None,
        }
        self.requests.append(request)
        path = request['path']
        if path.startswith('/v2'):
            path = path[3:]
        answer = self.routes.get((request['method'], path), (404, {}))
        if callable(answer):
            answer = answer(request)
        status, body = answer
        if body is None:
            data = b''
        elif isinstance(body, bytes):   # sent as it is
            data = body
        else:
            data = json.dumps(body).encode()
        start_response('%d X' % status,
                       [('Content-Type', 'application/json'),
                        ('Content-Length', str(len(data)))])
        return [data]

    def stop(self):
        self._server.stop()


@pytest.fixture
def stub(conf):
    stub = StubCyborg()
    point_at(conf, api=stub.url)
    yield stub
    stub.stop()


# -- our real API on SQLite, served by cheroot -------------------------------

@pytest.fixture
def cyborg_api(sqlite_database, conf):
    from cyborg.api import app as api_app
    from cyborg.common import wsgi_server
    from cyborg.conf import CONF

    server = wsgi_server.ThreadedServer('cyborg-api',
                                        api_app.setup_app(CONF))
    server.start()
    point_at(conf, api=server.url + '/v2')
    yield server.url + '/v2'
    server.stop()


# -- the whole stack ----------------------------------------------------------

class SwitchableReceiver:
    """The events API the stack notifies; tests swap the Receiver behind
    it (a fresh one per test).
    """

    def __init__(self):
        self.receiver = nova_events.Receiver()
        self.server = nova_server.Server(self).start()

    def __call__(self, environ, start_response):
        return self.receiver.app(environ, start_response)


class Stack:
    """cyborg-aio --no-demo (the harness's aio mode) with [nova] pointing
    at this process (or at nova_endpoint).
    """

    def __init__(self, tmp_path, node, nova_endpoint=None, config_extra='',
                 extra_args=(), host_spec=HOST_SPEC):
        self.node = node
        self.nova = None
        if nova_endpoint is None:
            self.nova = SwitchableReceiver()
            nova_endpoint = self.nova.server.url
        config = tmp_path / 'cyborg.conf'
        config.write_text('[DEFAULT]\nhost = %s\n' % node + config_extra)
        try:
            self.aio = harness_aio.Aio(
                tmp_path, state_dir=tmp_path / 'state', config_file=config,
                nova_endpoint=nova_endpoint, host_spec=host_spec,
                extra_args=extra_args, timeout=START_TIMEOUT)
        except BaseException:
            if self.nova is not None:
                self.nova.server.stop()
            raise
        self.api, self.placement = self.aio.api, self.aio.placement

    def logs(self):
        return self.aio.log_tail(80)

    def stop(self):
        self.aio.stop()
        if self.nova is not None:
            self.nova.server.stop()


@pytest.fixture(scope='module')
def aio_stack(tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp('stack'), 'nova-flow-node')
    yield stack
    stack.stop()


@pytest.fixture
def stack(aio_stack, conf):
    """The module's stack, a fresh Receiver, Nova-side options pointing at
    it.
    """
    aio_stack.nova.receiver = nova_events.Receiver()
    point_at(conf, api=aio_stack.api, placement=aio_stack.placement)
    return aio_stack


def vgpu_host_spec(tmp_path, layout):
    """The shipped h200-vgpu spec, or a copy of it in the other layout of
    the vGPU types ('vfio': VF nvidia/ files; 'mdev': mdev types on VFs).
    """
    path = data.fake_host('h200-vgpu')
    with open(path) as f:
        spec = yaml.safe_load(f)
    if {g['vgpu_manager'].get('layout', 'vfio')
            for g in spec['nvidia']['gpus']} == {layout}:
        return path
    for gpu in spec['nvidia']['gpus']:
        gpu['vgpu_manager']['layout'] = layout
    path = tmp_path / ('h200-vgpu-%s.yaml' % layout)
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope='module', params=['vfio', 'mdev'])
def vgpu_stack(request, tmp_path_factory):
    """A module's stack on the fake H200 vGPU host, once per layout; a
    module uses it by overriding aio_stack with it.
    """
    tmp = tmp_path_factory.mktemp('stack')
    stack = Stack(tmp, 'nova-vgpu', host_spec=vgpu_host_spec(
        tmp, request.param))
    stack.layout = request.param
    stack.sysfs = str(tmp / 'state' / 'fake-sysfs')
    yield stack
    stack.stop()
