# SPDX-License-Identifier: Apache-2.0
"""cyborg.db.bindings on every backend: the claim uses the handle picker
its caller passes in (the binder passes the drivers'; the DB layer knows
no drivers)."""

import json

from oslo_utils import uuidutils
import pytest

from cyborg.db import api
from cyborg.db import arqs
from cyborg.db import bindings
from tests.db.prepared import prepared_only
from tests.db import seed


def _bind_started(deployable_row, groups=None):
    dp = seed.profile(groups=groups)
    (arq,) = seed.arq_requests(1, dp=dp)
    (device,) = seed.select(seed.DEVICE,
                            seed.DEVICE.c.id == deployable_row['device_id'])
    arqs.start_bind({arq['uuid']: {
        'hostname': device['hostname'],
        'device_rp_uuid': deployable_row['rp_uuid'],
        'instance_uuid': uuidutils.generate_uuid()}})
    return arq


def test_claim_takes_the_handle_the_picker_chooses(database):
    dep = seed.deployable(driver_name='picky')
    handles = [seed.attach_handle(dep) for _ in range(3)]
    groups = [{'resources:PGPU': '1', 'trait:CUSTOM_LAST': 'required'}]
    arq = _bind_started(dep, groups)
    asked = []

    def picker(driver_name):
        def pick(deployable, request_group, free):
            asked.append((driver_name, deployable['id'], request_group,
                          [h['id'] for h in free]))
            return free[::-1]
        return pick

    claim = bindings.claim_handle(arq['uuid'], picker)
    assert claim['handle']['id'] == handles[-1]['id']
    assert claim['handle']['request_group'] == groups[0]
    assert asked == [('picky', dep['id'], groups[0],
                      [h['id'] for h in handles])]
    in_use = {h['id']: h['in_use'] for h in seed.select(seed.AH)}
    assert in_use == {handles[0]['id']: False, handles[1]['id']: False,
                      handles[2]['id']: True}


def test_claim_fails_when_the_picker_finds_nothing_suitable(database):
    dep = seed.deployable()
    handle = seed.attach_handle(dep)
    arq = _bind_started(dep)

    def picker(driver_name):
        return lambda deployable, request_group, free: []

    with pytest.raises(bindings.BindError) as e:
        bindings.claim_handle(arq['uuid'], picker)
    assert str(e.value).startswith(
        'No free attach handle for this request on deployable %s'
        % dep['name'])
    assert seed.select(seed.AH)[0]['id'] == handle['id']
    assert seed.select(seed.AH)[0]['in_use'] is False
    assert arqs.get(arq['uuid'])['state'] == 'BindStarted'


def _picker(driver_name):
    return lambda deployable, request_group, free: free


def _row(table, id_):
    (row,) = seed.select(table, table.c.id == id_)
    return row


def test_a_batch_claim_gives_each_arq_its_rows_as_sqlalchemy_reads_them(
        database):
    """The claim's ARQ, deployable, device and handle are every column of
    their rows, with their types (datetimes, booleans), although the
    three tables share column names; each ARQ of a batch has its own
    outcome.
    """
    first, second = seed.deployable(), seed.deployable()
    handles = {dep['id']: seed.attach_handle(dep) for dep in (first, second)}
    on_first, on_second, none_left = (_bind_started(dep) for dep in
                                      (first, second, first))
    (unknown,) = seed.arq_requests(1)
    arqs.start_bind({unknown['uuid']: {
        'hostname': 'h', 'device_rp_uuid': uuidutils.generate_uuid(),
        'instance_uuid': uuidutils.generate_uuid()}})
    (initial,) = seed.arq_requests(1)
    before = {a['uuid']: a for a in seed.select(seed.ARQ)}
    with prepared_only():
        claims = bindings.claim_handles(
            [on_first['uuid'], on_second['uuid'], none_left['uuid'],
             unknown['uuid'], initial['uuid']], _picker, owner='me')
    for arq, dep in ((on_first, first), (on_second, second)):
        claim = claims[arq['uuid']]
        assert claim['arq'] == before[arq['uuid']]
        assert claim['deployable'] == _row(seed.DEPLOYABLE, dep['id'])
        assert claim['device'] == _row(seed.DEVICE, dep['device_id'])
        handle = _row(seed.AH, handles[dep['id']]['id'])
        assert handle['in_use'] is True
        assert claim['handle'] == dict(handle,
                                       request_group=seed.GROUPS[0])
    assert str(claims[none_left['uuid']]).startswith(
        'No free attach handle for this request on deployable %s (1 in use)'
        % first['name'])
    assert isinstance(claims[unknown['uuid']], bindings.BindError)
    assert isinstance(claims[initial['uuid']], bindings.Gone)
    held = {a['uuid']: (a['attach_handle_id'], a['bind_owner'])
            for a in seed.select(seed.ARQ)}
    assert held[on_first['uuid']] == (handles[first['id']]['id'], 'me')
    assert held[on_second['uuid']] == (handles[second['id']]['id'], 'me')
    assert held[none_left['uuid']] == (None, None)


