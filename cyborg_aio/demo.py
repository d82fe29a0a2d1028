# SPDX-License-Identifier: Apache-2.0
"""cyborg-aio's demo: device profiles, instances booted as Nova would boot
them, and what the guest would get.

Demo instances have fixed uuids (derived from their names), so a second
run on the same state deletes the first run's instances and boots them
again instead of piling up allocations.
"""

import contextlib
import json
import logging
import time
import uuid

from keystoneauth1 import loading as ks_loading
from oslo_log import log
import requests

from cyborg import conf as cyborg_conf
from cyborg import data
from nova_cyborg_client import conf as nova_conf
from nova_cyborg_client import context as nova_context
from nova_cyborg_client import flow
from nova_cyborg_client import mdev
from nova_cyborg_client import placement as nova_placement
from nova_cyborg_client import scheduler

LOG = log.getLogger(__name__)

PROFILES = {
    'demo-fpga': [{'resources:FPGA': '2',
                   'trait:CUSTOM_FAKE_DEVICE': 'required'}],
    'demo-gpu-fpga': [{'resources:PGPU': '1',
                       'trait:CUSTOM_GPU_NVIDIA': 'required'},
                      {'resources:FPGA': '1',
                       'trait:CUSTOM_FAKE_DEVICE': 'required'}],
}
# (instance name, profile), booted in this order. They hold one of the
# default host's two GPUs and three of its four FPGA functions: the other
# GPU is left for the README's own steps (nova-cyborg-flow --profile
# one-h200 on the same state).
INSTANCES = (('demo-fpga-1', 'demo-fpga'),
             ('demo-gpu-fpga-1', 'demo-gpu-fpga'))
# Instances earlier versions of the demo booted: deleted as the demo's
# own when it runs on their state.
RETIRED_INSTANCES = ('demo-gpu-1',)
# On a host of NVIDIA GPUs, with the shipped profiles (cyborg/data/
# device-profiles), what a VM can get there. Data-center driver
# (cyborg-aio --host-spec .../h200-dc.yaml): a whole H200; a vGPU profile
# finds no candidate. vGPU Manager (.../h200-vgpu.yaml): a time-sliced
# vGPU first (its GPU then takes no MIG-backed type), then MIG-backed
# vGPUs of two sizes on the other H200.
GPU_INSTANCES = (('demo-h200-whole-1', 'h200-whole'),)
GPU_REFUSED = (('demo-vgpu-on-dc-1', 'h200-vgpu-1g-18gb'),)
VGPU_INSTANCES = (('demo-vgpu-70c-1', 'h200-vgpu-70c'),
                  ('demo-vgpu-3g-1', 'h200-vgpu-3g-71gb'),
                  ('demo-vgpu-1g-1', 'h200-vgpu-1g-18gb'),
                  ('demo-vgpu-1g-2', 'h200-vgpu-1g-18gb'))
_NAMESPACE = uuid.UUID('5b0a3a4e-3c51-4f0c-9d0e-6a1f6e0d2c11')
BINDING_TIMEOUT = 60
RELEASE_TIMEOUT = 30


def instance_uuid(name):
    return str(uuid.uuid5(_NAMESPACE, name))


def shipped_profile(name):
    """The groups of the shipped device profile `name`."""
    return data.profile(name)[0]['groups']


def gpu_plan(host_spec=None):
    """(profiles, instances, refused) of the NVIDIA demo on a fake host
    spec: vGPUs where the GPUs run under the vGPU Manager, else a whole
    GPU (and a vGPU profile that must find no candidate).
    """
    gpus = ((host_spec or {}).get('nvidia', host_spec or {}) or {}).get(
        'gpus', [])
    if any(g.get('vgpu_manager') is not None for g in gpus):
        instances, refused = VGPU_INSTANCES, ()
    else:
        instances, refused = GPU_INSTANCES, GPU_REFUSED
    return ({p: shipped_profile(p) for _, p in instances + refused},
            instances, refused)


def _cyborg(context, conf):
    auth = context.get_auth_plugin()
    return ks_loading.load_adapter_from_conf_options(
        conf, nova_conf.CYBORG_GROUP, auth=auth, raise_exc=False,
        session=ks_loading.load_session_from_conf_options(
            conf, nova_conf.CYBORG_GROUP, auth=auth))


