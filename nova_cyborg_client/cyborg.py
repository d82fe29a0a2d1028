"""The accelerator (Cyborg v2) client, as Nova's nova.accelerator.cyborg.

Same functions, REST calls, bodies, exceptions and messages as Nova: no
microversion header is ever sent (the service answers at its base 2.0),
HTTP errors do not raise inside keystoneauth (raise_exc=False) and become
the exceptions below, and the caller's token is used.
"""

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from oslo_log import log

from nova_cyborg_client import conf as nova_conf
from nova_cyborg_client import exception
from nova_cyborg_client import scheduler

LOG = log.getLogger(__name__)

RESOLVED_STATES = ('Bound', 'BindFailed', 'Deleting')


def get_client(context):
    return _CyborgClient(context)


def get_device_profile_group_requester_id(dp_group_id, owner=None):
    """`device_profile_<index>`, the port uuid appended (no separator) for
    a port's profile."""
    return 'device_profile_' + str(dp_group_id) + (str(owner) if owner
                                                   else '')


def get_arq_pci_device_profile(arq):
    """The Neutron binding:profile entries of a port's ARQ."""
    info = arq['attach_handle_info']
    return {
        'physical_network': info['physical_network'],
        'pci_slot': '%s:%s:%s.%s' % (info['domain'], info['bus'],
                                     info['device'], info['function']),
        'arq_uuid': arq['uuid'],
    }


def get_device_profile_request_groups(context, dp_name, owner=None):
    cyclient = get_client(context)
    dp_groups = cyclient.get_device_profile_groups(dp_name)
    return cyclient.get_device_request_groups(dp_groups, owner)


def get_device_amount_of_dp_groups(dp_groups):
    """Devices a profile asks for: the sum of its resources amounts."""
    count = 0
    for group in dp_groups:
        for key, val in group.items():
            match = scheduler.XS_KEYPAT.match(key)
            if match and match.group(1) == 'resources':
                count += int(val)
    return count