def test_a_re_driven_claim_keeps_its_handle_and_another_owner_is_gone(
        database):
    dep = seed.deployable()
    seed.attach_handle(dep)
    seed.attach_handle(dep)
    arq = _bind_started(dep)
    first = bindings.claim_handle(arq['uuid'], _picker, owner='me')
    again = bindings.claim_handle(arq['uuid'], _picker, owner='me')
    assert again['handle']['id'] == first['handle']['id']
    with pytest.raises(bindings.Gone):
        bindings.claim_handle(arq['uuid'], _picker, owner='peer')
    assert [h['in_use'] for h in seed.select(seed.AH)] == [True, False]


def test_finish_many_records_each_outcome_once(database):
    """Bound keeps the handle and records what prepare() learnt; failed
    frees it (for release); an ARQ no longer BindStarted is left alone
    and reported gone, also on a second finish.
    """
    dep = seed.deployable()
    for _ in range(3):
        seed.attach_handle(dep)
    bound, failed, unbound = (_bind_started(dep) for _ in range(3))
    claims = bindings.claim_handles(
        [bound['uuid'], failed['uuid'], unbound['uuid']], _picker)
    arqs.unbind([unbound['uuid']])
    with prepared_only():
        released, gone = bindings.finish_many(
            {bound['uuid']: None, failed['uuid']: 'x' * 300,
             unbound['uuid']: None},
            {bound['uuid']: (claims[bound['uuid']]['handle']['uuid'],
                             {'mig_uuid': 'MIG-1'})})
    assert gone == [unbound['uuid']]
    assert [h['uuid'] for h in released] == [
        claims[failed['uuid']]['handle']['uuid']]
    rows = {a['uuid']: a for a in seed.select(seed.ARQ)}
    assert rows[bound['uuid']]['state'] == 'Bound'
    assert rows[bound['uuid']]['event_pending'] is True
    assert rows[failed['uuid']]['state'] == 'BindFailed'
    assert rows[failed['uuid']]['bind_failure'] == 'x' * 255
    assert rows[failed['uuid']]['attach_handle_id'] is None
    handles = {h['uuid']: h for h in seed.select(seed.AH)}
    kept = handles[claims[bound['uuid']]['handle']['uuid']]
    assert kept['in_use'] is True
    assert json.loads(kept['attach_info'])['mig_uuid'] == 'MIG-1'
    assert kept['updated_at'] is not None
    assert handles[claims[failed['uuid']]['handle']['uuid']][
        'in_use'] is False
    with prepared_only():
        again = bindings.finish_many({bound['uuid']: None,
                                      failed['uuid']: 'again'})
    assert again == ([], [bound['uuid'], failed['uuid']])


def test_pending_events_until_delivered(database, monkeypatch):
    dep = seed.deployable()
    seed.attach_handle(dep)
    bound, failed, quiet = (_bind_started(dep) for _ in range(3))
    bindings.claim_handle(bound['uuid'], _picker)
    bindings.finish_many({bound['uuid']: None, failed['uuid']: 'no'})
    instance = {a['uuid']: a['instance_uuid'] for a in seed.select(seed.ARQ)}
    # More than one UPDATE's worth: delivered in several.
    monkeypatch.setattr(api, 'IN_MAX', 1)
    with prepared_only():
        events = bindings.pending_events()
        some = bindings.pending_events([failed['uuid'], quiet['uuid']])
        bindings.events_delivered([e['tag'] for e in events])
        left = bindings.pending_events()
        bindings.events_delivered([])
    assert events == [
        {'name': 'accelerator-request-bound', 'tag': uuid,
         'server_uuid': instance[uuid], 'status': status}
        for uuid, status in ((bound['uuid'], 'completed'),
                             (failed['uuid'], 'failed'))]
    assert some == events[1:]
    assert left == []
    assert not any(a['event_pending'] for a in seed.select(seed.ARQ))


def test_bind_started_by_age_and_holder(database):
    dep = seed.deployable()
    seed.attach_handle(dep)
    held, queued = _bind_started(dep), _bind_started(dep)
    bindings.claim_handle(held['uuid'], _picker, owner='me')
    instance = {a['uuid']: a['instance_uuid'] for a in seed.select(seed.ARQ)}
    with prepared_only():
        found = [bindings.bind_started(),
                 bindings.bind_started(unowned=True),
                 bindings.bind_started(older_than=3600),
                 bindings.bind_started(older_than=-3600, unowned=True)]
    both = {instance[held['uuid']]: [held['uuid']],
            instance[queued['uuid']]: [queued['uuid']]}
    queued_only = {instance[queued['uuid']]: [queued['uuid']]}
    assert found == [both, queued_only, {}, queued_only]
