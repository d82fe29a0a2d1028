# SPDX-License-Identifier: Apache-2.0
"""POST /os-server-external-events: Nova's codes and rules."""

import logging
import uuid

import pytest
import webob

from nova_cyborg_client import events

EVENT = 'accelerator-request-bound'
NEW = {'OpenStack-API-Version': 'compute 2.82'}


@pytest.fixture
def receiver():
    return events.Receiver()


def _post(receiver, body, headers=NEW, path='/os-server-external-events',
          method='POST'):
    request = webob.Request.blank(path, method=method, headers=dict(headers))
    if body is not None:
        request.json = body
    return request.get_response(receiver.app)


def _event(server, tag='arq-1', **kw):
    event = {'name': EVENT, 'server_uuid': server}
    if tag is not None:
        event['tag'] = tag
    event.update(kw)
    return event


def test_accepted_event_reaches_its_waiter(receiver):
    server = str(uuid.uuid4())
    receiver.instances.add(server, 'node1')
    waiter = receiver.instance_events.prepare_for_instance_event(
        server, EVENT, 'arq-1')
    resp = _post(receiver, {'events': [_event(server, status='completed')]})
    assert resp.status_int == 200
    assert resp.json == {'events': [
        {'name': EVENT, 'server_uuid': server, 'tag': 'arq-1',
         'status': 'completed', 'code': 200}]}
    assert resp.headers['OpenStack-API-Version'] == 'compute 2.82'
    assert resp.headers['X-OpenStack-Nova-API-Version'] == '2.82'
    assert waiter.wait(0) == {'instance_uuid': server, 'name': EVENT,
                              'tag': 'arq-1', 'status': 'completed'}


def test_status_defaults_to_completed_and_failed_is_passed_on(receiver):
    server = str(uuid.uuid4())
    receiver.instances.add(server, 'node1')
    w1 = receiver.instance_events.prepare_for_instance_event(server, EVENT,
                                                             'a')
    w2 = receiver.instance_events.prepare_for_instance_event(server, EVENT,
                                                             'b')
    resp = _post(receiver, {'events': [_event(server, 'a'),
                                       _event(server, 'b', status='failed')]})
    assert resp.status_int == 200
    assert [e['code'] for e in resp.json['events']] == [200, 200]
    assert w1.wait(0)['status'] == 'completed'
    assert w2.wait(0)['status'] == 'failed'


def test_per_event_codes_and_207(receiver, caplog):
    on_host, no_host = str(uuid.uuid4()), str(uuid.uuid4())
    unknown = str(uuid.uuid4())
    receiver.instances.add(on_host, 'node1')
    receiver.instances.add(no_host)
    with caplog.at_level(logging.WARNING):
        resp = _post(receiver, {'events': [
            _event(on_host, 'a'), _event(no_host, 'b'), _event(unknown, 'c'),
            _event(on_host, tag=None)]})
    assert resp.status_int == 207
    assert [(e['status'], e['code']) for e in resp.json['events']] == [
        ('completed', 200), ('failed', 422), ('failed', 404), ('failed', 400)]
    # Accepted, but nobody was waiting: dropped, as Nova does.
    assert 'Received unexpected event %s-a' % EVENT in caplog.text


def test_all_failed_is_still_207(receiver):
    resp = _post(receiver, {'events': [_event(str(uuid.uuid4()))]})
    assert resp.status_int == 207
    assert resp.json['events'][0]['code'] == 404


@pytest.mark.parametrize('headers,status', [
    ({}, 400),                                             # 2.1
    ({'OpenStack-API-Version': 'compute 2.81'}, 400),
    ({'X-OpenStack-Nova-API-Version': '2.81'}, 400),
    ({'OpenStack-API-Version': 'compute 2.82'}, 200),
    ({'X-OpenStack-Nova-API-Version': '2.82'}, 200),
    ({'OpenStack-API-Version': 'compute latest'}, 200),
    ({'OpenStack-API-Version': 'compute 2.93'}, 200),
    # The standard header wins over the legacy one.
    ({'OpenStack-API-Version': 'compute 2.82',
      'X-OpenStack-Nova-API-Version': '2.1'}, 200),
    ({'OpenStack-API-Version': 'compute 3.0'}, 406),
    ({'OpenStack-API-Version': 'compute two'}, 400),
])
def test_accelerator_event_needs_2_82(receiver, headers, status):
    server = str(uuid.uuid4())
    receiver.instances.add(server, 'node1')
    resp = _post(receiver, {'events': [_event(server)]}, headers=headers)
    assert resp.status_int == status, resp.json


def test_other_events_below_2_82(receiver):
    server = str(uuid.uuid4())
    receiver.instances.add(server, 'node1')
    resp = _post(receiver, {'events': [
        {'name': 'network-changed', 'server_uuid': server}]}, headers={})
    assert resp.status_int == 200
    assert resp.headers['OpenStack-API-Version'] == 'compute 2.1'


def test_seed_spelling_is_an_alias(receiver):
    server = str(uuid.uuid4())
    receiver.instances.add(server, 'node1')
    waiter = receiver.instance_events.prepare_for_instance_event(
        server, EVENT, 'arq-1')
    resp = _post(receiver, {'events': [
        {'name': 'arq_resolved', 'server_uuid': server, 'tag': 'arq-1',
         'status': 'ok'}]}, headers={})
    assert resp.status_int == 200
    assert resp.json['events'][0]['code'] == 200
    assert waiter.wait(0)['status'] == 'completed'
    assert waiter.wait(0)['name'] == EVENT


@pytest.mark.parametrize('body', [
    None,
    {},
    {'events': []},
    {'events': [{'name': EVENT}]},
    {'events': [{'server_uuid': 'x'}]},
    {'events': [_event('not-a-uuid')]},
    {'events': [_event(str(uuid.uuid4()), status='done')]},
    {'events': [_event(str(uuid.uuid4()), tag='t' * 256)]},
    {'events': [_event(str(uuid.uuid4()), code=200)]},
    {'events': [{'name': 'reboot', 'server_uuid': str(uuid.uuid4())}]},
    {'events': [_event(str(uuid.uuid4()))], 'other': 1},
])
def test_bad_bodies(receiver, body):
    resp = _post(receiver, body)
    assert resp.status_int == 400
    assert resp.json['badRequest']['code'] == 400


def test_routes(receiver):
    server = str(uuid.uuid4())
    receiver.instances.add(server, 'node1')
    body = {'events': [_event(server)]}
    assert _post(receiver, body, path='/v2.1/os-server-external-events'
                 ).status_int == 200
    assert _post(receiver, body, path='/servers').status_int == 404
    resp = _post(receiver, None, method='GET')
    assert resp.status_int == 405
    assert resp.headers['Allow'] == 'POST'


def test_instance_registry(receiver):
    server = str(uuid.uuid4())
    instances = receiver.instances
    assert instances.lookup(server) == (False, None)
    instances.add(server)
    assert instances.lookup(server) == (True, None)
    instances.set_host(server, 'node1')
    assert instances.lookup(server) == (True, 'node1')
    instances.remove(server)
    assert instances.lookup(server) == (False, None)
