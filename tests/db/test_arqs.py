# SPDX-License-Identifier: Apache-2.0
"""cyborg.db.arqs on every backend."""

from oslo_utils import uuidutils
import pytest

from cyborg.common import exception
from cyborg.db import arqs
from tests.db.prepared import prepared_only
from tests.db import seed


def _binding(instance=None, host='compute1', rp=None):
    return {'hostname': host,
            'device_rp_uuid': rp or uuidutils.generate_uuid(),
            'instance_uuid': instance or uuidutils.generate_uuid()}


def _states(uuids):
    return [arqs.get(u)['state'] for u in uuids]


# --- create -----------------------------------------------------------------

def test_create_counts_per_group(database):
    dp = seed.profile(groups=[{'resources:PGPU': '2'},
                              {'resources:CUSTOM_A': '1'},
                              {'resources:CUSTOM_B': '1'}])
    made = arqs.create(dp['id'], [2, 0, 3], 'proj')
    assert [a['device_profile_group_id'] for a in made] == [0, 0, 2, 2, 2]
    assert len({a['uuid'] for a in made}) == 5
    for arq in made:
        assert arq['state'] == 'Initial'
        assert arq['project_id'] == 'proj'
        assert arq['device_profile_name'] == dp['name']
        assert arq['instance_uuid'] is None
        assert arq['hostname'] is None
        assert arq['device_rp_uuid'] is None
        assert arq['attach_handle_uuid'] is None
        assert arq['attach_handle_type'] == ''
        assert arq['attach_handle_info'] == {}
    assert arqs.list_() == made


def test_create_nothing(database):
    dp = seed.profile()
    assert arqs.create(dp['id'], [], 'p') == []
    assert arqs.create(dp['id'], [0, 0], 'p') == []
    assert arqs.list_() == []


def test_create_for_missing_profile_is_not_found(database):
    dp = seed.profile()
    with pytest.raises(exception.NotFound) as e:
        arqs.create(dp['id'] + 1000, [1], 'p')
    assert e.value.code == 404
    assert arqs.list_() == []


def test_create_without_project(database):
    (arq,) = seed.arq_requests(1, project_id=None)
    assert arq['project_id'] is None


# --- read -------------------------------------------------------------------

def test_get_and_project_scope(database):
    (arq,) = seed.arq_requests(1, project_id='p1')
    assert arqs.get(arq['uuid']) == arq
    assert arqs.get(arq['uuid'], project_id='p1') == arq
    with pytest.raises(exception.NotFound) as e:
        arqs.get(arq['uuid'], project_id='p2')
    assert str(e.value) == 'ExtArq not found with uuid=%s' % arq['uuid']


def test_list_filters(database):
    dp = seed.profile()
    p1 = arqs.create(dp['id'], [3], 'p1')
    p2 = arqs.create(dp['id'], [2], 'p2')
    instance = uuidutils.generate_uuid()
    arqs.start_bind({p1[0]['uuid']: _binding(instance),
                     p1[1]['uuid']: _binding(instance)})
    uuids = lambda rows: [r['uuid'] for r in rows]  # noqa: E731

    assert uuids(arqs.list_()) == uuids(p1 + p2)
    assert uuids(arqs.list_(project_id='p2')) == uuids(p2)
    assert uuids(arqs.list_(project_id='nobody')) == []
    assert uuids(arqs.list_(instance_uuid=instance)) == uuids(p1[:2])
    assert uuids(arqs.list_(instance_uuid=instance, project_id='p2')) == []
    assert uuids(arqs.list_(states=['BindStarted'])) == uuids(p1[:2])
    assert uuids(arqs.list_(states=['Initial'], project_id='p1')) == [
        p1[2]['uuid']]
    assert uuids(arqs.list_(states=['Bound', 'BindFailed'])) == []
    assert uuids(arqs.list_(states=[])) == []
    bound = arqs.list_(instance_uuid=instance)[0]
    assert bound['hostname'] == 'compute1'
    assert bound['instance_uuid'] == instance


def test_list_pagination(database):
    made = seed.arq_requests(5)
    got = arqs.list_(limit=2, marker=made[0]['uuid'])
    assert [a['uuid'] for a in got] == [a['uuid'] for a in made[1:3]]
    with pytest.raises(exception.Invalid):
        arqs.list_(marker=uuidutils.generate_uuid())


