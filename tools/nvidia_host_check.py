#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Check of the nvidia driver against this host's GPUs; read-only unless
--mutate is given.

Read-only (the default): what the agent would report (providers,
inventories, traits, attach handles), how long a discovery takes, what a
whole-GPU or MIG bind would do or why it would be refused here (worked
out without binding: no MIG mode change, no GPU instance, no rebind), and
what the health monitor and metrics read (telemetry, a health probe, the
XID/ECC event types NVML accepts).  The whole GPU/compute-instance state
(MIG modes, every GI and CI with its MIG UUID, kernel drivers) is read
before and after and compared: exit status 1 if anything changed.  Each
GPU's MIG profiles are compared with the shipped model of the same
product name, when there is one.

--mutate --gpu ADDRESS --fixture OUT.json: GPU-to-VM contract §6 on one
idle GPU the operator owns (tools/nvidia_mig_probe.py; under 5 minutes,
the GPU left as found): MIG on with its activationStatus, every profile
at every placement, automatic placement, an overlap, destroy with a CI,
the event mask, MIG back off.  The fixture is what the fake NVML's tests
replay (tests/fixtures/nvml/*-mutate.json).

    python tools/nvidia_host_check.py [--json OUT.json] [--fake MODEL]
    python tools/nvidia_host_check.py --mutate --gpu 0000:1b:00.0 \\
        --fixture tests/fixtures/nvml/<model>-<driver>-mutate.json

--fake MODEL rehearses on a machine without a GPU (fake NVML and sysfs);
a fixture written over the fake says so (`synthetic`).
"""

import argparse
import glob
import json
import os
import sys
import tempfile
import time

from cyborg.conf import CONF
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import driver as nvidia
from cyborg.drivers.nvidia import mig
from cyborg.drivers.nvidia import resources
from cyborg.drivers.nvidia import state as state_mod

REQUESTS = {
    'whole GPU': {'resources:CUSTOM_GPU_MEM_SLICE': '8'},
    'MIG 3g': {'resources:CUSTOM_GPU_MEM_SLICE': '4',
               'resources:CUSTOM_GPU_COMPUTE_SLICE': '3'},
}


def shipped_models():
    """Product name → MIG profiles of cyborg/drivers/nvidia/models/*."""
    models = {}
    pattern = os.path.join(os.path.dirname(nvml.__file__), 'models', '*.json')
    for path in glob.glob(pattern):
        with open(path) as f:
            device = json.load(f)['devices'][0]
        models[device['name']] = nvml.profiles_from_capture(device)
    return models


def timed_discoveries(drv, count=20):
    times = []
    for _ in range(count):
        start = time.perf_counter()
        devices = drv.discover()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return devices, {'p50_ms': times[len(times) // 2], 'max_ms': times[-1],
                     'n': count}


def would_bind(drv, gpu):
    """What a bind of each REQUESTS entry would do on `gpu`, worked out
    from the same rules the driver applies, without binding anything.
    """
    out = {}
    instances = drv.state.instances(gpu)
    slots = state_mod.slots(gpu, instances)
    driver = drv.sysfs.driver(gpu.address)
    for name, group in REQUESTS.items():
        vector = resources.request_vector(group)
        slices = vector.get(resources.MEM_SLICE)
        if not gpu.mig_capable or slices >= mig.slice_count(gpu.profiles):
            if gpu.processes:
                reason = '%d processes use the GPU' % len(gpu.processes)
            elif instances:
                reason = 'MIG instances exist: %s' % state_mod.describe(
                    gpu, slots)
            else:
                reason = 'would bind the whole GPU (on %s)' % driver
        else:
            profile = mig.match_profile(
                gpu.profiles, slices, vector.get(resources.COMPUTE_SLICE),
                vector.get(resources.OFA))
            start = None if profile is None else mig.choose_start(
                profile, slots, gpu.profiles)
            if profile is None:
                reason = 'no MIG profile of this shape'
            elif gpu.mig_current != 1:
                reason = ('MIG mode is off (a bind would ask for it: %s)'
                          % ('[nvidia] enable_mig_on_demand is True'
                             if CONF.nvidia.enable_mig_on_demand
                             else 'enable_mig_on_demand is False'))
            elif start is None:
                reason = 'no free placement for MIG %s (taken: %s)' % (
                    profile.name, state_mod.describe(gpu, slots) or
                    'nothing')
            else:
                reason = 'would create MIG %s at start %d' % (profile.name,
                                                              start)
        out['%s %s' % (gpu.address, name)] = reason
    return out


def snapshot(backend, sysfs):
    """The whole device state: per GPU its kernel driver, MIG mode and
    every GPU instance with its compute instances and MIG UUIDs.
    """
    out = {}
    for gpu in backend.gpus():
        out[gpu.address] = {
            'driver': sysfs.driver(gpu.address),
            'mig_mode': [gpu.mig_current, gpu.mig_pending],
            'instances': sorted(
                [i.gi_id, i.profile_id, i.start, i.size, list(i.ci_ids),
                 list(i.mig_uuids)] for i in (
                    backend.instances(gpu.uuid)
                    if gpu.mig_current == 1 else []))}
    return out


def changes(before, after):
    """What differs between two snapshots, one line each."""
    lines = []
    for address in sorted(set(before) | set(after)):
        b, a = before.get(address), after.get(address)
        if b != a:
            lines.append('%s: %s -> %s' % (address, b, a))
    return lines


def health(backend, uuid):
    """Telemetry, a health probe, and the XID/ECC events NVML lets us
    register (one short wait: events are only read, never caused).
    """
    backend.create_event_set()
    mask = backend.register_events(uuid)
    return {'telemetry': backend.telemetry(uuid),
            'probe': backend.health_probe(uuid), 'event_mask': mask,
            'event_within_500ms': backend.wait_event(500)}


def check():
    backend = nvml.PynvmlBackend()
    backend.open()
    gpus = backend.gpus()
    models = shipped_models()
    drv = nvidia.NvidiaDriver(backend=backend)
    before = snapshot(backend, drv.sysfs)
    devices, timing = timed_discoveries(drv)
    report = {
        'gpus': [dict(vars(g), profiles=[vars(p) for p in g.profiles])
                 for g in gpus],
        'profiles_match_shipped_model': {
            g.address: (set(g.profiles) == set(models[g.name])
                        if g.name in models else None) for g in gpus},
        'discovery': timing,
        'devices': [d.to_dict() for d in devices],
        'instances': {g.uuid: [vars(i) for i in backend.instances(g.uuid)]
                      for g in gpus},
        'refusals': {k: v for g in gpus
                     for k, v in would_bind(drv, g).items()},
    }
    report['health'] = {g.address: health(backend, g.uuid) for g in gpus}
    report['state_before'] = before
    report['changes'] = changes(before, snapshot(backend, drv.sysfs))
    report['state_unchanged'] = not report['changes']
    report['kernel_drivers'] = {g.address: drv.sysfs.driver(g.address)
                                for g in gpus}
    return report


def summary(report):
    lines = ['discovery: p50 %.1f ms, max %.1f ms over %d'
             % (report['discovery']['p50_ms'], report['discovery']['max_ms'],
                report['discovery']['n'])]
    for device in report['devices']:
        dep = device['deployables'][0]
        lines.append('%s %s: %s' % (dep['name'], device['model'], ', '.join(
            '%s=%d' % (rc, inv['total'])
            for rc, inv in dep['inventories'].items())))
        lines.append('  traits: ' + ' '.join(sorted(dep['traits'])))
        lines.append('  handles: ' + ' '.join(
            h['attach_type'] for h in dep['attach_handles']))
    for key, value in report['profiles_match_shipped_model'].items():
        lines.append('%s MIG profiles match the shipped model: %s'
                     % (key, value))
    for key, reason in report['refusals'].items():
        lines.append('%s: %s' % (key, reason))
    for address, h in report['health'].items():
        lines.append('%s health probe: %s; event mask %d; telemetry: %s'
                     % (address, h['probe'], h['event_mask'],
                        h['telemetry']))
    lines.append('device state unchanged: %s' % report['state_unchanged'])
    lines += ['  changed: ' + line for line in report['changes']]
    return '\n'.join(lines)


def mutate(address, fixture, synthetic, deadline_s):
    """The --mutate run on one GPU; writes the fixture."""
    import pynvml as N

    try:
        from tools import nvidia_mig_probe
    except ImportError:     # run as a script: its directory is on the path
        import nvidia_mig_probe

    backend = nvml.PynvmlBackend()
    backend.open()
    h = N.nvmlDeviceGetHandleByPciBusId(address)
    result = nvidia_mig_probe.run(h, deadline_s)
    result.update(
        synthetic=synthetic,
        source=('tools/nvidia_host_check.py --mutate over the FAKE NVML '
                '(cyborg_emulators): SYNTHETIC, not a capture of a real '
                'GPU' if synthetic else
                'tools/nvidia_host_check.py --mutate on a real GPU'),
        gpu=N.nvmlDeviceGetName(h),
        driver_version=N.nvmlSystemGetDriverVersion(),
        virtualization_mode=N.nvmlDeviceGetVirtualizationMode(h))
    with open(fixture, 'w') as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write('\n')
    print('%s: %s in %.1f s -> %s' % (
        address, result.get('stopped', 'done'), result['elapsed_s'],
        fixture))
    return 0 if 'stopped' not in result else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--json', metavar='PATH')
    parser.add_argument('--fake', metavar='MODEL')
    parser.add_argument('--fake-mig-on', action='store_true',
                        help='the fake GPU starts with MIG mode on')
    parser.add_argument('--mutate', action='store_true',
                        help='change the GPU given by --gpu (contract §6)')
    parser.add_argument('--gpu', metavar='PCI_ADDRESS')
    parser.add_argument('--fixture', metavar='PATH')
    parser.add_argument('--deadline', type=float, default=270.0,
                        help='seconds the --mutate run may take')
    args = parser.parse_args(argv)
    if args.mutate and not (args.gpu and args.fixture):
        parser.error('--mutate needs --gpu and --fixture')
    CONF([], project='cyborg')
    CONF.set_override('enable_mig_on_demand', False, group='nvidia')
    CONF.set_override('rebind_for_passthrough', False, group='nvidia')
    host = None
    if args.fake:
        from cyborg_emulators.nvidia import fake_sysfs
        host = fake_sysfs.FakeGpuHost({'gpus': [{
            'model': args.fake, 'pci_address': '0000:00:06.0',
            'mig_mode': int(args.fake_mig_on)}]},
            root=tempfile.mkdtemp(prefix='nvidia-check-'))
        host.install()
        CONF.set_override('sysfs_root', host.root, group='nvidia')
    try:
        if args.mutate:
            return mutate(args.gpu, args.fixture, bool(args.fake),
                          args.deadline)
        report = check()
    finally:
        if host is not None:
            host.uninstall()
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(report, f, indent=1, default=list)
    print(summary(report))
    return 0 if report['state_unchanged'] else 1


if __name__ == '__main__':
    sys.exit(main())
