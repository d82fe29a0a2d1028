# SPDX-License-Identifier: Apache-2.0
"""cyborg-bench: the benchmarks of this project, one subcommand each.

``cyborg-bench SUBCOMMAND --help`` says what each one measures and how.
Results and the commands that produced them: docs/benchmarks/.
"""

import argparse
import signal
import sys

from cyborg_bench import ab
from cyborg_bench import agent_scale
from cyborg_bench import api
from cyborg_bench import bind
from cyborg_bench import layers
from cyborg_bench import load
from cyborg_bench import nvidia
from cyborg_bench import per_db
from cyborg_bench import prepare_rpc
from cyborg_bench import profile
from cyborg_bench import side_by_side
from cyborg_bench import soak

BENCHMARKS = {
    'ab': (ab, 'two trees of the API, one client alternating'),
    'load': (load, 'workloads against any Cyborg v2 endpoint'),
    'api': (api, 'the API under gunicorn, per database'),
    'bind': (bind, "Nova's PATCH and PATCH → accelerator-request-bound"),
    'agent-scale': (agent_scale, 'N agents × D devices, one conductor'),
    'layers': (layers, 'time per layer inside a uWSGI worker'),
    'nvidia': (nvidia, 'the NVIDIA driver on the fake NVML'),
    'per-db': (per_db, 'side-by-side workloads, gunicorn, each DB, with '
               'the reference'),
    'prepare-rpc': (prepare_rpc, 'N agent prepare calls vs one batch'),
    'profile': (profile, 'server time per request, in process'),
    'side-by-side': (side_by_side, 'ours, the reference, a no-op app'),
    'soak': (soak, 'boot/delete for minutes, leak checks'),
}


def parser():
    p = argparse.ArgumentParser(
        prog='cyborg-bench', description=__doc__.split('\n\n')[0],
        epilog=__doc__.split('\n\n', 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest='benchmark', required=True,
                           metavar='SUBCOMMAND')
    for name, (module, summary) in BENCHMARKS.items():
        one = sub.add_parser(
            name, help=summary, description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(one)
        one.set_defaults(run=module.run, parser=one)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    # SIGTERM ends a run like Ctrl-C: the finally blocks stop what it
    # started and remove its temp dir.
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    return args.run(args)


if __name__ == '__main__':
    sys.exit(main())
