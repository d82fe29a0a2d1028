"""cyborg-aio's demo: device profiles, instances booted as Nova would boot
them, and what the guest would get.

Demo instances have fixed uuids (derived from their names), so a second
run on the same state deletes the first run's instances and boots them
again instead of piling up allocations.
"""

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
_NAMESPACE = uuid.UUID('5b0a3a4e-3c51-4f0c-9d0e-6a1f6e0d2c11')
BINDING_TIMEOUT = 60


def instance_uuid(name):
    return str(uuid.uuid5(_NAMESPACE, name))


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
        binding_timeout=BINDING_TIMEOUT):
    """Boot the demo instances and print their <hostdev>s and ARQs to
    `out`. True if all booted; failures are printed, never raised."""
    conf = conf or nova_conf.CONF
    flow.configure(conf, api_url, placement_url)
    context = nova_context.RequestContext()
    runner = flow.FlowRunner(receiver, context, conf,
                             binding_timeout=binding_timeout)

    def say(text=''):
        print(text, file=out, flush=True)

    try:
        created = ensure_profiles(context, conf)
    except Exception as e:
        say('demo: cannot create device profiles: %s' % e)
        return False
    say('demo: device profiles %s%s' % (', '.join(PROFILES), (
        ' (created %s)' % ', '.join(created)) if created else ''))
    arqs = []
    booted = 0
    for name, profile in INSTANCES:
        uuid_ = instance_uuid(name)
        runner.delete(uuid_)  # what a previous run left
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
    say('demo: %d of %d instance(s) booted' % (booted, len(INSTANCES)))
    return booted == len(INSTANCES)
