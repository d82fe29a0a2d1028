# SPDX-License-Identifier: Apache-2.0
"""Conductors' heartbeats and who drives which bind.

Every conductor writes a heartbeat row every few seconds. A bind is held
by the conductor that claimed it (the ARQ's `bind_owner`); once that
conductor's heartbeat is older than the timeout (it died, or stopped and
removed its row), a live one takes the bind over with a conditional
UPDATE (one per former holder, per api.IN_MAX of its ARQs) in the
transaction that found them: only rows still held by that conductor
move, so two conductors taking over at once never both get the same
ARQ.

Every conductor looks for binds to take over at each heartbeat, and
almost always finds none: that look is one query on its own (api.read()),
with no write transaction, so on SQLite it takes no write lock from the
API's writers. Only when it finds some does a writer look again and move
them, as above.

Every statement is Prepared (api.Session's fast path: the driver's
connection, past SQLAlchemy's execution layer).

Times are the conductors' own clocks (UTC), as every other timestamp in
the schema: conductor hosts keep them in step with NTP.
"""

import datetime
import functools

import sqlalchemy as sa

from cyborg.db import api
from cyborg.db import bindings
from cyborg.db import models

ARQ = models.ExtendedAcceleratorRequest.__table__
CONDUCTOR = models.Conductor.__table__

_BEAT = api.Prepared(CONDUCTOR.update().where(
    CONDUCTOR.c.name == sa.bindparam('conductor')).values(
    heartbeat_at=sa.bindparam('now')))
# Bound as name, heartbeat_at, created_at.
_JOIN = api.Prepared(CONDUCTOR.insert())
_FORGET = api.Prepared(CONDUCTOR.delete().where(
    CONDUCTOR.c.name == sa.bindparam('conductor')))
_LIVE_NAMES = sa.select(CONDUCTOR.c.name).where(
    CONDUCTOR.c.heartbeat_at >= sa.bindparam('cutoff'))
_LIVE = api.Prepared(_LIVE_NAMES)
# BindStarted ARQs whose holder is not alive: {uuid, holder}.
_ORPHANED = api.Prepared(sa.select(ARQ.c.uuid, ARQ.c.bind_owner).where(
    ARQ.c.state == 'BindStarted', ARQ.c.bind_owner.is_not(None),
    ARQ.c.bind_owner != sa.bindparam('conductor'),
    ARQ.c.bind_owner.not_in(_LIVE_NAMES.scalar_subquery())))
_HELD_BY = api.Prepared(sa.select(ARQ.c.uuid).where(
    ARQ.c.state == 'BindStarted',
    ARQ.c.bind_owner == sa.bindparam('conductor')).order_by(ARQ.c.id))


@functools.lru_cache(maxsize=64)
def _taking_over(count):
    """take_over()'s conditional UPDATE of the ARQs bound as `uuid_<i>`:
    those still BindStarted and held by `holder` become `conductor`'s.
    """
    return api.Prepared(ARQ.update().where(
        api.in_(ARQ.c.uuid, 'uuid', count),
        ARQ.c.state == 'BindStarted',
        ARQ.c.bind_owner == sa.bindparam('holder')).values(
        bind_owner=sa.bindparam('conductor')))


def _cutoff(seconds):
    return models.utcnow() - datetime.timedelta(seconds=seconds)


@bindings.retry
def heartbeat(conductor):
    """Record that `conductor` is alive now."""
    now = models.utcnow()
    # Each statement a lone writer: one round trip on MariaDB and
    # PostgreSQL. Only this conductor writes its row.
    with api.writer(lone=True) as session:
        beaten = session.execute(_BEAT, {'conductor': conductor,
                                         'now': now}).rowcount
    if not beaten:
        with api.writer(lone=True) as session:
            session.execute(_JOIN, {'name': conductor, 'heartbeat_at': now,
                                    'created_at': now})


@bindings.retry
def forget(conductor):
    """A conductor stopping cleanly: its row goes, so the binds it still
    holds are taken over on the peers' next heartbeat, not after the
    timeout.
    """
    with api.writer(lone=True) as session:
        session.execute(_FORGET, {'conductor': conductor})


@bindings.retry
def take_over(conductor, timeout):
    """Hand `conductor` the binds held by conductors that have not
    heartbeat for `timeout` seconds. Returns {former holder: [ARQ uuid]}
    of what it got (a peer taking over at once gets the rest).

    Nothing orphaned (the common case) is one lone read, and no write
    transaction. Otherwise a writer reads them again (a holder may have
    heartbeat meanwhile, or a peer taken them over) and moves them with
    the conditional UPDATE.
    """
    params = {'conductor': conductor, 'cutoff': _cutoff(timeout)}
    if api.read(_ORPHANED, params).first() is None:
        return {}
    taken = {}
    with api.writer() as session:
        by_holder = {}
        for uuid, holder in session.execute(_ORPHANED, params):
            by_holder.setdefault(holder, []).append(uuid)
        for holder, uuids in by_holder.items():
            moved = 0
            for count, params in api.in_chunks('uuid', uuids):
                moved += session.execute(_taking_over(count), dict(
                    params, holder=holder, conductor=conductor)).rowcount
            if moved == len(uuids):
                taken[holder] = uuids
            elif moved:
                # A peer got some of them first: which are ours now.
                mine = set(held_by(conductor, session))
                taken[holder] = [u for u in uuids if u in mine]
    return taken


def held_by(conductor, session=None):
    """The BindStarted ARQs `conductor` holds, oldest first: in `session`,
    or one lone read.
    """
    params = {'conductor': conductor}
    rows = (session.execute(_HELD_BY, params) if session is not None
            else api.read(_HELD_BY, params))
    return [r[0] for r in rows]


def live(timeout):
    """Names of the conductors that heartbeat within `timeout` seconds."""
    return sorted(r[0] for r in api.read(_LIVE,
                                         {'cutoff': _cutoff(timeout)}))
