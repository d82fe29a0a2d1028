# SPDX-License-Identifier: Apache-2.0
"""A boot and a delete, doing what Nova's API, scheduler, conductor and
compute do for accelerators, against a real accelerator API and Placement.

Boot: flavor → device profile request groups → GET /allocation_candidates →
claim the first candidate that Placement accepts → instance on that host
(the compute node provider's name) → create ARQs and match them to the
allocated providers → bind in one PATCH → wait for the events → every
handle wired (libvirt.GuestDevices; a handle that cannot be is refused),
the mdevs of MDEV handles created (mdev.MdevCreator) → <hostdev>s.
Every failure ends in FlowError with Nova's message and leaves no ARQ, no
allocation and no mdev behind (the instance is deleted, as a user would
delete an instance in ERROR).

The process must be the Nova the service notifies: its [nova] endpoint
points at this process's events API (events.Receiver served by
server.Server; cyborg-aio does it for its demo). CLI:

  python -m nova_cyborg_client.flow --api URL/v2 --placement URL \
      --profile NAME [--count N] [--listen 127.0.0.1:8774]

Where no nova-compute runs (a smoke test of a distributed deployment),
`--create-compute-node NAME` first creates the compute node's provider
the way nova-compute would (compute_node.ensure); alone, it does only that.
"""

import argparse
import logging
import sys
import uuid as uuidlib

from oslo_log import log

from nova_cyborg_client import compute
from nova_cyborg_client import compute_node
from nova_cyborg_client import conductor
from nova_cyborg_client import conf as nova_conf
from nova_cyborg_client import context as nova_context
from nova_cyborg_client import cyborg
from nova_cyborg_client import events as nova_events
from nova_cyborg_client import exception
from nova_cyborg_client import libvirt
from nova_cyborg_client import mdev as nova_mdev
from nova_cyborg_client import placement as nova_placement
from nova_cyborg_client import scheduler
from nova_cyborg_client import server as nova_server

LOG = log.getLogger(__name__)

NO_CANDIDATES = ('Got no allocation candidates from the Placement API. This '
                 'could be due to insufficient resources or a temporary '
                 'occurrence as compute nodes start up.')
# Candidates tried when claims conflict (Nova's alternates).
MAX_CLAIM_ATTEMPTS = 3


class FlowError(Exception):
    """A boot that failed; `cause` is the Nova exception."""

    def __init__(self, message, instance_uuid, cause):
        super().__init__(message)
        self.instance_uuid = instance_uuid
        self.cause = cause


class BootResult:
    def __init__(self, instance, arqs, provider_mapping, guest):
        self.instance = instance
        self.arqs = arqs
        self.provider_mapping = provider_mapping
        # libvirt.GuestDevices: its mdevs exist now.
        self.guest = guest
        self.hostdevs = guest.hostdevs
        self.mdevs = guest.mdevs

    @property
    def devices_xml(self):
        return self.guest.xml


def describe_failure(exc):
    """Nova's message, with the cause behind a BuildAbortException."""
    message = str(exc)
    cause = exc.__cause__
    if isinstance(exc, exception.BuildAbortException) and cause is not None:
        detail = str(cause) or type(cause).__name__
        if isinstance(cause, exception.InstanceEventFailed):
            detail += ': %s' % cause.event_name
        message += ' (%s)' % detail
    return message


