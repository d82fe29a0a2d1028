# SPDX-License-Identifier: Apache-2.0
"""Real races on every backend: two threads, released together by a
barrier, each on its own connection and transaction.
"""

import subprocess
import sys
import time

from oslo_utils import uuidutils
import pytest
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api
from cyborg.db import arqs
from cyborg.db import device_profiles
from tests.db import seed
from tests import dbs
from tests import racing

ROUNDS = 10


def _binding(instance):
    return {'hostname': 'compute', 'device_rp_uuid': uuidutils.generate_uuid(),
            'instance_uuid': instance}


def _split(outcomes):
    won = [i for i, (kind, _) in enumerate(outcomes) if kind == 'ok']
    lost = [value for kind, value in outcomes if kind == 'error']
    return won, lost


def test_start_bind_race_has_one_winner(database):
    """Two binders of one ARQ: one wins, the other gets ARQBadState (409)."""
    dp = seed.profile()
    for _ in range(ROUNDS):
        (arq,) = arqs.create(dp['id'], [1], 'p')
        instances = [uuidutils.generate_uuid() for _ in range(2)]
        outcomes = racing.race([
            (lambda inst=inst: arqs.start_bind({arq['uuid']: _binding(inst)}))
            for inst in instances])
        won, lost = _split(outcomes)
        assert len(won) == 1, outcomes
        assert len(lost) == 1
        assert isinstance(lost[0], exception.ARQBadState), repr(lost[0])
        assert lost[0].code == 409
        got = arqs.get(arq['uuid'])
        assert got['state'] == 'BindStarted'
        assert got['instance_uuid'] == instances[won[0]]


def test_start_bind_race_same_instance(database):
    """Two identical PATCHes (a retried request): one wins, the other is a
    client error - ARQBadState, or PatchError where it already sees the
    winner's instance - never a second bind.
    """
    dp = seed.profile()
    for _ in range(ROUNDS):
        made = arqs.create(dp['id'], [2], 'p')
        instance = uuidutils.generate_uuid()
        bindings = {a['uuid']: _binding(instance) for a in made}
        outcomes = racing.race([lambda: arqs.start_bind(bindings),
                                lambda: arqs.start_bind(bindings)])
        won, lost = _split(outcomes)
        assert len(won) == 1, outcomes
        assert isinstance(lost[0], (exception.ARQBadState,
                                    exception.PatchError)), repr(lost[0])
        assert lost[0].code in (400, 409)
        assert {arqs.get(a['uuid'])['state'] for a in made} == {
            'BindStarted'}


def test_start_bind_race_overlapping_sets_all_or_nothing(database):
    """PATCH {a, b} races PATCH {b, c}: the loser changes nothing at all."""
    dp = seed.profile()
    for _ in range(ROUNDS):
        a, b, c = arqs.create(dp['id'], [3], 'p')
        first, second = (uuidutils.generate_uuid() for _ in range(2))
        outcomes = racing.race([
            lambda: arqs.start_bind({a['uuid']: _binding(first),
                                     b['uuid']: _binding(first)}),
            lambda: arqs.start_bind({c['uuid']: _binding(second),
                                     b['uuid']: _binding(second)})])
        won, lost = _split(outcomes)
        assert len(won) == 1, outcomes
        assert isinstance(lost[0], exception.ARQBadState), repr(lost[0])
        states = {x['uuid']: (x['state'], x['instance_uuid'])
                  for x in (arqs.get(y['uuid']) for y in (a, b, c))}
        if won == [0]:
            assert states == {a['uuid']: ('BindStarted', first),
                              b['uuid']: ('BindStarted', first),
                              c['uuid']: ('Initial', None)}
        else:
            assert states == {a['uuid']: ('Initial', None),
                              b['uuid']: ('BindStarted', second),
                              c['uuid']: ('BindStarted', second)}


def _orphans():
    with api.reader() as session:
        return session.execute(
            sa.select(sa.func.count()).select_from(
                seed.ARQ.outerjoin(
                    seed.DP, seed.ARQ.c.device_profile_id == seed.DP.c.id))
            .where(seed.DP.c.id.is_(None))).scalar()