def test_instance_unresolved(database):
    made = seed.arq_requests(2)
    instance = uuidutils.generate_uuid()
    assert not arqs.instance_unresolved(instance)
    arqs.start_bind({a['uuid']: _binding(instance) for a in made})
    assert arqs.instance_unresolved(instance)
    assert not arqs.instance_unresolved(instance, project_id='other')
    handle = seed.attach_handle()
    seed.bind_handle(made[0]['uuid'], handle)
    assert arqs.instance_unresolved(instance)
    with seed.api.writer() as session:
        session.execute(seed.ARQ.update()
                        .where(seed.ARQ.c.uuid == made[1]['uuid'])
                        .values(state='BindFailed'))
    assert not arqs.instance_unresolved(instance)


def test_bound_arq_shows_its_attach_handle(database):
    (arq,) = seed.arq_requests(1)
    handle = seed.attach_handle(attach_info='{"bus": "1b", "device": "00"}')
    arqs.start_bind({arq['uuid']: _binding()})
    seed.bind_handle(arq['uuid'], handle)
    got = arqs.get(arq['uuid'])
    assert got['state'] == 'Bound'
    assert got['attach_handle_uuid'] == handle['uuid']
    assert got['attach_handle_type'] == 'PCI'
    assert got['attach_handle_info'] == {'bus': '1b', 'device': '00'}


# --- start_bind -------------------------------------------------------------

def test_start_bind_moves_all_to_bind_started(database):
    made = seed.arq_requests(2, project_id='p1')
    instance = uuidutils.generate_uuid()
    b0 = _binding(instance, host='h0')
    b1 = dict(_binding(instance, host='h1'), project_id='p9')
    arqs.start_bind({made[0]['uuid']: b0, made[1]['uuid']: b1},
                    project_id='p1')
    got0, got1 = (arqs.get(a['uuid']) for a in made)
    assert got0['state'] == got1['state'] == 'BindStarted'
    assert (got0['hostname'], got0['device_rp_uuid'],
            got0['instance_uuid']) == ('h0', b0['device_rp_uuid'], instance)
    assert got1['hostname'] == 'h1'
    assert got1['project_id'] == 'p9'


def test_start_bind_one_bad_state_rolls_back_all(database):
    made = seed.arq_requests(3)
    arqs.start_bind({made[1]['uuid']: _binding()})
    instance = uuidutils.generate_uuid()
    with pytest.raises(exception.ARQBadState) as e:
        arqs.start_bind({a['uuid']: _binding(instance) for a in made})
    assert e.value.code == 409
    assert made[1]['uuid'] in str(e.value)
    assert 'BindStarted' in str(e.value)
    assert _states([a['uuid'] for a in made]) == [
        'Initial', 'BindStarted', 'Initial']
    assert arqs.list_(instance_uuid=instance) == []


def test_start_bind_one_missing_rolls_back_all(database):
    made = seed.arq_requests(2)
    missing = uuidutils.generate_uuid()
    bindings = {made[0]['uuid']: _binding(), missing: _binding(),
                made[1]['uuid']: _binding()}
    with pytest.raises(exception.NotFound) as e:
        arqs.start_bind(bindings)
    assert missing in str(e.value)
    assert _states([a['uuid'] for a in made]) == ['Initial', 'Initial']


def test_start_bind_other_project_is_not_found(database):
    (arq,) = seed.arq_requests(1, project_id='p1')
    with pytest.raises(exception.NotFound):
        arqs.start_bind({arq['uuid']: _binding()}, project_id='p2')
    assert arqs.get(arq['uuid'])['state'] == 'Initial'


def test_start_bind_already_bind_started(database):
    (arq,) = seed.arq_requests(1)
    arqs.start_bind({arq['uuid']: _binding()})
    with pytest.raises(exception.ARQBadState) as e:
        arqs.start_bind({arq['uuid']: _binding()})
    assert e.value.code == 409
    assert str(e.value) == (
        'Bad state: BindStarted for ARQ: %s. Expected state(s): '
        'Initial, Unbound' % arq['uuid'])


@pytest.mark.parametrize('state', ['Bound', 'BindFailed', 'UnbindFailed',
                                   'Deleting'])
def test_start_bind_refuses_states(database, state):
    (arq,) = seed.arq_requests(1)
    with seed.api.writer() as session:
        session.execute(seed.ARQ.update().values(state=state))
    with pytest.raises(exception.ARQBadState):
        arqs.start_bind({arq['uuid']: _binding()})
    assert arqs.get(arq['uuid'])['state'] == state


