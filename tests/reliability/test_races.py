# SPDX-License-Identifier: Apache-2.0
"""Races through the real API and the conductor's bind, on every DB
backend: many threads released together by a barrier, each request on its
own HTTP connection, API worker thread and DB transaction (issue #9, part
1; contract §10's check-then-act bind race)."""

import uuid

from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import api as db_api
from cyborg.db import bindings
from cyborg.db import host_inventory
from cyborg.db import models
from cyborg import drivers
from cyborg.drivers import fake
from tests import racing
from tests.reliability import figures

ARQ = models.ExtendedAcceleratorRequest.__table__
AH = models.AttachHandle.__table__
DP = models.DeviceProfile.__table__

SAME_ARQ_BINDERS = 50
SINGLE_HANDLE_BINDERS = 20
PROFILE_ROUNDS = 10
CREATORS_PER_ROUND = 4
REPORT_ROUNDS = 8
CLAIM_ROUNDS = 5
CLAIMERS = 4


def _count(table, *where):
    with db_api.reader() as session:
        return session.execute(sa.select(sa.func.count()).select_from(
            table).where(*where)).scalar()


def test_fifty_binds_of_one_arq_one_wins(stack, database):
    """50 PATCHes of one ARQ to 50 instances: one 202, 49 409s, and the
    ARQ ends Bound to the winner's instance with exactly one event.
    """
    stack.profile('gpu', [{'resources:PGPU': '1'}])
    [arq] = stack.create_arqs('gpu')
    rp = stack.rp('0000:1b:00.0')
    instances = [str(uuid.uuid4()) for _ in range(SAME_ARQ_BINDERS)]
    outcomes = racing.race([
        (lambda i=i: stack.bind(arq['uuid'], i, rp)) for i in instances])
    assert all(kind == 'ok' for kind, _ in outcomes), outcomes
    codes = [r.status_code for _, r in outcomes]
    figures.record('race: binds of one ARQ', backend=database.backend,
                   N=len(codes), successes=codes.count(202),
                   conflicts=codes.count(409))
    assert codes.count(202) == 1, codes
    assert codes.count(409) == SAME_ARQ_BINDERS - 1, codes
    for _, r in outcomes:
        if r.status_code == 409:
            assert 'error_message' in r.json()
    winner = instances[codes.index(202)]
    final = stack.wait_resolved([arq['uuid']])[arq['uuid']]
    assert (final['state'], final['instance_uuid']) == ('Bound', winner)
    events = stack.wait_events([arq['uuid']])[arq['uuid']]
    assert [(e['server_uuid'], e['status']) for e in events] == [
        (winner, 'completed')]
    assert _count(AH, AH.c.in_use == sa.true()) == 1


def test_binds_to_a_single_handle_device_one_bound(stack, database):
    """20 ARQs of 20 instances bound at once to one GPU (one attach
    handle): every PATCH is accepted, one ARQ ends Bound, the others
    BindFailed with the reason, each with its event; one handle in use.
    """
    stack.profile('gpu', [{'resources:PGPU': '1'}])
    arqs = [stack.create_arqs('gpu')[0]['uuid']
            for _ in range(SINGLE_HANDLE_BINDERS)]
    rp = stack.rp('0000:1b:00.0')
    instances = {a: str(uuid.uuid4()) for a in arqs}
    outcomes = racing.race([
        (lambda a=a: stack.bind(a, instances[a], rp)) for a in arqs])
    assert [r.status_code for _, r in outcomes] == [202] * len(arqs), [
        getattr(r, 'text', r) for _, r in outcomes]
    final = stack.wait_resolved(arqs)
    states = [a['state'] for a in final.values()]
    events = stack.wait_events(arqs)
    figures.record('race: binds to a single-handle device',
                   backend=database.backend, N=len(arqs),
                   successes=states.count('Bound'),
                   conflicts=states.count('BindFailed'),
                   events=sum(len(events.get(a, [])) for a in arqs))
    assert states.count('Bound') == 1, states
    assert states.count('BindFailed') == len(arqs) - 1, states
    with db_api.reader() as session:
        reasons = session.execute(sa.select(ARQ.c.bind_failure).where(
            ARQ.c.state == 'BindFailed')).scalars().all()
    assert len(reasons) == len(arqs) - 1
    assert all(r.startswith('No free attach handle for this request on '
                            'deployable 0000:1b:00.0') for r in reasons)
    for a in arqs:
        assert [e['status'] for e in events[a]] == [
            'completed' if final[a]['state'] == 'Bound' else 'failed']
        assert events[a][0]['server_uuid'] == instances[a]
    assert _count(AH, AH.c.in_use == sa.true()) == 1


