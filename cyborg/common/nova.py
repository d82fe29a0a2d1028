# SPDX-License-Identifier: Apache-2.0
"""Telling Nova that ARQs are bound: `accelerator-request-bound` events.

One POST /os-server-external-events per batch, compute microversion 2.82,
through a keystoneauth adapter built from [nova]. Connection errors and 5xx
are retried with a bounded back-off; a 207 whose events all answer 422 is
what Nova says while the instance is not on its host yet (it will poll us),
so it is logged quietly.
"""

import time

from keystoneauth1 import exceptions as ks_exc
from oslo_log import log

from cyborg.common import ksa

LOG = log.getLogger(__name__)

MICROVERSION = '2.82'
EVENT_NAME = 'accelerator-request-bound'


class NovaNotifier:

    def __init__(self, adapter=None, give_up_after=600.0, max_delay=30.0,
                 sleep=time.sleep):
        self._adapter = adapter
        self.give_up_after = give_up_after
        self.max_delay = max_delay
        self.sleep = sleep

    @property
    def adapter(self):
        if self._adapter is None:
            self._adapter = ksa.get_adapter('nova')
        return self._adapter

    def send(self, events):
        """Deliver events; True once Nova answered (200/207 or a 4xx that a
        retry cannot fix), False if it stayed unreachable too long.
        """
        if not events:
            return True
        deadline = time.monotonic() + self.give_up_after
        delay = 0.5
        while True:
            problem = self._post(events)
            if problem is None:
                return True
            if time.monotonic() + delay > deadline:
                LOG.error('Giving up sending %d event(s) to Nova for now: '
                          '%s', len(events), problem)
                return False
            LOG.warning('Nova events not delivered (%s); retrying in %.1fs',
                        problem, delay)
            self.sleep(delay)
            delay = min(delay * 2, self.max_delay)

    def _post(self, events):
        """None when Nova answered for good, else what went wrong."""
        try:
            response = self.adapter.post(
                '/os-server-external-events', json={'events': events},
                microversion=MICROVERSION, raise_exc=False,
                headers={'X-OpenStack-Nova-API-Version': MICROVERSION})
        except (ks_exc.ConnectFailure, ks_exc.ConnectTimeout,
                ks_exc.EndpointNotFound, ks_exc.DiscoveryFailure) as e:
            return str(e)
        status = response.status_code
        if status >= 500:
            return 'HTTP %d' % status
        if status == 200:
            LOG.info('Nova accepted %d accelerator event(s)', len(events))
        elif status == 207:
            self._log_partial(response, events)
        else:
            LOG.error('Nova refused %d accelerator event(s): HTTP %d %s',
                      len(events), status, response.text[:500])
        return None

    @staticmethod
    def _log_partial(response, events):
        try:
            codes = [e.get('code') for e in response.json()['events']]
        except (ValueError, KeyError, TypeError):
            codes = []
        if codes and all(c == 422 for c in codes):
            LOG.debug('Nova answered 422 for %d event(s): the instance is '
                      'not on its host yet; Nova polls ARQs before waiting',
                      len(events))
        else:
            LOG.warning('Nova took only part of %d event(s): codes %s',
                        len(events), codes)
