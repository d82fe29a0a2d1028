#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""How often two MIG claims that Placement grants against one publication
cannot both be placed: exhaustive over every layout of instances a GPU
model can hold and every pair of profiles, each bound in both orders with
the driver's packing policy.

    python tools/mig_race_figures.py h200 [a100-80gb ...] [--baseline]

--baseline publishes as before issue 17 (no reservation of what no new
instance can reach), for comparison.  "avoidable" counts failures where
some pair of placements would have held both (a bad choice of ours);
"unavoidable" those where none would (the limit of Placement's counts);
"feasible refused" pairs that could be placed but Placement would refuse.
Takes a few minutes per model.
"""

import argparse
import itertools
import sys
import time

from cyborg.drivers.nvidia import backend
from cyborg.drivers.nvidia import mig
from cyborg.drivers.nvidia import models
from cyborg.drivers.nvidia import resources


def layouts(profiles):
    seen, out = set(), []

    def walk(slots):
        key = tuple(sorted((s.profile_id, s.start) for s in slots))
        if key in seen:
            return
        seen.add(key)
        out.append(list(slots))
        for p in profiles:
            for start in mig.legal_starts(p, slots, profiles):
                walk(slots + [mig.Slot(p.id, start, p.slices)])

    walk([])
    return out


def granted(profiles, slots, a, b):
    invs = resources.inventories(profiles, slots)
    traits = resources.fit_traits(profiles, slots)
    by_id = {p.id: p for p in profiles}
    used = {}
    for s in slots:
        for rc, n in resources.profile_vector(by_id[s.profile_id]).items():
            used[rc] = used.get(rc, 0) + n
    va, vb = resources.profile_vector(a), resources.profile_vector(b)
    for p, v in ((a, va), (b, vb)):
        if resources.fit_trait(p) not in traits or any(
                n > invs[rc]['max_unit'] for rc, n in v.items()):
            return False
    return all(used.get(rc, 0) + va.get(rc, 0) + vb.get(rc, 0)
               <= invs[rc]['total'] - invs[rc]['reserved']
               for rc in set(va) | set(vb))


def placed(profiles, slots, first, second):
    start = mig.choose_start(first, slots, profiles)
    if start is None:
        return False
    after = slots + [mig.Slot(first.id, start, first.slices)]
    return mig.choose_start(second, after, profiles) is not None


def possible(profiles, slots, a, b):
    return any(mig.legal_starts(b, slots + [mig.Slot(a.id, s, a.slices)],
                                profiles)
               for s in mig.legal_starts(a, slots, profiles))


def figures(model):
    profiles = backend.profiles_from_capture(models.load(model)['devices'][0])
    out = dict.fromkeys(('layouts', 'granted_pairs', 'runs', 'failed',
                         'unavoidable', 'avoidable', 'feasible_refused'), 0)
    for slots in layouts(profiles):
        out['layouts'] += 1
        for a, b in itertools.combinations_with_replacement(profiles, 2):
            both = possible(profiles, slots, a, b) or possible(
                profiles, slots, b, a)
            if not granted(profiles, slots, a, b):
                out['feasible_refused'] += both
                continue
            out['granted_pairs'] += 1
            for first, second in ((a, b), (b, a)):
                out['runs'] += 1
                if not placed(profiles, slots, first, second):
                    out['failed'] += 1
                    out['avoidable' if both else 'unavoidable'] += 1
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('models', nargs='+')
    parser.add_argument('--baseline', action='store_true')
    args = parser.parse_args(argv)
    if args.baseline:
        resources._reserve_unreachable = lambda *a: None
    for model in args.models:
        began = time.monotonic()
        f = figures(model)
        print('%s%s: %d layouts, %d granted pairs, %d of %d placement runs '
              'failed (%.1f%%): %d unavoidable, %d avoidable; %d feasible '
              'pairs refused (%.0f s)' % (
                  model, ' (baseline)' if args.baseline else '',
                  f['layouts'], f['granted_pairs'], f['failed'], f['runs'],
                  100.0 * f['failed'] / max(f['runs'], 1), f['unavoidable'],
                  f['avoidable'], f['feasible_refused'],
                  time.monotonic() - began))
    return 0


if __name__ == '__main__':
    sys.exit(main())