class FlowRunner:
    """Boots and deletes instances as Nova would, receiving the service's
    events through `receiver` (an events.Receiver the service's [nova]
    endpoint reaches).
    """

    def __init__(self, receiver, context=None, conf=None,
                 binding_timeout=None, placement_context=None,
                 mdev_creator=None):
        self.receiver = receiver
        # Creates the mdevs of MDEV attach handles (Nova's _create_mdev)
        # and removes them at delete.
        self.mdev_creator = mdev_creator or nova_mdev.SysfsMdevCreator()
        self.context = context or nova_context.RequestContext()
        # Nova's scheduler and report client call Placement as Nova's
        # service user, not with the user's token; without Keystone both
        # are the same noauth admin.
        self.placement_context = placement_context or self.context
        self.conf = conf or nova_conf.CONF
        self.binding_timeout = binding_timeout

    def _placement(self):
        return nova_placement.PlacementClient(self.placement_context,
                                              self.conf)

    def boot(self, flavor, instance_uuid=None, name=None):
        instance = compute.Instance(
            instance_uuid or str(uuidlib.uuid4()), flavor,
            project_id=self.context.project_id,
            user_id=self.context.user_id, name=name)
        # Known to the events API from now on; no host until claimed.
        self.receiver.instances.add(instance.uuid)
        try:
            return self._boot(instance)
        except Exception as exc:
            LOG.error('Boot of instance %s failed: %s', instance.uuid, exc)
            self.delete(instance.uuid, flavor)
            raise FlowError(describe_failure(exc), instance.uuid,
                            exc) from exc

    def _boot(self, instance):
        flavor = instance.flavor
        placement = self._placement()
        groups = []
        dp_name = flavor.extra_specs.get(scheduler.DEVICE_PROFILE_SPEC)
        if dp_name:
            groups = cyborg.get_device_profile_request_groups(self.context,
                                                              dp_name)
        request = scheduler.ResourceRequest.from_flavor(flavor, groups,
                                                        conf=self.conf)
        candidates, summaries = placement.get_allocation_candidates(request)
        if not candidates:
            raise exception.NoValidHost(reason=NO_CANDIDATES)
        chosen = None
        for candidate in candidates[:MAX_CLAIM_ATTEMPTS]:
            if placement.claim_resources(instance.uuid, candidate,
                                         instance.project_id,
                                         instance.user_id):
                chosen = candidate
                break
        if chosen is None:
            raise exception.NoValidHost(
                reason='Could not claim any of %d allocation candidate(s).'
                % min(len(candidates), MAX_CLAIM_ATTEMPTS))
        host = self._host_of(placement, chosen, summaries)
        instance.host = instance.node = host
        self.receiver.instances.set_host(instance.uuid, host)
        LOG.info('Instance %s claimed on %s', instance.uuid, host)

        scheduler.fill_provider_mapping(groups, chosen)
        rg_rp_map = scheduler.get_request_group_mapping(groups)
        accel_uuids = conductor.create_and_bind_arq_for_instance(
            self.context, instance, instance.node, rg_rp_map)
        arqs = compute.build_accel_info(
            self.context, instance, accel_uuids,
            self.receiver.instance_events, timeout=self.binding_timeout)
        return BootResult(instance, arqs, rg_rp_map, self._spawn(instance,
                                                                 arqs))

    def _spawn(self, instance, arqs):
        """What the libvirt driver does before the guest starts: every ARQ
        wired (AttachHandleNotWirable if one cannot be), the mdevs of MDEV
        handles created. On failure boot() deletes the instance, which
        removes the mdevs created so far.
        """
        guest = libvirt.GuestDevices(instance.uuid, arqs)
        for mdev in guest.mdevs:
            self.mdev_creator.create(mdev)
        return guest

    def _remove_mdevs(self, instance_uuid):
        try:
            arqs = cyborg.get_client(self.context).get_arqs_for_instance(
                instance_uuid)
        except exception.AcceleratorRequestOpFailed as e:
            LOG.debug('No ARQs, so no mdevs, for instance %s: %s',
                      instance_uuid, e)
            return
        for mdev in libvirt.mdevs_of(arqs):
            try:
                self.mdev_creator.remove(mdev)
            except Exception:
                LOG.exception('Removing mdev %s of instance %s failed',
                              mdev.uuid, instance_uuid)

    @staticmethod
    def _host_of(placement, allocation_request, summaries):
        """The compute node's name: the root of the allocated tree."""
        rp_uuid = next(iter(allocation_request['allocations']))
        root = summaries.get(rp_uuid, {}).get('root_provider_uuid', rp_uuid)
        return placement.get_provider(root)['name']

    def delete(self, instance_uuid, flavor=None):
        """Remove the mdevs of its MDEV handles (the guest is gone), delete
        the instance's ARQs (by instance), then its allocations, then
        forget it. Errors are logged: a delete goes as far as it can.
        """
        self._remove_mdevs(instance_uuid)
        try:
            if flavor is None:
                # Flavor unknown: by instance anyway (idempotent).
                cyborg.get_client(self.context).delete_arqs_for_instance(
                    instance_uuid)
            else:
                compute.delete_arqs_if_needed(
                    self.context, compute.Instance(instance_uuid, flavor))
        except Exception:
            LOG.exception('Deleting ARQs of instance %s failed',
                          instance_uuid)
        try:
            self._placement().delete_allocation_for_instance(instance_uuid)
        except Exception:
            LOG.exception('Deleting allocations of instance %s failed',
                          instance_uuid)
        self.receiver.instances.remove(instance_uuid)
        self.receiver.instance_events.clear_events_for_instance(instance_uuid)


