# SPDX-License-Identifier: Apache-2.0
"""A thin Placement client over a keystoneauth Adapter.

Each method is one HTTP call. Generation conflicts surface as
GenerationConflict so callers can re-read and retry; connection errors and
5xx are retried here with a bounded back-off.
"""

import time

from keystoneauth1 import exceptions as ks_exc
from oslo_log import log

LOG = log.getLogger(__name__)

# 1.26: reserved may equal total (fencing); 1.20: POST returns the provider;
# 1.18: ?required= traits; 1.14: ?in_tree=.
MICROVERSION = '1.26'
# Allocations the agent makes itself (share-pool consumers): 1.28 consumer
# generations; 1.38 consumer types when the server has them.
ALLOCATION_MICROVERSION = '1.28'
CONSUMER_TYPE_MICROVERSION = '1.38'
OWNER_TRAIT = 'OWNER_CYBORG'
STANDARD_RCS = ('FPGA', 'PGPU', 'VGPU')


class PlacementError(Exception):
    def __init__(self, method, url, status, text):
        self.status = status
        super().__init__('Placement %s %s answered %s: %s'
                         % (method, url, status, text[:500]))


class GenerationConflict(PlacementError):
    pass


class InUse(PlacementError):
    """A provider or inventory still has allocations."""


class NotFound(PlacementError):
    pass


def _error(method, url, response):
    text = response.text or ''
    code = ''
    try:
        errors = response.json().get('errors') or []
        code = errors[0].get('code', '') if errors else ''
    except ValueError:
        pass
    if response.status_code == 404:
        cls = NotFound
    elif response.status_code == 409 and code == 'placement.concurrent_update':
        cls = GenerationConflict
    elif response.status_code == 409 and (
            'inventory' in code or 'in use' in text.lower()
            or 'allocations' in text.lower()):
        cls = InUse
    else:
        cls = PlacementError
    return cls(method, url, response.status_code, text)