class _CyborgClient:
    DEVICE_PROFILE_URL = '/device_profiles'
    ARQ_URL = '/accelerator_requests'

    def __init__(self, context, conf=None):
        conf = conf or nova_conf.CONF
        auth = context.get_auth_plugin()
        session = ks_loading.load_session_from_conf_options(
            conf, nova_conf.CYBORG_GROUP, auth=auth)
        self._client = ks_loading.load_adapter_from_conf_options(
            conf, nova_conf.CYBORG_GROUP, session=session, auth=auth,
            min_version=None, max_version=None, raise_exc=False)

    def _call_cyborg(self, func, *args, **kwargs):
        resp = err_msg = None
        try:
            resp = func(*args, **kwargs)
            if not resp:
                err_msg = 'Invalid response from Cyborg: ' + str(resp)
        except ks_exc.ClientException as exc:
            err_msg = 'Could not communicate with Cyborg.'
            LOG.exception('%s: %s', err_msg, str(exc))
        return resp, err_msg

    def _get_device_profile_list(self, dp_name):
        resp, err_msg = self._call_cyborg(
            self._client.get, self.DEVICE_PROFILE_URL,
            params={'name': dp_name})
        if err_msg:
            raise exception.DeviceProfileError(name=dp_name, msg=err_msg)
        return resp.json().get('device_profiles')

    def get_device_profile_groups(self, dp_name):
        """The groups (list of dicts) of the one profile named dp_name."""
        dp_list = self._get_device_profile_list(dp_name)
        if not dp_list:
            raise exception.DeviceProfileError(
                name=dp_name, msg='Expected 1 device profile but got nothing.')
        if len(dp_list) != 1:
            raise exception.DeviceProfileError(
                name=dp_name,
                msg='Expected 1 device profile but got %s.' % len(dp_list))
        return dp_list[0]['groups']

    def get_device_request_groups(self, dp_groups, owner=None):
        """One request group per profile group, in profile order; keys
        other than resources*/trait* (accel:*) are ignored, and a key's own
        suffix is dropped."""
        request_groups = []
        for dp_group_id, dp_group in enumerate(dp_groups):
            group = scheduler.RequestGroup(
                requester_id=get_device_profile_group_requester_id(
                    dp_group_id, owner))
            for key, val in dp_group.items():
                scheduler.parse_extra_spec(group, key, val)
            request_groups.append(group)
        return request_groups

    def _create_arqs(self, dp_name):
        resp, err_msg = self._call_cyborg(
            self._client.post, self.ARQ_URL,
            json={'device_profile_name': dp_name})
        if err_msg:
            raise exception.AcceleratorRequestOpFailed(op='create',
                                                       msg=err_msg)
        return resp.json().get('arqs')

    def create_arqs(self, dp_name):
        LOG.info('Creating ARQs for device profile %s', dp_name)
        arqs = self._create_arqs(dp_name)
        if not arqs:
            raise exception.AcceleratorRequestOpFailed(
                op='create', msg='device profile name %s' % dp_name)
        return arqs

    def create_arqs_and_match_resource_providers(self, dp_name, rg_rp_map):
        """Create the profile's ARQs and set each one's device_rp_uuid to
        the provider its group was allocated from (KeyError if missing)."""
        arqs = self.create_arqs(dp_name)
        for arq in arqs:
            arq['device_rp_uuid'] = self.get_arq_device_rp_uuid(
                arq, rg_rp_map, owner=None)
        return arqs

    def get_arq_device_rp_uuid(self, arq, rg_rp_map, owner):
        requester_id = get_device_profile_group_requester_id(
            arq['device_profile_group_id'], owner)
        return rg_rp_map[requester_id][0]

    def bind_arqs(self, bindings):
        """Bind all of an instance's ARQs in one PATCH.

        bindings: {arq_uuid: {"hostname", "device_rp_uuid",
        "instance_uuid"}} (that order). The service binds asynchronously;
        the outcome arrives as accelerator-request-bound events.
        """
        LOG.info('Binding ARQs.')
        patch_list = {}
        for arq_uuid, binding in bindings.items():
            patch_list[arq_uuid] = [
                {'path': '/' + field, 'op': 'add', 'value': value}
                for field, value in binding.items()]
        resp, err_msg = self._call_cyborg(self._client.patch, self.ARQ_URL,
                                          json=patch_list)
        if err_msg:
            arq_uuids = list(bindings.keys())
            err_msg = (err_msg + ' Binding failed for ARQ UUIDs: '
                       + ','.join(arq_uuids))
            raise exception.AcceleratorRequestBindingFailed(arqs=arq_uuids,
                                                            msg=err_msg)

    def get_arqs_for_instance(self, instance_uuid, only_resolved=False):
        """The instance's ARQs; with only_resolved, those in Bound,
        BindFailed or Deleting (filtered here, as Nova does)."""
        resp, err_msg = self._call_cyborg(
            self._client.get, self.ARQ_URL,
            params={'instance': instance_uuid})
        if err_msg:
            raise exception.AcceleratorRequestOpFailed(
                op='get', msg=err_msg + ' Instance %s' % instance_uuid)
        arqs = resp.json().get('arqs')
        if not arqs:
            raise exception.AcceleratorRequestOpFailed(
                op='get', msg='Cyborg returned no accelerator requests for '
                              'instance %s' % instance_uuid)
        if only_resolved:
            arqs = [arq for arq in arqs if arq['state'] in RESOLVED_STATES]
        return arqs

    def get_arq_by_uuid(self, arq_uuid):
        resp, err_msg = self._call_cyborg(
            self._client.get, '%s/%s' % (self.ARQ_URL, arq_uuid))
        if err_msg:
            raise exception.AcceleratorRequestOpFailed(
                op='get', msg=err_msg + ' ARQ: %s' % arq_uuid)
        return resp.json()

    def delete_arqs_for_instance(self, instance_uuid):
        """Delete (the service unbinds first) every ARQ of the instance;
        deleting none is fine."""
        resp, err_msg = self._call_cyborg(
            self._client.delete, self.ARQ_URL,
            params={'instance': instance_uuid})
        if err_msg:
            raise exception.AcceleratorRequestOpFailed(
                op='delete', msg=err_msg + ' Instance %s' % instance_uuid)

    def delete_arqs_by_uuid(self, arq_uuids):
        """Delete ARQs by uuid; failures (e.g. one already gone) are only
        logged."""
        arq_uuid_str = ','.join(arq_uuids)
        resp, err_msg = self._call_cyborg(
            self._client.delete, self.ARQ_URL,
            params={'arqs': arq_uuid_str})
        if err_msg:
            LOG.error('Failed to delete ARQs %s', arq_uuid_str)

    def get_arq_uuids_for_instance(self, instance):
        return [arq['uuid']
                for arq in self.get_arqs_for_instance(instance.uuid)]
