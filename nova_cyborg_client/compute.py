# SPDX-License-Identifier: Apache-2.0
"""The compute side: wait until the service has bound an instance's ARQs,
and delete ARQs when a build fails or the instance goes away.

Nova's compute manager registers its waiters only after the conductor has
sent the bind PATCH, so events can come before anyone waits for them (and
are dropped). It therefore polls the service ONCE, after registering, for
ARQs already resolved, and does not wait for their events. Beyond Nova, an
ARQ that resolved to anything but Bound (BindFailed, Deleting) fails the
build here instead of booting a guest without its device.
"""

from oslo_log import log

from nova_cyborg_client import conf as nova_conf
from nova_cyborg_client import cyborg
from nova_cyborg_client import events as nova_events
from nova_cyborg_client import exception
from nova_cyborg_client import scheduler

LOG = log.getLogger(__name__)

BUILD_ABORT_REASON = 'Failure getting accelerator requests.'


class Instance:
    def __init__(self, uuid, flavor, project_id=None, user_id=None,
                 name=None):
        self.uuid = uuid
        self.flavor = flavor
        self.project_id = project_id
        self.user_id = user_id
        self.name = name or uuid
        self.host = None
        self.node = None


def _refuse_unbound(arqs):
    not_bound = [arq for arq in arqs if arq['state'] != 'Bound']
    if not_bound:
        raise exception.AcceleratorRequestBindingFailed(
            arqs=[arq['uuid'] for arq in not_bound],
            msg='ARQ(s) resolved without binding: %s' % ', '.join(
                '%s (%s)' % (arq['uuid'], arq['state']) for arq in not_bound))


def get_bound_arq_resources(context, instance, arq_uuids, instance_events,
                            timeout=None):
    """The instance's ARQs once every one is Bound.

    arq_uuids None means "look them up"; [] waits for nothing. One deadline
    (timeout, default [DEFAULT] arq_binding_timeout) covers every event.
    """
    cyclient = cyborg.get_client(context)
    if arq_uuids is None:
        arq_uuids = [arq['uuid']
                     for arq in cyclient.get_arqs_for_instance(instance.uuid)]
    wanted = [(nova_events.EVENT_NAME, uuid) for uuid in arq_uuids]
    if timeout is None:
        timeout = nova_conf.CONF.arq_binding_timeout
    resolved_arqs = []
    with nova_events.wait_for_instance_event(
            instance_events, instance.uuid, wanted, deadline=timeout):
        resolved_arqs = cyclient.get_arqs_for_instance(instance.uuid,
                                                       only_resolved=True)
        # Beyond Nova: a failed one fails the build now, without waiting.
        _refuse_unbound(resolved_arqs)
        early_events = [(nova_events.EVENT_NAME, arq['uuid'])
                        for arq in resolved_arqs]
        if early_events:
            nova_events.exit_wait_early(early_events)
    if sorted(arq['uuid'] for arq in resolved_arqs) != sorted(arq_uuids):
        arqs = cyclient.get_arqs_for_instance(instance.uuid)
    else:
        arqs = resolved_arqs
    # The events said completed; the ARQs must agree.
    _refuse_unbound(arqs)
    return arqs


def delete_arqs_if_needed(context, instance, arq_uuids=None):
    """By instance when the flavor has a device profile (errors logged),
    then by uuid (errors logged) — as Nova, so the second may log a 404 for
    ARQs the first already deleted.
    """
    cyclient = cyborg.get_client(context)
    if instance.flavor.extra_specs.get(scheduler.DEVICE_PROFILE_SPEC):
        try:
            cyclient.delete_arqs_for_instance(instance.uuid)
        except exception.AcceleratorRequestOpFailed as e:
            LOG.exception('Failed to delete accelerator requests for '
                          'instance %s. Exception: %s', instance.uuid, e)
    if arq_uuids:
        cyclient.delete_arqs_by_uuid(arq_uuids)


def build_accel_info(context, instance, accel_uuids, instance_events,
                     timeout=None):
    """What _build_resources does first: the bound ARQs, or — on any
    failure, timeout included — ARQs deleted and BuildAbortException
    (chained to the cause; never rescheduled).
    """
    try:
        if not accel_uuids:
            return []
        return get_bound_arq_resources(context, instance, accel_uuids,
                                       instance_events, timeout=timeout)
    except (Exception, exception.InstanceEventTimeout) as exc:
        LOG.error('Instance %s: %s', instance.uuid, exc)
        delete_arqs_if_needed(context, instance, accel_uuids)
        raise exception.BuildAbortException(
            instance_uuid=instance.uuid, reason=BUILD_ABORT_REASON) from exc
