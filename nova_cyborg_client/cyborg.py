# SPDX-License-Identifier: Apache-2.0
"""The accelerator calls Nova makes, under the names Nova's code uses.

What is kept from Nova's `nova.accelerator.cyborg`, as facts of the
interface: the module functions and `_CyborgClient` methods below, the
requests each one sends (paths, query parameters, JSON bodies; no
microversion header), and the exceptions callers catch
(DeviceProfileError, AcceleratorRequestOpFailed,
AcceleratorRequestBindingFailed). How the calls are made is ours: every
request goes through cyborg_http.AcceleratorAPI.request(), whose typed
errors (cyborg_http.CyborgError and its subclasses) are turned into
those exceptions here, with the service's reason in the message and the
typed error as __cause__.
"""

from oslo_log import log

from nova_cyborg_client import cyborg_http
from nova_cyborg_client import exception
from nova_cyborg_client import scheduler

LOG = log.getLogger(__name__)

PROFILES = '/device_profiles'
ARQS = '/accelerator_requests'
# The states get_arqs_for_instance(only_resolved=True) keeps: binding is
# over, one way or the other (filtered here, not by the service).
RESOLVED_STATES = frozenset(('Bound', 'BindFailed', 'Deleting'))


# -- helpers Nova's scheduler, conductor and compute code call ----------------

def get_client(context):
    return _CyborgClient(context)


def get_device_profile_group_requester_id(dp_group_id, owner=None):
    """The request group name of a profile group: `device_profile_<i>`,
    followed directly by the port's uuid for a port's profile.
    """
    return 'device_profile_%s%s' % (dp_group_id, owner or '')


def get_arq_pci_device_profile(arq):
    """A port ARQ's entries for the Neutron port's binding:profile."""
    info = arq['attach_handle_info']
    slot = '{domain}:{bus}:{device}.{function}'.format(**info)
    return {'physical_network': info['physical_network'],
            'pci_slot': slot, 'arq_uuid': arq['uuid']}


def get_device_profile_request_groups(context, dp_name, owner=None):
    client = get_client(context)
    return client.get_device_request_groups(
        client.get_device_profile_groups(dp_name), owner)


def get_device_amount_of_dp_groups(dp_groups):
    """How many devices the groups ask for: their resources* amounts."""
    total = 0
    for group in dp_groups:
        for key, value in group.items():
            match = scheduler.XS_KEYPAT.match(key)
            if match is not None and match.group(1) == 'resources':
                total += int(value)
    return total


# -- the client ------------------------------------------------------------