def test_start_bind_after_unbind(database):
    (arq,) = seed.arq_requests(1)
    arqs.start_bind({arq['uuid']: _binding()})
    arqs.unbind([arq['uuid']])
    instance = uuidutils.generate_uuid()
    arqs.start_bind({arq['uuid']: _binding(instance)})
    got = arqs.get(arq['uuid'])
    assert (got['state'], got['instance_uuid']) == ('BindStarted', instance)


def test_start_bind_clears_previous_failure(database):
    (arq,) = seed.arq_requests(1)
    with seed.api.writer() as session:
        session.execute(seed.ARQ.update().values(
            state='Unbound', bind_failure='no free handle'))
    arqs.start_bind({arq['uuid']: _binding()})
    assert arqs.get(arq['uuid'])['bind_failure'] is None


def test_start_bind_refuses_a_host_that_does_not_own_the_provider(database):
    here = seed.deployable(device_id=seed.device(hostname='h-a')['id'])
    there = seed.deployable(device_id=seed.device(hostname='h-b')['id'])
    made = seed.arq_requests(3)
    instance = uuidutils.generate_uuid()
    bindings = {
        made[0]['uuid']: _binding(instance, 'h-a', here['rp_uuid']),
        # The provider of a device nobody reported is the conductor's
        # to refuse (BindFailed), as in Cyborg.
        made[1]['uuid']: _binding(instance, 'h-a'),
        made[2]['uuid']: _binding(instance, 'h-a', there['rp_uuid'])}
    with pytest.raises(exception.PatchError) as e:
        arqs.start_bind(bindings)
    assert e.value.code == 400
    assert str(e.value) == (
        "Couldn't apply patch. Reason: hostname h-a does not own "
        "device_rp_uuid %s (ARQ %s): that provider is a device of host h-b"
        % (there['rp_uuid'], made[2]['uuid']))
    assert _states([a['uuid'] for a in made]) == ['Initial'] * 3
    assert arqs.list_(instance_uuid=instance) == []

    del bindings[made[2]['uuid']]
    arqs.start_bind(bindings)
    assert _states([a['uuid'] for a in made]) == [
        'BindStarted', 'BindStarted', 'Initial']


def test_start_bind_instance_already_has_arqs(database):
    first, second = seed.arq_requests(2)
    instance = uuidutils.generate_uuid()
    arqs.start_bind({first['uuid']: _binding(instance)})
    with pytest.raises(exception.PatchError) as e:
        arqs.start_bind({second['uuid']: _binding(instance)})
    assert e.value.code == 400
    assert str(e.value) == (
        "Couldn't apply patch. Reason: Instance %s already has accelerator "
        "requests. Cannot bind additional ARQs." % instance)
    assert arqs.get(second['uuid'])['state'] == 'Initial'


# --- unbind -----------------------------------------------------------------

def test_unbind_frees_attach_handles(database):
    made = seed.arq_requests(2)
    instance = uuidutils.generate_uuid()
    arqs.start_bind({a['uuid']: _binding(instance) for a in made})
    handles = [seed.attach_handle() for _ in made]
    spare = seed.attach_handle(in_use=True)
    for arq, handle in zip(made, handles):
        seed.bind_handle(arq['uuid'], handle)
    assert all(h['in_use'] for h in seed.select(
        seed.AH, seed.AH.c.id.in_([h['id'] for h in handles])))

    arqs.unbind([a['uuid'] for a in made])

    for arq in made:
        got = arqs.get(arq['uuid'])
        assert got['state'] == 'Unbound'
        assert got['instance_uuid'] is None
        assert got['hostname'] is None
        assert got['device_rp_uuid'] is None
        assert got['attach_handle_uuid'] is None
    rows = seed.select(seed.ARQ)
    assert {r['attach_handle_id'] for r in rows} == {None}
    assert {r['deployable_id'] for r in rows} == {None}
    in_use = {h['id']: h['in_use'] for h in seed.select(seed.AH)}
    assert in_use == {handles[0]['id']: False, handles[1]['id']: False,
                      spare['id']: True}
    assert arqs.list_(instance_uuid=instance) == []


def test_unbind_missing_changes_nothing(database):
    (arq,) = seed.arq_requests(1)
    arqs.start_bind({arq['uuid']: _binding()})
    with pytest.raises(exception.NotFound):
        arqs.unbind([arq['uuid'], uuidutils.generate_uuid()])
    assert arqs.get(arq['uuid'])['state'] == 'BindStarted'


