# SPDX-License-Identifier: Apache-2.0
"""The Placement calls Nova's scheduler makes for a boot and a delete, at
microversion 1.36, with the caller's token.
"""

from oslo_log import log

from nova_cyborg_client import conf as nova_conf
from nova_cyborg_client import scheduler

LOG = log.getLogger(__name__)


class PlacementError(Exception):
    def __init__(self, what, response):
        self.status = response.status_code
        super().__init__('Placement %s answered %s: %s'
                         % (what, response.status_code, response.text[:500]))


class PlacementClient:
    """Calls at microversion 1.36 with `context`'s token, or through
    `adapter`: a keystoneauth adapter of the caller's own (a service user,
    a benchmark's pooled session) with raise_exc=False and a default
    microversion of at least 1.20.
    """

    def __init__(self, context=None, conf=None, adapter=None):
        if adapter is None:
            adapter = nova_conf.adapter(
                context, nova_conf.PLACEMENT_GROUP, conf,
                default_microversion=scheduler.PLACEMENT_MICROVERSION)
        self._client = adapter

    def get_allocation_candidates(self, resource_request):
        """(allocation_requests, provider_summaries) for the query; none
        when Placement refuses the query (e.g. 400 for a trait no provider
        ever had), logged as Nova's report client does, which then makes
        the scheduler answer NoValidHost.
        """
        url = '/allocation_candidates?' + resource_request.to_querystring()
        resp = self._client.get(url)
        if resp.status_code != 200:
            LOG.error('Failed to retrieve allocation candidates from '
                      'placement API for filters: %s\nGot %d: %s.',
                      url, resp.status_code, resp.text[:500])
            return [], {}
        body = resp.json()
        return body['allocation_requests'], body['provider_summaries']

    def claim_resources(self, consumer_uuid, allocation_request, project_id,
                        user_id):
        """PUT the allocation request for a new consumer; False when
        Placement refuses it (409: someone else got there first).
        """
        payload = dict(allocation_request, consumer_generation=None,
                       project_id=project_id, user_id=user_id)
        resp = self._client.put('/allocations/%s' % consumer_uuid,
                                json=payload)
        if resp.status_code == 204:
            return True
        if resp.status_code == 409:
            LOG.warning('Unable to submit allocation for instance %s (%s)',
                        consumer_uuid, resp.text[:500])
            return False
        raise PlacementError('PUT /allocations/%s' % consumer_uuid, resp)

    def get_allocations_for_consumer(self, consumer_uuid):
        """{rp_uuid: {"resources": {...}}} ({} when none)."""
        resp = self._client.get('/allocations/%s' % consumer_uuid)
        if resp.status_code != 200:
            raise PlacementError('GET /allocations/%s' % consumer_uuid, resp)
        return resp.json()['allocations']

    def delete_allocation_for_instance(self, consumer_uuid):
        """True if allocations were deleted, False if there were none."""
        resp = self._client.delete('/allocations/%s' % consumer_uuid)
        if resp.status_code == 204:
            return True
        if resp.status_code == 404:
            return False
        raise PlacementError('DELETE /allocations/%s' % consumer_uuid, resp)

    def get_provider(self, rp_uuid):
        resp = self._client.get('/resource_providers/%s' % rp_uuid)
        if resp.status_code != 200:
            raise PlacementError('GET /resource_providers/%s' % rp_uuid,
                                 resp)
        return resp.json()

    # What nova-compute's resource tracker does for its compute node; used
    # by compute_node.ensure() where no nova-compute runs (a lab, a smoke
    # test).

    def provider_by_name(self, name):
        """The provider called `name`, or None."""
        resp = self._client.get('/resource_providers',
                                params={'name': name})
        if resp.status_code != 200:
            raise PlacementError('GET /resource_providers?name=%s' % name,
                                 resp)
        found = resp.json()['resource_providers']
        return found[0] if found else None

    def create_provider(self, rp_uuid, name):
        resp = self._client.post('/resource_providers',
                                 json={'uuid': rp_uuid, 'name': name})
        if resp.status_code != 200:
            raise PlacementError('POST /resource_providers', resp)
        return resp.json()

    def get_inventories(self, rp_uuid):
        """(provider generation, {resource class: inventory record})."""
        url = '/resource_providers/%s/inventories' % rp_uuid
        resp = self._client.get(url)
        if resp.status_code != 200:
            raise PlacementError('GET ' + url, resp)
        body = resp.json()
        return body['resource_provider_generation'], body['inventories']

    def put_inventories(self, rp_uuid, generation, inventories):
        url = '/resource_providers/%s/inventories' % rp_uuid
        resp = self._client.put(url, json={
            'resource_provider_generation': generation,
            'inventories': inventories})
        if resp.status_code != 200:
            raise PlacementError('PUT ' + url, resp)
        return resp.json()['resource_provider_generation']

    def get_traits(self, rp_uuid):
        """(provider generation, set of trait names)."""
        url = '/resource_providers/%s/traits' % rp_uuid
        resp = self._client.get(url)
        if resp.status_code != 200:
            raise PlacementError('GET ' + url, resp)
        body = resp.json()
        return body['resource_provider_generation'], set(body['traits'])

    def put_traits(self, rp_uuid, generation, traits):
        url = '/resource_providers/%s/traits' % rp_uuid
        resp = self._client.put(url, json={
            'resource_provider_generation': generation,
            'traits': sorted(traits)})
        if resp.status_code != 200:
            raise PlacementError('PUT ' + url, resp)
        return resp.json()['resource_provider_generation']