def test_binds_to_a_four_handle_device_fill_it(stack, database):
    """20 ARQs bound at once to the FPGA's four functions: exactly four
    Bound, each to its own handle, none failed while one was free
    (regression: under MariaDB's REPEATABLE READ a taker kept seeing a
    handle another binder had taken as free and gave up with handles to
    spare).
    """
    stack.profile('fpga', [{'resources:FPGA': '1'}])
    arqs = [stack.create_arqs('fpga')[0]['uuid']
            for _ in range(SINGLE_HANDLE_BINDERS)]
    rp = stack.rp('0000:0c:00.0')
    outcomes = racing.race([
        (lambda a=a: stack.bind(a, str(uuid.uuid4()), rp)) for a in arqs])
    assert [r.status_code for _, r in outcomes] == [202] * len(arqs)
    final = stack.wait_resolved(arqs)
    states = [a['state'] for a in final.values()]
    figures.record('race: binds to a four-handle device',
                   backend=database.backend, N=len(arqs),
                   successes=states.count('Bound'),
                   conflicts=states.count('BindFailed'))
    assert states.count('Bound') == 4, states
    assert len({a['attach_handle_uuid'] for a in final.values()
                if a['state'] == 'Bound'}) == 4
    with db_api.reader() as session:
        reasons = session.execute(sa.select(ARQ.c.bind_failure).where(
            ARQ.c.state == 'BindFailed')).scalars().all()
    assert all(r.endswith('(4 in use)') for r in reasons), reasons
    assert _count(AH, AH.c.in_use == sa.true()) == 4


def test_two_binders_of_one_arq_take_one_handle(stack, database,
                                                monkeypatch):
    """Binders of one BindStarted ARQ at once (a conductor's start-up
    re-drive and the queued bind message, a sweep and a slow bind): one
    handle ends up claimed, none leaked (regression: each took a handle
    and the last ARQ update won, leaving the other handle in use).
    """
    monkeypatch.setattr(conductor_rpcapi.ConductorAPI, 'bind_arqs',
                        lambda self, context, uuids: None)
    stack.profile('fpga', [{'resources:FPGA': '1'}])
    rp = stack.rp('0000:0c:00.0')
    claimed = gone = leaked = 0
    for _ in range(CLAIM_ROUNDS):
        [arq] = stack.create_arqs('fpga')
        assert stack.bind(arq['uuid'], str(uuid.uuid4()),
                          rp).status_code == 202
        outcomes = racing.race([
            (lambda: bindings.claim_handle(arq['uuid'],
                                           drivers.handle_picker))]
            * CLAIMERS)
        handles = {v['handle']['uuid'] for kind, v in outcomes
                   if kind == 'ok'}
        errors = [v for kind, v in outcomes if kind == 'error']
        assert all(isinstance(e, bindings.Gone) for e in errors), errors
        assert len(handles) == 1, outcomes
        claimed += CLAIMERS - len(errors)
        gone += len(errors)
        in_use = _count(AH, AH.c.in_use == sa.true())
        bindings.finish(arq['uuid'], 'test: free the handle again')
        leaked += _count(AH, AH.c.in_use == sa.true())
        assert in_use == 1
    figures.record('race: binders of one BindStarted ARQ',
                   backend=database.backend, N=CLAIM_ROUNDS * CLAIMERS,
                   successes=claimed, conflicts=gone, leaked_handles=leaked)
    assert leaked == 0


