"""cyborg-aio's demo: device profiles, instances booted as Nova would boot
them, and what the guest would get.

Demo instances have fixed uuids (derived from their names), so a second
run on the same state deletes the first run's instances and boots them
again instead of piling up allocations.
"""

import json
import os
import time
import uuid

from keystoneauth1 import loading as ks_loading
from oslo_log import log

from nova_cyborg_client import conf as nova_conf
from nova_cyborg_client import context as nova_context
from nova_cyborg_client import flow
from nova_cyborg_client import scheduler

LOG = log.getLogger(__name__)

PROFILES = {
    'demo-gpu': [{'resources:PGPU': '1',
                  'trait:CUSTOM_NVIDIA_2335': 'required'}],
    'demo-fpga': [{'resources:FPGA': '2',
                   'trait:CUSTOM_FAKE_DEVICE': 'required'}],
    'demo-gpu-fpga': [{'resources:PGPU': '1',
                       'trait:CUSTOM_GPU_NVIDIA': 'required'},
                      {'resources:FPGA': '1',
                       'trait:CUSTOM_FAKE_DEVICE': 'required'}],
}
# (instance name, profile), booted in this order.
INSTANCES = (('demo-gpu-1', 'demo-gpu'), ('demo-fpga-1', 'demo-fpga'),
             ('demo-gpu-fpga-1', 'demo-gpu-fpga'))
# On a host of NVIDIA GPUs (cyborg-aio --host-spec .../h200x2.yaml): one
# whole H200 for a VM, then MIG instances of several sizes, with the
# shipped profiles of etc/cyborg/device-profiles.
GPU_INSTANCES = (('demo-h200-whole-1', 'h200-whole'),
                 ('demo-mig-3g-1', 'h200-mig-3g-71gb'),
                 ('demo-mig-2g-1', 'h200-mig-2g-35gb'),
                 ('demo-mig-1g-1', 'h200-mig-1g-18gb'),
                 ('demo-mig-1g-2', 'h200-mig-1g-18gb'))
PROFILES_DIR = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'etc', 'cyborg', 'device-profiles')
_NAMESPACE = uuid.UUID('5b0a3a4e-3c51-4f0c-9d0e-6a1f6e0d2c11')
BINDING_TIMEOUT = 60
RELEASE_GRACE = 1.0


def instance_uuid(name):
    return str(uuid.uuid5(_NAMESPACE, name))


def shipped_profile(name):
    """The groups of etc/cyborg/device-profiles/<name>.json."""
    with open(os.path.join(PROFILES_DIR, name + '.json')) as f:
        return json.load(f)[0]['groups']


def gpu_plan():
    """(profiles, instances) of the NVIDIA demo."""
    return ({p: shipped_profile(p) for _, p in GPU_INSTANCES},
            GPU_INSTANCES)


def ensure_profiles(context, conf=None, profiles=PROFILES):
    """Create the profiles that do not exist yet; returns their names."""
    conf = conf or nova_conf.CONF
    auth = context.get_auth_plugin()
    adapter = ks_loading.load_adapter_from_conf_options(
        conf, nova_conf.CYBORG_GROUP, auth=auth, raise_exc=False,
        session=ks_loading.load_session_from_conf_options(
            conf, nova_conf.CYBORG_GROUP, auth=auth))
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


def run(receiver, api_url, placement_url, out, conf=None,
        binding_timeout=BINDING_TIMEOUT, plan=None):
    """Boot the demo instances and print their <hostdev>s and ARQs to
    `out`. True if all booted; failures are printed, never raised.
    plan: (profiles, instances); the fake GPU/FPGA host's by default."""
    profiles, instances = plan or (PROFILES, INSTANCES)
    conf = conf or nova_conf.CONF
    flow.configure(conf, api_url, placement_url)
    context = nova_context.RequestContext()
    runner = flow.FlowRunner(receiver, context, conf,
                             binding_timeout=binding_timeout)

    def say(text=''):
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
    for name, _ in instances:
        runner.delete(instance_uuid(name))
    time.sleep(RELEASE_GRACE)
    for name, profile in instances:
        uuid_ = instance_uuid(name)
        flavor = scheduler.Flavor(
            name='demo.%s' % profile,
            extra_specs={scheduler.DEVICE_PROFILE_SPEC: profile})
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
    if arqs:
        say(flow.arq_table(arqs))
    say('demo: %d of %d instance(s) booted' % (booted, len(instances)))
    return booted == len(instances)