# -- presentation -------------------------------------------------------------

def _handle(arq):
    info = arq.get('attach_handle_info') or {}
    handle_type = arq.get('attach_handle_type') or '-'
    try:
        address = libvirt.sysfs_address(info)
    except Exception:
        return handle_type
    if handle_type == libvirt.MDEV:
        return 'MDEV %s on %s, mdev %s' % (
            info.get('asked_type'), address, arq.get('attach_handle_uuid'))
    text = '%s %s' % (handle_type, address)
    if str(info.get('managed', '')).lower() in ('no', 'false'):
        text += ' managed=no'
    if info.get('vgpu_type'):
        text += ' vgpu_type %s' % info['vgpu_type']
    return text


def arq_table(arqs):
    """A compact text table of ARQs."""
    header = ('INSTANCE', 'ARQ', 'STATE', 'PROFILE', 'GROUP', 'HOST',
              'DEVICE RP', 'ATTACH HANDLE')
    rows = [header]
    for arq in arqs:
        rows.append((str(arq.get('instance_uuid') or '-')[:8],
                     arq['uuid'][:8], arq['state'],
                     arq['device_profile_name'],
                     str(arq['device_profile_group_id']),
                     arq.get('hostname') or '-',
                     str(arq.get('device_rp_uuid') or '-')[:8],
                     _handle(arq)))
    return table(rows)


