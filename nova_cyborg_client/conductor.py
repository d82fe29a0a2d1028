# SPDX-License-Identifier: Apache-2.0
"""The conductor side: create the flavor's ARQs, match each to the provider
its request group was allocated from, and bind them all in one PATCH.

Beyond Nova: ARQs created before a matching error are deleted (Nova leaks
them); a binding error deletes them by uuid, as Nova does.
"""

from oslo_log import log

from nova_cyborg_client import cyborg
from nova_cyborg_client import exception
from nova_cyborg_client import scheduler

LOG = log.getLogger(__name__)


def _create_and_bind_arqs(cyclient, instance_uuid, extra_specs, hostname,
                          rg_rp_map):
    """{arq_uuid: binding} for the flavor's profile ({} without one)."""
    dp_name = extra_specs.get(scheduler.DEVICE_PROFILE_SPEC)
    if not dp_name:
        return {}
    LOG.debug('Calling Cyborg to get ARQs. dp_name=%s instance=%s',
              dp_name, instance_uuid)
    arqs = cyclient.create_arqs(dp_name)
    try:
        for arq in arqs:
            arq['device_rp_uuid'] = cyclient.get_arq_device_rp_uuid(
                arq, rg_rp_map, owner=None)
    except (KeyError, IndexError):
        cyclient.delete_arqs_by_uuid([arq['uuid'] for arq in arqs])
        raise
    return {arq['uuid']: {'hostname': hostname,
                          'device_rp_uuid': arq['device_rp_uuid'],
                          'instance_uuid': instance_uuid}
            for arq in arqs}


def create_and_bind_arq_for_instance(context, instance, hostname, rg_rp_map):
    """Create and bind the instance's ARQs; returns their uuids (the
    accel_uuids the compute side waits for). hostname is the compute
    node's name (the hypervisor nodename).
    """
    cyclient = cyborg.get_client(context)
    try:
        bindings = _create_and_bind_arqs(cyclient, instance.uuid,
                                         instance.flavor.extra_specs,
                                         hostname, rg_rp_map)
        if bindings:
            cyclient.bind_arqs(bindings)
        return list(bindings.keys())
    except exception.AcceleratorRequestBindingFailed as exc:
        cyborg.get_client(context).delete_arqs_by_uuid(exc.arqs)
        raise