class _CyborgClient:
    """One caller's view of the accelerator API (the context's token)."""

    def __init__(self, context, conf=None):
        self._api = cyborg_http.AcceleratorAPI(context, conf)

    # device profiles

    def _get_device_profile_list(self, dp_name):
        try:
            body = self._api.request('GET', PROFILES,
                                     params={'name': dp_name})
        except cyborg_http.CyborgError as err:
            raise exception.DeviceProfileError(name=dp_name,
                                               msg=str(err)) from err
        return (body or {}).get('device_profiles')

    def get_device_profile_groups(self, dp_name):
        """The groups (list of dicts) of the one profile named dp_name."""
        found = self._get_device_profile_list(dp_name) or []
        if len(found) != 1:
            raise exception.DeviceProfileError(
                name=dp_name,
                msg='expected one device profile of that name, the '
                    'accelerator service has %d' % len(found))
        return found[0]['groups']

    def get_device_request_groups(self, dp_groups, owner=None):
        """A scheduler request group per profile group, in order. Only
        resources*/trait* keys count (accel:* is the service's business);
        the key's own numeric suffix is dropped, the group's requester id
        names it.
        """
        groups = []
        for index, dp_group in enumerate(dp_groups):
            group = scheduler.RequestGroup(
                requester_id=get_device_profile_group_requester_id(index,
                                                                   owner))
            for key, value in dp_group.items():
                scheduler.parse_extra_spec(group, key, value)
            groups.append(group)
        return groups

    # accelerator requests

    def _arq_call(self, op, method, path, detail=None, **kwargs):
        """request(), with a failure raised as AcceleratorRequestOpFailed
        (`op` names the operation; `detail`, if given, says on what).
        """
        try:
            return self._api.request(method, path, **kwargs)
        except cyborg_http.CyborgError as err:
            msg = str(err) if detail is None else '%s (%s)' % (err, detail)
            raise exception.AcceleratorRequestOpFailed(op=op,
                                                       msg=msg) from err

    def create_arqs(self, dp_name):
        """ARQs for every device the profile asks for (state Initial)."""
        LOG.info('Creating ARQs for device profile %s', dp_name)
        body = self._arq_call('create', 'POST', ARQS,
                              'device profile %s' % dp_name,
                              body={'device_profile_name': dp_name})
        arqs = (body or {}).get('arqs')
        if not arqs:
            raise exception.AcceleratorRequestOpFailed(
                op='create', msg='the accelerator service made none for '
                                 'device profile %s' % dp_name)
        return arqs

    def get_arq_device_rp_uuid(self, arq, rg_rp_map, owner):
        """The provider the ARQ's request group was allocated from."""
        group = get_device_profile_group_requester_id(
            arq['device_profile_group_id'], owner)
        return rg_rp_map[group][0]

    def create_arqs_and_match_resource_providers(self, dp_name, rg_rp_map):
        """create_arqs, each ARQ's device_rp_uuid set from rg_rp_map
        (KeyError when its group has no allocation).
        """
        arqs = self.create_arqs(dp_name)
        for arq in arqs:
            arq['device_rp_uuid'] = self.get_arq_device_rp_uuid(
                arq, rg_rp_map, owner=None)
        return arqs

    def bind_arqs(self, bindings):
        """Ask the service to bind ARQs, all in one PATCH.

        bindings: {arq_uuid: {"hostname", "device_rp_uuid",
        "instance_uuid"}}; each field becomes an `add` operation, in the
        order given. Binding itself is asynchronous: its outcome comes as
        accelerator-request-bound events.
        """
        LOG.info('Binding ARQs %s', ', '.join(bindings))
        patch = {uuid: [{'path': '/%s' % field, 'op': 'add', 'value': value}
                        for field, value in fields.items()]
                 for uuid, fields in bindings.items()}
        try:
            self._api.request('PATCH', ARQS, body=patch)
        except cyborg_http.CyborgError as err:
            uuids = list(bindings)
            raise exception.AcceleratorRequestBindingFailed(
                arqs=uuids, msg='%s (ARQs %s)' % (err, ','.join(uuids))
            ) from err

    def get_arqs_for_instance(self, instance_uuid, only_resolved=False):
        """The instance's ARQs (at least one, or AcceleratorRequestOpFailed);
        with only_resolved, those whose binding is over.
        """
        body = self._arq_call('get', 'GET', ARQS,
                              'instance %s' % instance_uuid,
                              params={'instance': instance_uuid})
        arqs = (body or {}).get('arqs')
        if not arqs:
            raise exception.AcceleratorRequestOpFailed(
                op='get', msg='the accelerator service has none for '
                              'instance %s' % instance_uuid)
        if only_resolved:
            return [arq for arq in arqs if arq['state'] in RESOLVED_STATES]
        return arqs

    def get_arq_uuids_for_instance(self, instance):
        return [arq['uuid']
                for arq in self.get_arqs_for_instance(instance.uuid)]

    def get_arq_by_uuid(self, arq_uuid):
        return self._arq_call('get', 'GET', '%s/%s' % (ARQS, arq_uuid))

    def delete_arqs_for_instance(self, instance_uuid):
        """Delete every ARQ of the instance (the service unbinds them
        first); an instance without ARQs is no error.
        """
        self._arq_call('delete', 'DELETE', ARQS,
                       'instance %s' % instance_uuid,
                       params={'instance': instance_uuid})

    def delete_arqs_by_uuid(self, arq_uuids):
        """Delete ARQs by uuid, best effort: a failure (one already gone,
        the service down) is logged, not raised.
        """
        joined = ','.join(arq_uuids)
        try:
            self._api.request('DELETE', ARQS, params={'arqs': joined})
        except cyborg_http.CyborgError as err:
            LOG.error('Failed to delete ARQs %s: %s', joined, err)
