# SPDX-License-Identifier: Apache-2.0
"""The deployment harness's own helpers: percentiles, waiting, CPU time,
free ports and Nova's events API as the harness serves it."""

import os
import socket
import uuid

import pytest
import requests

from cyborg_harness import cpu
from cyborg_harness import net
from cyborg_harness import nova
from cyborg_harness import stats
from cyborg_harness import waiting


def test_percentile_is_nearest_rank_in_any_order():
    values = [5, 1, 4, 2, 3, 10, 9, 8, 7, 6]
    assert stats.percentile(values, 50) == 5
    assert stats.percentile(values, 90) == 9
    assert stats.percentile(values, 99) == 10
    assert stats.percentile(values, 100) == 10
    assert stats.percentile([0.25], 1) == 0.25
    assert stats.percentile([], 50) is None


def test_eventually_returns_the_value_or_names_what_never_came():
    calls = []

    def third_time():
        calls.append(1)
        return len(calls) == 3 and 'ready'

    assert waiting.eventually(third_time, 'x', interval=0.01) == 'ready'
    with pytest.raises(waiting.TimedOut, match='the moon.*\nstill dark'):
        waiting.eventually(lambda: None, 'the moon', timeout=0.05,
                           interval=0.01, detail=lambda: 'still dark')


def test_eventually_stops_when_check_raises():
    def died():
        raise RuntimeError('exited with 1')

    with pytest.raises(RuntimeError, match='exited with 1'):
        waiting.eventually(lambda: None, 'x', timeout=60, check=died)


def test_cpu_time_of_this_process_grows():
    before = cpu.process_seconds(os.getpid())
    sum(i * i for i in range(2000000))
    after = cpu.process_seconds(os.getpid())
    assert after > before
    assert cpu.tree_seconds(os.getpid()) >= after
    assert cpu.group_seconds(os.getpgid(0)) >= after
    assert cpu.machine_busy_seconds() > 0


def test_free_port_can_be_listened_on():
    port = net.free_port()
    assert not net.reachable(net.LOOPBACK, port)
    with socket.socket() as s:
        s.bind((net.LOOPBACK, port))
        s.listen()
        assert net.reachable(net.LOOPBACK, port)


def _post(url, events):
    return requests.post(url + '/os-server-external-events',
                         json={'events': events}, timeout=10,
                         headers={'OpenStack-API-Version': 'compute 2.82'})


def _event(server, tag):
    return {'name': nova.EVENT_NAME, 'server_uuid': server, 'tag': tag,
            'status': 'completed'}


def test_nova_events_answers_as_nova_and_records_every_event():
    events = nova.NovaEvents()
    try:
        anywhere, no_host = str(uuid.uuid4()), str(uuid.uuid4())
        events.receiver.instances.add(no_host)
        r = _post(events.url, [_event(anywhere, 'a')])
        assert r.status_code == 200
        assert r.json()['events'][0]['code'] == 200
        r = _post(events.url, [_event(no_host, 'b'), _event(anywhere, 'a')])
        assert r.status_code == 207
        assert [e['code'] for e in r.json()['events']] == [422, 200]
        r = _post(events.url, [{'name': 'nope', 'server_uuid': anywhere}])
        assert r.status_code == 400
        assert events.events == [_event(anywhere, 'a'), _event(no_host, 'b'),
                                 _event(anywhere, 'a'),
                                 {'name': 'nope', 'server_uuid': anywhere}]
        assert events.posts == 3
        assert [n for _, n in events.batches] == [1, 2, 1]
        assert events.duplicates == [_event(anywhere, 'a')]
        assert events.version == 'compute 2.82'
        assert [status for status, _ in events.refused] == [400]
        assert events.wait_for(['a', 'b'], timeout=1)
        assert not events.wait_for(['c'], timeout=0.05)
        assert sorted(t for t in events.by_tag() if t) == ['a', 'b']
        _, first = events.take('a', timeout=1)
        assert first == _event(anywhere, 'a')
        with pytest.raises(TimeoutError):
            events.take('a', timeout=0.05)
    finally:
        events.down()


def test_nova_events_down_and_up_again_on_its_port():
    events = nova.NovaEvents()
    try:
        events.down()
        with pytest.raises(requests.ConnectionError):
            _post(events.url, [_event(str(uuid.uuid4()), 'x')])
        events.up()
        assert _post(events.url,
                     [_event(str(uuid.uuid4()), 'x')]).status_code == 200
    finally:
        events.down()