def ensure_profiles(context, conf=None, profiles=PROFILES):
    """Create the profiles that do not exist yet; returns their names."""
    conf = conf or nova_conf.CONF
    adapter = _cyborg(context, conf)
    created = []
    for name, groups in profiles.items():
        resp = adapter.get('/device_profiles', params={'name': name})
        if resp.status_code == 200 and resp.json().get('device_profiles'):
            continue
        resp = adapter.post('/device_profiles', json=[{
            'name': name, 'groups': groups,
            'description': 'cyborg-aio demo profile'}])
        if resp.status_code != 201:
            raise RuntimeError('creating device profile %s: HTTP %s %s'
                               % (name, resp.status_code, resp.text[:300]))
        created.append(name)
    return created


def _wait_released(context, conf, timeout=RELEASE_TIMEOUT):
    """Until the agents have released what deleted instances held (their
    release passes run after the delete answered): every device Unclaimed
    again, as the lifecycle API (2.4) shows it.
    """
    adapter = _cyborg(context, conf)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        resp = adapter.get('/devices', headers={
            'OpenStack-API-Version': 'accelerator 2.4'})
        if resp.status_code == 200 and all(
                d['management_state'] == 'Unclaimed'
                for d in resp.json()['devices']):
            return True
        time.sleep(0.2)
    LOG.warning('Devices still held %ds after deleting the demo '
                'instances; booting anyway', timeout)
    return False


def device_table(context, conf):
    """The devices with their lifecycle (microversion 2.4), as text."""
    resp = _cyborg(context, conf).get(
        '/devices', headers={'OpenStack-API-Version': 'accelerator 2.4'})
    rows = [('DEVICE', 'MODEL', 'GPU', 'MODE', 'PHASE', 'MANAGEMENT')]
    for dev in resp.json()['devices']:
        board = json.loads(dev['std_board_info'] or '{}')
        # The whole GPU UUID: two boards of one host may share a prefix.
        rows.append((dev['uuid'][:8], dev['model'],
                     board.get('uuid', '-'), dev['mode'] or '-',
                     dev['phase'], dev['management_state']))
    return flow.table(rows)


def metrics_lines(metrics_url):
    """What the agent's /metrics says, parsed as Prometheus would."""
    from prometheus_client import parser

    text = requests.get(metrics_url, timeout=10).text
    lines = []
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if family.name == 'cyborg_device_phase' and sample.value:
                lines.append('%s phase %s' % (labels['device'],
                                              labels['phase']))
            elif family.name == 'cyborg_device_management_state' and \
                    sample.value:
                lines.append('%s management state %s'
                             % (labels['device'], labels['state']))
            elif family.name == 'cyborg_gpu_mig_instances' and sample.value:
                lines.append('%s MIG %s instances: %d' % (
                    labels['device'], labels['profile'], sample.value))
    return sorted(lines)


def run(receiver, api_url, placement_url, out, conf=None,
        binding_timeout=BINDING_TIMEOUT, plan=None, metrics_url=None,
        mdev_creator=None, stopping=None):
    """Boot the demo instances and print their <hostdev>s and ARQs to
    `out`. True if all booted; failures are printed, never raised.
    plan: (profiles, instances[, refused]); the fake GPU/FPGA host's by
    default. `refused` instances must find no allocation candidate.
    mdev_creator: what makes the mdevs of MDEV handles (the kernel's
    interface under [nvidia] sysfs_root by default).
    stopping: True once the services are stopping under the demo
    (Ctrl-C): from then on it prints one line and nothing of the failures
    that follow (refused connections), and its flow logs nothing on the
    terminal (the log file keeps it).
    """
    stopping = stopping or (lambda: False)
    quiet = _WhileStopping(stopping)
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        return _run(receiver, api_url, placement_url, out, conf,
                    binding_timeout, plan, metrics_url, mdev_creator,
                    stopping)
    except Exception:
        if not stopping():
            raise
        return False
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)
        if stopping():
            print('demo: interrupted, cyborg-aio is stopping', file=out,
                  flush=True)


class _WhileStopping(logging.Filter):
    """Drops the Nova side's records once the services stop under the
    demo: its boots then fail on refused connections, by our doing.
    """

    def __init__(self, stopping):
        super().__init__()
        self.stopping = stopping

    def filter(self, record):
        return not (record.name.startswith('nova_cyborg_client')
                    and self.stopping())


