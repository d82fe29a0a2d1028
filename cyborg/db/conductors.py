# SPDX-License-Identifier: Apache-2.0
"""Conductors' heartbeats and who drives which bind.

Every conductor writes a heartbeat row every few seconds. A bind is held
by the conductor that claimed it (the ARQ's `bind_owner`); once that
conductor's heartbeat is older than the timeout (it died, or stopped and
removed its row), a live one takes the bind over with one conditional
UPDATE: only rows still held by a conductor that is not alive move, so
two conductors taking over at once never both get the same ARQ.

Times are the conductors' own clocks (UTC), as every other timestamp in
the schema: conductor hosts keep them in step with NTP.
"""

import datetime

import sqlalchemy as sa

from cyborg.db import api
from cyborg.db import bindings
from cyborg.db import models

ARQ = models.ExtendedAcceleratorRequest.__table__
CONDUCTOR = models.Conductor.__table__

_BEAT = CONDUCTOR.update().where(
    CONDUCTOR.c.name == sa.bindparam('conductor')).values(
    heartbeat_at=sa.bindparam('now'))
_LIVE = sa.select(CONDUCTOR.c.name).where(
    CONDUCTOR.c.heartbeat_at >= sa.bindparam('cutoff'))
# BindStarted ARQs whose holder is not alive: {uuid, holder}.
_ORPHANED = sa.select(ARQ.c.uuid, ARQ.c.bind_owner).where(
    ARQ.c.state == 'BindStarted', ARQ.c.bind_owner.is_not(None),
    ARQ.c.bind_owner != sa.bindparam('conductor'),
    ARQ.c.bind_owner.not_in(_LIVE.scalar_subquery()))
_TAKE_OVER = ARQ.update().where(
    ARQ.c.uuid.in_(sa.bindparam('uuids', expanding=True)),
    ARQ.c.state == 'BindStarted',
    ARQ.c.bind_owner == sa.bindparam('holder')).values(
    bind_owner=sa.bindparam('conductor'))
_HELD_BY = sa.select(ARQ.c.uuid).where(
    ARQ.c.state == 'BindStarted',
    ARQ.c.bind_owner == sa.bindparam('conductor')).order_by(ARQ.c.id)


def _cutoff(seconds):
    return models.utcnow() - datetime.timedelta(seconds=seconds)


@bindings.retry
def heartbeat(conductor):
    """Record that `conductor` is alive now."""
    now = models.utcnow()
    with api.writer() as session:
        if session.execute(_BEAT, {'conductor': conductor,
                                   'now': now}).rowcount == 0:
            session.execute(CONDUCTOR.insert().values(
                name=conductor, heartbeat_at=now, created_at=now))


@bindings.retry
def forget(conductor):
    """A conductor stopping cleanly: its row goes, so the binds it still
    holds are taken over on the peers' next heartbeat, not after the
    timeout.
    """
    with api.writer() as session:
        session.execute(CONDUCTOR.delete().where(
            CONDUCTOR.c.name == conductor))


@bindings.retry
def take_over(conductor, timeout):
    """Hand `conductor` the binds held by conductors that have not
    heartbeat for `timeout` seconds. Returns {former holder: [ARQ uuid]}
    of what it got (a peer taking over at once gets the rest).
    """
    taken = {}
    with api.writer() as session:
        rows = session.execute(_ORPHANED, {
            'conductor': conductor, 'cutoff': _cutoff(timeout)}).all()
        by_holder = {}
        for uuid, holder in rows:
            by_holder.setdefault(holder, []).append(uuid)
        for holder, uuids in by_holder.items():
            moved = session.execute(_TAKE_OVER, {
                'uuids': uuids, 'holder': holder, 'conductor': conductor})
            if moved.rowcount == len(uuids):
                taken[holder] = uuids
            elif moved.rowcount:
                # A peer got some of them first: which are ours now.
                mine = set(held_by(conductor, session))
                taken[holder] = [u for u in uuids if u in mine]
    return taken


def held_by(conductor, session=None):
    """The BindStarted ARQs `conductor` holds, oldest first."""
    if session is not None:
        return [r[0] for r in session.execute(_HELD_BY,
                                              {'conductor': conductor})]
    with api.reader() as session:
        return held_by(conductor, session)


def live(timeout):
    """Names of the conductors that heartbeat within `timeout` seconds."""
    with api.reader() as session:
        return sorted(r[0] for r in session.execute(
            _LIVE, {'cutoff': _cutoff(timeout)}))