def test_profile_delete_races_arq_create(stack, database):
    """DELETE of a profile while ARQs are created from it: every create
    either made ARQs that point at the surviving profile (and the delete
    got 409) or answered 404 with nothing written.
    """
    created = refused = deleted = in_use = 0
    for i in range(PROFILE_ROUNDS):
        name = 'race-%d' % i
        stack.profile(name, [{'resources:FPGA': '1'}])
        calls = [lambda: stack.call('DELETE', '/device_profiles/%s' % name,
                                    admin=True)]
        calls += [(lambda: stack.call(
            'POST', '/accelerator_requests', {'device_profile_name': name}))
            for _ in range(CREATORS_PER_ROUND)]
        outcomes = racing.race(calls)
        assert all(kind == 'ok' for kind, _ in outcomes), outcomes
        delete, creates = outcomes[0][1], [r for _, r in outcomes[1:]]
        assert delete.status_code in (204, 409), delete.text
        assert {r.status_code for r in creates} <= {201, 404}, [
            r.text for r in creates]
        made = [a['uuid'] for r in creates if r.status_code == 201
                for a in r.json()['arqs']]
        listed = stack.call('GET', '/device_profiles?name=%s' % name,
                            admin=True).json()
        if delete.status_code == 204:
            deleted += 1
            assert made == [] and listed['device_profiles'] == []
        else:
            in_use += 1
            assert made and len(listed['device_profiles']) == 1
            for a in made:
                assert stack.arq(a)['device_profile_name'] == name
        created += len(made)
        refused += sum(r.status_code == 404 for r in creates)
    with db_api.reader() as session:
        orphans = session.execute(sa.select(sa.func.count()).select_from(
            ARQ.outerjoin(DP, ARQ.c.device_profile_id == DP.c.id)).where(
            DP.c.id.is_(None))).scalar()
    figures.record('race: profile delete vs ARQ create',
                   backend=database.backend,
                   N=PROFILE_ROUNDS * (1 + CREATORS_PER_ROUND),
                   successes=created, conflicts=refused + in_use,
                   deletes=deleted, orphans=orphans)
    assert orphans == 0
    assert _count(ARQ) == created


def _summary(hostname):
    """What the DB holds for a host, keyed by stable names (no ids)."""
    out = {}
    for entry in host_inventory.host_devices(hostname).values():
        out[entry['device']['model']] = {
            name: sorted(h[1] for h in dep['handles'])
            for name, dep in entry['deployables'].items()}
    return out


def _devices(spec):
    return [fake.device_from_spec(e) for e in spec]


def test_report_diffs_from_two_conductors_stay_consistent(database):
    """Two conductors apply different reports of one host at once, round
    after round: the DB always ends exactly as one of the two reports said
    (no duplicated or half-applied device), and the next report applies.
    """
    one = [{'type': 'GPU', 'vendor_id': '10de', 'product_id': '2335',
            'model': 'gpu-a', 'pci_address': '0000:1b:00.0'},
           {'type': 'FPGA', 'vendor_id': 'abcd', 'product_id': 'abcd',
            'model': 'fpga', 'pci_address': '0000:0c:00.0', 'functions': 4}]
    two = [{'type': 'GPU', 'vendor_id': '10de', 'product_id': '2335',
            'model': 'gpu-b', 'pci_address': '0000:43:00.0'},
           {'type': 'FPGA', 'vendor_id': 'abcd', 'product_id': 'abcd',
            'model': 'fpga', 'pci_address': '0000:0c:00.0', 'functions': 2}]
    conductors = [conductor_manager.ConductorManager(),
                  conductor_manager.ConductorManager()]
    host = 'report-%s' % uuidutils.generate_uuid()[:8]
    conductors[0].report_data(None, host, [d.to_dict()
                                           for d in _devices(one)])
    expected = {'one': _summary(host)}
    conductors[1].report_data(None, host, [d.to_dict()
                                           for d in _devices(two)])
    expected['two'] = _summary(host)
    assert expected['one'] != expected['two']
    ended = {'one': 0, 'two': 0}
    errors = 0
    for i in range(REPORT_ROUNDS):
        reports = (one, two) if i % 2 else (two, one)
        outcomes = racing.race([
            (lambda c=c, r=r: c.report_data(
                None, host, [d.to_dict() for d in _devices(r)]))
            for c, r in zip(conductors, reports)])
        errors += sum(kind == 'error' for kind, _ in outcomes)
        assert [kind for kind, _ in outcomes] == ['ok', 'ok'], outcomes
        now = _summary(host)
        assert now in expected.values(), now
        ended['one' if now == expected['one'] else 'two'] += 1
        with db_api.reader() as session:
            devices = session.execute(sa.select(sa.func.count()).where(
                models.Device.__table__.c.hostname == host)).scalar()
        assert devices == 2
    conductors[0].report_data(None, host, [d.to_dict()
                                           for d in _devices(one)])
    assert _summary(host) == expected['one']
    figures.record('race: report diffs of two conductors',
                   backend=database.backend, N=REPORT_ROUNDS * 2,
                   successes=REPORT_ROUNDS * 2 - errors, conflicts=errors,
                   ended_as_one=ended['one'], ended_as_two=ended['two'])