def _run(receiver, api_url, placement_url, out, conf, binding_timeout, plan,
         metrics_url, mdev_creator, stopping):
    profiles, instances, *rest = plan or (PROFILES, INSTANCES)
    refused = tuple(rest[0]) if rest else ()
    conf = conf or nova_conf.CONF
    flow.configure(conf, api_url, placement_url)
    context = nova_context.RequestContext()
    # Nova's libvirt driver makes the mdevs of MDEV handles on this host:
    # the sysfs the agent's nvidia driver reads (the fake host's tree).
    runner = flow.FlowRunner(
        receiver, context, conf, binding_timeout=binding_timeout,
        mdev_creator=mdev_creator or mdev.SysfsMdevCreator(
            cyborg_conf.CONF.nvidia.sysfs_root))

    def say(text=''):
        if not stopping():
            print(text, file=out, flush=True)

    try:
        created = ensure_profiles(context, conf, profiles)
    except Exception as e:
        say('demo: cannot create device profiles: %s' % e)
        return False
    say('demo: device profiles %s%s' % (', '.join(profiles), (
        ' (created %s)' % ', '.join(created)) if created else ''))
    arqs = []
    booted = 0
    # What a previous run left goes first: the agent releases the devices
    # (and republishes what fits) just after the ARQs are deleted.
    for name in [n for n, _ in instances + refused] + list(
            RETIRED_INSTANCES):
        runner.delete(instance_uuid(name))
    _wait_released(context, conf)
    for name, profile in instances:
        uuid_ = instance_uuid(name)
        extra_specs = {scheduler.DEVICE_PROFILE_SPEC: profile}
        if len(profiles[profile]) > 1:
            # Nova warns when a flavor leaves two numbered request groups
            # without a policy; each group may land on any provider.
            extra_specs['group_policy'] = 'none'
        flavor = scheduler.Flavor(name='demo.%s' % profile,
                                  extra_specs=extra_specs)
        try:
            result = runner.boot(flavor, instance_uuid=uuid_, name=name)
        except flow.FlowError as e:
            say('demo: instance %s (%s) with %s FAILED: %s'
                % (name, uuid_, profile, e))
            continue
        booted += 1
        arqs.extend(result.arqs)
        say('demo: instance %s (%s) with %s on host %s:'
            % (name, uuid_, profile, result.instance.host))
        say(result.devices_xml)
    refusals = 0
    for name, profile in refused:
        flavor = scheduler.Flavor(
            name='demo.%s' % profile,
            extra_specs={scheduler.DEVICE_PROFILE_SPEC: profile})
        try:
            with _expected_failure(instance_uuid(name)):
                runner.boot(flavor, instance_uuid=instance_uuid(name),
                            name=name)
        except flow.FlowError as e:
            refusals += 1
            say('demo: instance %s with %s refused, as it must be on this '
                'host: %s' % (name, profile, e))
            continue
        say('demo: instance %s with %s booted, but this host cannot give '
            'it to a VM' % (name, profile))
    if arqs:
        say(flow.arq_table(arqs))
    if metrics_url is not None:
        _lifecycle_view(say, context, conf, metrics_url)
    say('demo: %d of %d instance(s) booted' % (booted, len(instances)))
    return booted == len(instances) and refusals == len(refused)


class _ExpectedFailure(logging.Filter):
    """Drops the records of a boot the demo makes to show it refused (the
    flow runner's "Boot of instance X failed", the scheduler's failed
    candidates query while that boot runs): the refusal is printed as the
    demo's output, not logged as an error on the terminal.
    """

    def __init__(self, instance_uuid):
        super().__init__()
        self.prefixes = ('Boot of instance %s failed' % instance_uuid,
                         'Failed to retrieve allocation candidates')

    def filter(self, record):
        return not record.getMessage().startswith(self.prefixes)


@contextlib.contextmanager
def _expected_failure(instance_uuid):
    loggers = [logging.getLogger(flow.__name__),
               logging.getLogger(nova_placement.__name__)]
    expected = _ExpectedFailure(instance_uuid)
    for logger in loggers:
        logger.addFilter(expected)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(expected)


def _lifecycle_view(say, context, conf, metrics_url):
    try:
        say('demo: devices (microversion 2.4):')
        say(device_table(context, conf))
        say('demo: agent metrics at %s:' % metrics_url)
        for line in metrics_lines(metrics_url):
            say('  ' + line)
    except Exception as e:
        say('demo: cannot show devices and metrics: %s' % e)
