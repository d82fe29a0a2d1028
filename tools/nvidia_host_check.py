#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Read-only check of the nvidia driver against this host's GPUs.

What the agent would report (providers, inventories, traits, attach
handles), how long a discovery takes, why a whole-GPU or MIG bind would be
refused here, and what the health monitor and metrics read (telemetry, a
health probe, the XID/ECC event types NVML accepts). It never changes
device state: MIG on demand and passthrough rebinding are switched off for
the run, so the bind paths stop at their read-only gates. Each GPU's MIG
profiles are compared with the shipped model of the same product name,
when there is one.

    python tools/nvidia_host_check.py [--json OUT.json] [--fake MODEL]

--fake MODEL rehearses on a machine without a GPU (fake NVML and sysfs).
"""

import argparse
import glob
import json
import os
import sys
import tempfile
import time

from cyborg.conf import CONF
from cyborg.drivers import base
from cyborg.drivers.nvidia import backend as nvml
from cyborg.drivers.nvidia import driver as nvidia

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


def refusals(drv, gpus):
    out = {}
    for gpu in gpus:
        for name, group in REQUESTS.items():
            try:
                drv.prepare(gpu.address, {'uuid': 'check', 'attach_info': '{}',
                                          'attach_type': 'PCI',
                                          'request_group': group})
                reason = 'would bind (state may have changed!)'
            except base.PrepareError as e:
                reason = str(e)
            out['%s %s' % (gpu.address, name)] = reason
    return out


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
    modes = [(g.mig_current, g.mig_pending) for g in gpus]
    models = shipped_models()
    drv = nvidia.NvidiaDriver(backend=backend)
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
        'refusals': refusals(drv, gpus),
    }
    report['health'] = {g.address: health(backend, g.uuid) for g in gpus}
    report['state_unchanged'] = modes == [
        (g.mig_current, g.mig_pending) for g in backend.gpus()]
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
    return '\n'.join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--json', metavar='PATH')
    parser.add_argument('--fake', metavar='MODEL')
    args = parser.parse_args(argv)
    CONF([], project='cyborg')
    CONF.set_override('enable_mig_on_demand', False, group='nvidia')
    CONF.set_override('rebind_for_passthrough', False, group='nvidia')
    host = None
    if args.fake:
        from cyborg_emulators.nvidia import fake_sysfs
        host = fake_sysfs.FakeGpuHost({'gpus': [{
            'model': args.fake, 'pci_address': '0000:00:06.0'}]},
            root=tempfile.mkdtemp(prefix='nvidia-check-'))
        host.install()
        CONF.set_override('sysfs_root', host.root, group='nvidia')
    try:
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
