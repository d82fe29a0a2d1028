# SPDX-License-Identifier: Apache-2.0
"""Server side of the conductor's RPC API."""

from oslo_db import exception as db_exc
from oslo_log import log
import oslo_messaging as messaging

from cyborg.conductor import outage
from cyborg.db import api as db_api
from cyborg.db import bindings
from cyborg.db import host_inventory
from cyborg.objects import device as records

LOG = log.getLogger(__name__)


def _raced_or_deadlocked(exc):
    # Two conductors diffing one host at once: the loser re-reads and
    # finds the rows the winner wrote. Or a deadlock's victim (MariaDB,
    # PostgreSQL), rolled back whole; not a lock wait that timed out.
    return (isinstance(exc, db_exc.DBDuplicateEntry)
            or db_api.deadlocked(exc))


# Six runs, random waits up to 20, 40, ... 320 ms between them (as the
# API's writes retry a deadlock), then the error goes on to the outage
# guard. oslo.db's wrap_db_retry, used before, waited 1 to 10 s between
# runs, ran a lock wait that had timed out (50 s on MariaDB's defaults)
# again, and logged a traceback when it gave up.
_report_retry = db_api.retrying(_raced_or_deadlocked, attempts=6,
                                first_wait=0.02, jitter=True)


class DatabaseUnavailable(Exception):
    """Answered to an agent whose report came while the database was
    unreachable or contended (it retries on its next pass); logged by the
    conductor's outage guard in one line, not as a traceback per message.
    """


def _db_outage_answered(fn):
    def wrapper(self, context, *args, **kwargs):
        try:
            result = fn(self, context, *args, **kwargs)
        except Exception as e:
            if outage.DATABASE.failed(e, 'handling %s' % fn.__name__):
                raise DatabaseUnavailable(
                    'The database is %s; retry later' % outage.kind(e))
            raise
        outage.DATABASE.ok()
        return result
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


class ConductorManager:
    target = messaging.Target(version='1.3')

    def __init__(self, binder=None):
        self.binder = binder

    def bind_arqs(self, context, arq_uuids):
        self.binder.bind(context, arq_uuids, wait=False)

    def release_handles(self, context, handles):
        """Handles an unbind or delete freed: their agents undo what
        prepare() did.
        """
        self.binder.release(context, handles)

    @messaging.expected_exceptions(DatabaseUnavailable)
    @_db_outage_answered
    @_report_retry
    def report_data(self, context, hostname, devices):
        devices = [records.Device.from_dict(d) for d in devices]
        writes, states = host_inventory.apply_report(hostname, devices)
        if writes:
            LOG.info('Host %s reported %d device(s); %d DB write(s)',
                     hostname, len(devices), writes)
        return {'writes': writes,
                'fenced': sorted(k for k, s in states.items()
                                 if s['status'] == 'maintaining'),
                'excluded': sorted(k for k, s in states.items()
                                   if s['excluded']),
                'reclaim': {k: s['reclaim_requested_at']
                            for k, s in states.items()
                            if s['reclaim_requested_at']},
                'reset': {k: s['reset_requested_at']
                          for k, s in states.items()
                          if s['reset_requested_at']},
                'share': {k: s['share'] for k, s in states.items()
                          if s['share']},
                'in_use': host_inventory.in_use_handles(hostname)}

    @messaging.expected_exceptions(DatabaseUnavailable)
    @_db_outage_answered
    def update_handles(self, context, updates):
        """An agent re-made what a binding holds (e.g. a MIG instance
        after a reboot): record its new attach info.
        """
        for handle_uuid, info in updates.items():
            bindings.update_handle_info(handle_uuid, info)