def table(rows):
    """Rows of strings as left-aligned text columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return '\n'.join('  '.join(cell.ljust(width) for cell, width
                               in zip(row, widths)).rstrip()
                     for row in rows)


# -- CLI ----------------------------------------------------------------------

def _extra_spec(text):
    key, sep, value = text.partition('=')
    if not sep or not key:
        raise argparse.ArgumentTypeError('expected KEY=VALUE, got %r' % text)
    return key, value


def _listen(text):
    host, sep, port = text.rpartition(':')
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError('expected HOST:PORT, got %r' % text)
    return host or '127.0.0.1', int(port)


def _parser():
    parser = argparse.ArgumentParser(
        prog='nova-cyborg-flow',
        description='Boot (or delete) instances with accelerators the way '
                    'Nova does, against an accelerator API and Placement. '
                    'This process serves Nova\'s POST '
                    '/os-server-external-events on --listen: the service\'s '
                    '[nova] endpoint must point there (e.g. cyborg-aio '
                    '--nova-endpoint http://127.0.0.1:8774 --no-demo).')
    parser.add_argument('--api',
                        help='Accelerator API endpoint, e.g. '
                             'http://127.0.0.1:6666/v2 (needed to boot or '
                             'delete).')
    parser.add_argument('--placement', required=True,
                        help='Placement endpoint, e.g. http://127.0.0.1:8778')
    parser.add_argument('--token', default=nova_context.NOAUTH_TOKEN,
                        help='Token sent to both (default: %(default)s, '
                             'an admin for noauth services).')
    parser.add_argument('--listen', type=_listen,
                        default=('127.0.0.1', 8774), metavar='HOST:PORT',
                        help='Where to serve the events API (default: '
                             '127.0.0.1:8774; port 0 picks one).')
    parser.add_argument('--profile', help='Device profile to boot with '
                                          '(flavor extra spec '
                                          'accel:device_profile).')
    parser.add_argument('--count', type=int, default=1,
                        help='Instances to boot (default: %(default)s).')
    parser.add_argument('--vcpus', type=int, default=1)
    parser.add_argument('--ram', type=int, default=512, help='MiB')
    parser.add_argument('--disk', type=int, default=1, help='GiB')
    parser.add_argument('--extra-spec', type=_extra_spec, action='append',
                        default=[], metavar='KEY=VALUE',
                        help='More flavor extra specs (e.g. '
                             'group_policy=isolate); may be repeated.')
    parser.add_argument('--timeout', type=int,
                        default=nova_conf.CONF.arq_binding_timeout,
                        help='arq_binding_timeout, seconds (default: '
                             '%(default)s).')
    parser.add_argument('--sysfs-root', default='/sys',
                        help='sysfs where the mdevs of MDEV attach handles '
                             'are created and removed, as Nova does '
                             '(default: %(default)s, which needs root; '
                             'cyborg-aio\'s fake tree is STATE_DIR/'
                             'fake-sysfs).')
    parser.add_argument('--cleanup', action='store_true',
                        help='Delete the booted instances before exiting.')
    parser.add_argument('--verbose', action='store_true',
                        help='Log at INFO level (default: warnings).')
    parser.add_argument('--create-compute-node', metavar='NAME',
                        help='First create (or complete) the compute node '
                             'provider NAME in Placement as nova-compute '
                             'would: VCPU/MEMORY_MB/DISK_GB inventory and '
                             'the COMPUTE_ACCELERATORS trait. For a '
                             'deployment without nova-compute; NAME is the '
                             'agent\'s [agent] resource_provider_name or '
                             '[DEFAULT] host. Alone, it does only that.')
    parser.add_argument('--delete', action='append', default=[],
                        metavar='INSTANCE_UUID',
                        help='Delete this instance (ARQs and allocations) '
                             'instead of booting; may be repeated.')
    return parser


def configure(conf, api, placement_url):
    conf.set_override('endpoint_override', api, group=nova_conf.CYBORG_GROUP)
    conf.set_override('endpoint_override', placement_url,
                      group=nova_conf.PLACEMENT_GROUP)


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not (args.delete or args.profile or args.create_compute_node):
        print('nova-cyborg-flow: give --profile, --delete or '
              '--create-compute-node', file=sys.stderr)
        return 2
    if (args.delete or args.profile) and not args.api:
        print('nova-cyborg-flow: --api is needed to boot or delete',
              file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else
                        logging.WARNING, stream=sys.stderr,
                        format='%(asctime)s %(levelname)s %(name)s: '
                               '%(message)s')
    configure(nova_conf.CONF, args.api, args.placement)
    context = nova_context.RequestContext(auth_token=args.token)
    if args.create_compute_node:
        try:
            rp_uuid, created = compute_node.ensure(
                nova_placement.PlacementClient(context),
                args.create_compute_node)
        except nova_placement.PlacementError as e:
            print('nova-cyborg-flow: %s' % e, file=sys.stderr)
            return 1
        print('compute node %s: provider %s (%s)'
              % (args.create_compute_node, rp_uuid,
                 'created' if created else 'found'), flush=True)
        if not (args.delete or args.profile):
            return 0
    receiver = nova_events.Receiver()
    runner = FlowRunner(
        receiver, context, binding_timeout=args.timeout,
        mdev_creator=nova_mdev.SysfsMdevCreator(args.sysfs_root))
    if args.delete:
        for instance_uuid in args.delete:
            runner.delete(instance_uuid)
            print('deleted %s' % instance_uuid)
        return 0
    try:
        server = nova_server.Server(receiver.app, *args.listen).start()
    except OSError as e:
        print('nova-cyborg-flow: cannot listen on %s:%s: %s'
              % (args.listen + (e,)), file=sys.stderr)
        return 1
    print('events API: %s' % server.url, flush=True)
    flavor = scheduler.Flavor(
        vcpus=args.vcpus, memory_mb=args.ram, root_gb=args.disk,
        extra_specs=dict([(scheduler.DEVICE_PROFILE_SPEC, args.profile)]
                         + args.extra_spec))
    status = 0
    booted = []
    try:
        for _ in range(args.count):
            try:
                result = runner.boot(flavor)
            except FlowError as e:
                print('boot failed: %s' % e, flush=True)
                status = 1
                continue
            booted.append(result)
            print('instance %s on %s'
                  % (result.instance.uuid, result.instance.host))
            print(result.devices_xml)
        arqs = [arq for result in booted for arq in result.arqs]
        if arqs:
            print(arq_table(arqs), flush=True)
        if args.cleanup:
            for result in booted:
                runner.delete(result.instance.uuid, flavor)
    finally:
        server.stop()
    return status


if __name__ == '__main__':
    sys.exit(main())