def test_delete_profile_races_arq_create(database):
    """Deleting a profile while ARQs are created from it: exactly one side
    wins, and no ARQ ever points at a profile that is gone.
    """
    wins = {'delete': 0, 'create': 0}
    for i in range(ROUNDS):
        name = 'race-%d' % i
        seed.profile(name)
        # The API reads the profile, then inserts: the delete lands between.
        dp = device_profiles.get_by_name(name)
        outcomes = racing.race([
            lambda: device_profiles.delete_by_names([name]),
            lambda: arqs.create(dp['id'], [2], 'p')])
        (deleted, deleted_value), (created, created_value) = outcomes
        if deleted == 'ok':
            assert created == 'error', outcomes
            assert isinstance(created_value, exception.NotFound), repr(
                created_value)
            assert device_profiles.list_(names=[name]) == []
            wins['delete'] += 1
        else:
            assert isinstance(deleted_value, exception.DeviceProfileInUse), (
                repr(deleted_value))
            assert created == 'ok', outcomes
            assert len(created_value) == 2
            assert device_profiles.get_by_name(name)['id'] == dp['id']
            wins['create'] += 1
        assert _orphans() == 0
    assert sum(wins.values()) == ROUNDS


@pytest.mark.parametrize('rounds', [ROUNDS])
def test_unbind_races_delete(database, rounds):
    """Unbind and delete of one bound ARQ: the handle ends up free and the
    ARQ either gone or Unbound, whichever order they ran in.
    """
    dp = seed.profile()
    for _ in range(rounds):
        (arq,) = arqs.create(dp['id'], [1], 'p')
        handle = seed.attach_handle()
        arqs.start_bind({arq['uuid']: _binding(uuidutils.generate_uuid())})
        seed.bind_handle(arq['uuid'], handle)
        outcomes = racing.race([
            lambda: arqs.unbind([arq['uuid']]),
            lambda: arqs.delete_by_uuids([arq['uuid']],
                                         may_delete_bound=True)])
        unbound, deleted = outcomes
        assert deleted[0] == 'ok', outcomes
        assert unbound[0] == 'ok' or isinstance(
            unbound[1], exception.NotFound), outcomes
        assert arqs.list_() == []
        assert seed.select(seed.AH, seed.AH.c.id == handle['id'])[0][
            'in_use'] is False


def test_reader_inside_writer_does_not_block(database):
    """A read on its own transaction while this thread's writer is open
    (SQLite writers hold the write lock from BEGIN; readers must not
    queue behind it).
    """
    dp = seed.profile('outer')
    with api.writer() as session:
        session.execute(seed.DP.update().where(seed.DP.c.id == dp['id'])
                        .values(description='changed'))
        assert device_profiles.get_by_name('outer')['description'] is None
    assert device_profiles.get_by_name('outer')['description'] == 'changed'


def test_writers_queue_instead_of_failing(database):
    """Many threads each reading then writing at once: all succeed."""
    dp = seed.profile()
    outcomes = racing.race([
        (lambda: arqs.create(dp['id'], [1], 'p')) for _ in range(8)])
    assert [kind for kind, _ in outcomes] == ['ok'] * 8, outcomes
    assert len(arqs.list_()) == 8


def _hold_write_lock(dp, seconds):
    with api.writer() as session:
        session.execute(seed.DP.update().where(seed.DP.c.id == dp['id'])
                        .values(description='x'))
        time.sleep(seconds)


def test_sqlite_writers_of_one_process_take_turns(sqlite_database):
    """Writers of one process queue on the engine's lock and never meet a
    busy database: writers that overlap for certain all succeed.
    """
    dp = seed.profile()

    def slow_create():
        _hold_write_lock(dp, 0.02)
        return arqs.create(dp['id'], [1], 'p')

    outcomes = dbs.without_sqlite_busy_wait(
        lambda: racing.race([slow_create] * 6))
    assert [kind for kind, _ in outcomes] == ['ok'] * 6, outcomes
    assert len(arqs.list_()) == 6


_HOLDER = """
import sys, time
import sqlalchemy as sa
from cyborg.db import api, models
api.configure(sys.argv[1])
DP = models.DeviceProfile.__table__
with api.writer() as session:
    session.execute(DP.update().values(description='x'))
    print('writing', flush=True)
    time.sleep(0.3)
"""


def test_sqlite_writers_of_two_processes_take_turns(sqlite_database):
    """A writer in another process (a gunicorn worker, the conductor)
    holds the database: ours waits on the lock file and then succeeds.
    """
    dp = seed.profile()
    holder = subprocess.Popen(
        [sys.executable, '-c', _HOLDER, str(api.get_engine().url)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == 'writing\n'
        created = dbs.without_sqlite_busy_wait(
            lambda: arqs.create(dp['id'], [1], 'p'))
    finally:
        holder.wait(30)
    assert holder.returncode == 0
    assert len(created) == 1
    assert device_profiles.get_by_name(dp['name'])['description'] == 'x'