class PlacementClient:

    def __init__(self, adapter, retries=5, max_delay=10.0):
        self.adapter = adapter
        self.retries = retries
        self.max_delay = max_delay
        self._known_rcs = set(STANDARD_RCS)
        self._known_traits = {OWNER_TRAIT}

    def _call(self, method, url, ok=(200,), microversion=MICROVERSION,
              **kwargs):
        delay = 0.2
        for attempt in range(self.retries + 1):
            try:
                response = self.adapter.request(
                    url, method, microversion=microversion, raise_exc=False,
                    **kwargs)
            except (ks_exc.ConnectFailure, ks_exc.ConnectTimeout,
                    ks_exc.EndpointNotFound) as e:
                problem = str(e)
            else:
                if response.status_code in ok:
                    return response
                if response.status_code < 500:
                    raise _error(method, url, response)
                problem = 'HTTP %s' % response.status_code
            if attempt == self.retries:
                break
            LOG.warning('Placement %s %s failed (%s); retrying in %.1fs',
                        method, url, problem, delay)
            time.sleep(delay)
            delay = min(delay * 2, self.max_delay)
        raise PlacementError(method, url, 503, problem)

    # Providers -----------------------------------------------------------

    def provider_by_name(self, name):
        r = self._call('GET', '/resource_providers', params={'name': name})
        rps = r.json()['resource_providers']
        return rps[0] if rps else None

    def provider(self, uuid):
        try:
            return self._call('GET', '/resource_providers/%s' % uuid).json()
        except NotFound:
            return None

    def tree(self, root_uuid, required=None):
        params = {'in_tree': root_uuid}
        if required:
            params['required'] = required
        return self._call('GET', '/resource_providers',
                          params=params).json()['resource_providers']

    def create_provider(self, uuid, name, parent_uuid):
        return self._call('POST', '/resource_providers', ok=(200,), json={
            'uuid': uuid, 'name': name,
            'parent_provider_uuid': parent_uuid}).json()

    def delete_provider(self, uuid):
        try:
            self._call('DELETE', '/resource_providers/%s' % uuid, ok=(204,))
        except NotFound:
            pass

    def usages(self, uuid):
        return self._call('GET', '/resource_providers/%s/usages'
                          % uuid).json()['usages']

    # Allocations of one consumer -----------------------------------------

    def allocations(self, consumer):
        """({rp uuid: {resources}}, consumer generation or None)."""
        body = self._call('GET', '/allocations/%s' % consumer,
                          microversion=ALLOCATION_MICROVERSION).json()
        return ({rp: a['resources'] for rp, a in
                 body.get('allocations', {}).items()},
                body.get('consumer_generation'))

    def put_allocations(self, consumer, allocations, project_id, user_id,
                        consumer_generation=None, consumer_type=None):
        """Replace a consumer's allocations ({rp uuid: {rc: amount}}),
        atomically: Placement refuses (409) the whole set when any provider
        lacks the capacity, or when the consumer changed meanwhile.
        """
        body = {'allocations': {rp: {'resources': res}
                                for rp, res in allocations.items()},
                'project_id': project_id, 'user_id': user_id,
                'consumer_generation': consumer_generation}
        if consumer_type:
            body['consumer_type'] = consumer_type
            try:
                self._call('PUT', '/allocations/%s' % consumer, ok=(204,),
                           microversion=CONSUMER_TYPE_MICROVERSION,
                           json=body)
                return
            except PlacementError as e:
                if e.status != 406:
                    raise
            del body['consumer_type']    # an older Placement
        self._call('PUT', '/allocations/%s' % consumer, ok=(204,),
                   microversion=ALLOCATION_MICROVERSION, json=body)

    def delete_allocations(self, consumer):
        try:
            self._call('DELETE', '/allocations/%s' % consumer, ok=(204,))
        except NotFound:
            pass

    # Inventories and traits ----------------------------------------------

    def inventories(self, uuid):
        body = self._call('GET', '/resource_providers/%s/inventories'
                          % uuid).json()
        return body['resource_provider_generation'], body['inventories']

    def put_inventories(self, uuid, generation, inventories):
        body = self._call('PUT', '/resource_providers/%s/inventories' % uuid,
                          json={'resource_provider_generation': generation,
                                'inventories': inventories}).json()
        return body['resource_provider_generation']

    def traits(self, uuid):
        body = self._call('GET', '/resource_providers/%s/traits'
                          % uuid).json()
        return body['resource_provider_generation'], set(body['traits'])

    def put_traits(self, uuid, generation, traits):
        body = self._call('PUT', '/resource_providers/%s/traits' % uuid,
                          json={'resource_provider_generation': generation,
                                'traits': sorted(traits)}).json()
        return body['resource_provider_generation']

    def ensure_resource_class(self, name):
        if name in self._known_rcs:
            return
        if name.startswith('CUSTOM_'):
            self._call('PUT', '/resource_classes/%s' % name, ok=(201, 204))
        self._known_rcs.add(name)

    def ensure_traits(self, names):
        for name in set(names) - self._known_traits:
            if name.startswith('CUSTOM_'):
                self._call('PUT', '/traits/%s' % name, ok=(201, 204))
            self._known_traits.add(name)

    def update_inventories(self, uuid, mutate, attempts=5):
        """Read-modify-write of one provider's inventories.

        mutate(inventories) returns the new dict; nothing is written when it
        is unchanged. Generation conflicts re-read and retry.
        """
        for _ in range(attempts):
            generation, current = self.inventories(uuid)
            wanted = mutate({rc: dict(inv) for rc, inv in current.items()})
            if wanted == current:
                return False
            try:
                self.put_inventories(uuid, generation, wanted)
                return True
            except GenerationConflict:
                LOG.info('Generation conflict on provider %s; re-reading',
                         uuid)
        raise GenerationConflict('PUT', '/resource_providers/%s/inventories'
                                 % uuid, 409, 'gave up after %d attempts'
                                 % attempts)


def fence(inventories, fenced, usages=None):
    """Set reserved to total (fenced) or 0, leaving other fields alone.

    usages ({resource class: used}, GET .../usages): a fenced inventory
    reserves only what is not used, so that capacity equals usage. Nothing
    more fits either way, but Placement does not log the provider as "now
    over-capacity" (which it does when used > total - reserved).
    """
    for inv in inventories.values():
        inv['reserved'] = inv['total'] if fenced else 0
    return fit_fences(inventories, usages) if usages else inventories


def fit_fences(inventories, usages):
    """Inventories whose fully reserved classes (fenced: nothing more may
    be allocated) reserve total - used instead, `usages` being the
    provider's; others unchanged. A new dict; the input is left alone.
    """
    out = {}
    for rc, inv in inventories.items():
        used = min(usages.get(rc, 0), inv['total'])
        if used and inv.get('reserved', 0) >= inv['total']:
            inv = dict(inv, reserved=inv['total'] - used)
        out[rc] = inv
    return out