def test_unbind_deleting_is_bad_state(database):
    (arq,) = seed.arq_requests(1)
    with seed.api.writer() as session:
        session.execute(seed.ARQ.update().values(state='Deleting'))
    with pytest.raises(exception.ARQBadState):
        arqs.unbind([arq['uuid']])


# --- delete -----------------------------------------------------------------

def test_delete_by_uuids(database):
    made = seed.arq_requests(3)
    arqs.delete_by_uuids([made[0]['uuid'], made[2]['uuid']])
    assert [a['uuid'] for a in arqs.list_()] == [made[1]['uuid']]


def test_delete_by_uuids_missing_one_deletes_none(database):
    made = seed.arq_requests(2)
    with pytest.raises(exception.NotFound):
        arqs.delete_by_uuids([made[0]['uuid'], uuidutils.generate_uuid()])
    assert len(arqs.list_()) == 2


def test_delete_by_uuids_other_project_deletes_none(database):
    mine = seed.arq_requests(1, project_id='p1')
    theirs = seed.arq_requests(1, project_id='p2')
    with pytest.raises(exception.NotFound):
        arqs.delete_by_uuids([mine[0]['uuid'], theirs[0]['uuid']],
                             project_id='p1')
    assert len(arqs.list_()) == 2


def test_delete_by_uuids_refuses_bound_unless_allowed(delete_returning):
    made = seed.arq_requests(2)
    handle = seed.attach_handle()
    arqs.start_bind({made[1]['uuid']: _binding()})
    seed.bind_handle(made[1]['uuid'], handle)
    with pytest.raises(exception.Forbidden) as e:
        arqs.delete_by_uuids([a['uuid'] for a in made])
    assert e.value.code == 403
    assert len(arqs.list_()) == 2

    arqs.delete_by_uuids([a['uuid'] for a in made], may_delete_bound=True)
    assert arqs.list_() == []
    assert seed.select(seed.AH)[0]['in_use'] is False


def test_delete_by_instance(delete_returning):
    made = seed.arq_requests(3)
    instance = uuidutils.generate_uuid()
    arqs.start_bind({a['uuid']: _binding(instance) for a in made[:2]})
    handle = seed.attach_handle()
    seed.bind_handle(made[0]['uuid'], handle)

    arqs.delete_by_instance(instance)
    assert [a['uuid'] for a in arqs.list_()] == [made[2]['uuid']]
    assert seed.select(seed.AH)[0]['in_use'] is False
    # Idempotent: a second delete, or one for an unknown instance, is fine.
    arqs.delete_by_instance(instance)
    arqs.delete_by_instance(uuidutils.generate_uuid())
    assert len(arqs.list_()) == 1


def test_delete_by_instance_respects_project(delete_returning):
    (arq,) = seed.arq_requests(1, project_id='p1')
    instance = uuidutils.generate_uuid()
    arqs.start_bind({arq['uuid']: _binding(instance)})
    arqs.delete_by_instance(instance, project_id='p2')
    assert len(arqs.list_()) == 1
    arqs.delete_by_instance(instance, project_id='p1')
    assert arqs.list_() == []


# --- the fast path -----------------------------------------------------------

def test_api_writes_run_prepared_statements_only(delete_returning):
    """What the API's writes do to ARQs stays on the driver's connection
    (api.Session's fast path), each way a delete goes, with a profile
    known to this process or not.
    """
    dp = seed.profile('fast')
    arqs._PROFILES.pop('fast', None)
    device = seed.device(hostname='compute1')
    dep = seed.deployable(device['id'])
    with prepared_only():
        read_first = arqs.create_from_profile('fast', lambda dp: [2], 'p1')
        known = arqs.create_from_profile('fast', lambda dp: [1], 'p1')
        instance = uuidutils.generate_uuid()
        arqs.start_bind({a['uuid']: _binding(instance, 'compute1',
                                             dep['rp_uuid'])
                         for a in read_first})
        arqs.unbind([read_first[0]['uuid']])
        arqs.delete_by_instance(instance)
        arqs.delete_by_uuids([read_first[0]['uuid'], known[0]['uuid']])
    assert arqs.list_() == []
    assert [r['uuid'] for r in seed.select(seed.DP)] == [dp['uuid']]
