# SPDX-License-Identifier: Apache-2.0
"""Prepare RPC: CPU per ARQ of N prepare calls against one prepare_batch.

What it does, all on 127.0.0.1:

1. starts an agent RPC server (``AgentManager`` with the fake driver, no
   Placement, no conductor) as a process of its own over the local
   RabbitMQ, in a vhost of its own deleted at the end (``--transport
   rabbit``, the distributed deployment), or in this process over
   ``inproc://`` (``--transport inproc``, as cyborg-aio);
2. for ``--rounds`` rounds, alternating the two ways round by round,
   prepares ``--batch`` handles of that agent (fresh ARQ and handle
   uuids each round):

   * per-ARQ: one ``prepare`` call each, all at once from as many threads
     (what the conductor did before agent RPC 1.2, and still does under
     ``[upgrade_levels] agent = 1.1``);
   * batch: one ``prepare_batch`` call (agent RPC 1.2);

3. prints, per way, the CPU time per ARQ of the caller (this process,
   over the calls) and of the agent process (from /proc; with inproc
   both are this process) and the wall time per round, p50.

It measures the RPC alone: no database, no Placement, no Nova. The fake
driver's prepare does nothing. Examples::

    cyborg-bench prepare-rpc
    cyborg-bench prepare-rpc --transport inproc --batch 10 --rounds 200
"""

import argparse
import concurrent.futures
import json
import statistics
import subprocess
import sys
import time
import uuid

from cyborg_harness import cpu
from cyborg_harness import rabbit

HOST = 'prepare-rpc-bench'


def add_arguments(p):
    p.add_argument('--transport', choices=('rabbit', 'inproc'),
                   default='rabbit')
    p.add_argument('--batch', type=int, default=10,
                   help='ARQs of one agent per round (default 10)')
    p.add_argument('--rounds', type=int, default=200,
                   help='rounds of each way (default 200)')
    p.add_argument('--json', help='write the results here too')
    p.add_argument('--serve', help=argparse.SUPPRESS)


def _configure(url):
    from cyborg.conf import CONF
    CONF([], project='cyborg', default_config_files=[])
    CONF.set_override('transport_url', url)


def _agent():
    from cyborg.agent import manager
    from cyborg.drivers import fake
    return manager.AgentManager(None, None, host=HOST, drivers=[
        fake.FakeDriver(fake.default_host_spec())])


def _serve(url):
    """The agent process: serves until its stdin closes."""
    _configure(url)
    from cyborg import rpc
    server = rpc.get_server(rpc.AGENT_TOPIC, [_agent()], server=HOST)
    server.start()
    print('ready', flush=True)
    sys.stdin.read()
    server.stop()
    server.wait()
    return 0


def _items(n):
    return [{'arq_uuid': str(uuid.uuid4()),
             'deployable_name': '0000:0c:00.%d' % (i % 8),
             'driver_name': 'fake',
             'handle': {'uuid': str(uuid.uuid4())}} for i in range(n)]


def run(args):
    if args.serve:
        return _serve(args.serve)
    vhost = proc = server = None
    if args.transport == 'rabbit':
        vhost = rabbit.VirtualHost(prefix='prepare-rpc')
        url = vhost.url
    else:
        url = 'inproc://'
    try:
        _configure(url)
        from cyborg.agent import rpcapi
        from cyborg import context
        from cyborg import rpc
        if vhost is not None:
            proc = subprocess.Popen(
                [sys.executable, '-m', 'cyborg_bench', 'prepare-rpc',
                 '--serve', url], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True)
            assert proc.stdout.readline().strip() == 'ready'
            agent_cpu = (lambda: cpu.process_seconds(proc.pid))
        else:
            server = rpc.get_server(rpc.AGENT_TOPIC, [_agent()], server=HOST)
            server.start()
            agent_cpu = (lambda: 0.0)
        api = rpcapi.AgentAPI()
        ctx = context.get_admin_context()
        pool = concurrent.futures.ThreadPoolExecutor(args.batch)

        def per_arq(items):
            futures = [pool.submit(api.prepare, ctx, HOST,
                                   i['deployable_name'], 'fake', i['handle'],
                                   arq_uuid=i['arq_uuid']) for i in items]
            for f in futures:
                f.result()

        def batch(items):
            results = api.prepare_batch(ctx, HOST, items, 0.5)
            assert all('info' in r for r in results.values()), results

        ways = {'per-ARQ prepare': per_arq, 'prepare_batch': batch}
        samples = {w: {'caller': [], 'agent': [], 'wall': []} for w in ways}
        for way, call in ways.items():     # warm-up
            for _ in range(5):
                call(_items(args.batch))
        for _ in range(args.rounds):
            for way, call in ways.items():
                items = _items(args.batch)
                c0, a0 = time.process_time(), agent_cpu()
                w0 = time.perf_counter()
                call(items)
                w1 = time.perf_counter()
                c1 = time.process_time()
                samples[way]['caller'].append(c1 - c0)
                samples[way]['agent'].append(agent_cpu() - a0)
                samples[way]['wall'].append(w1 - w0)
        pool.shutdown()
        result = {'transport': args.transport, 'batch': args.batch,
                  'rounds': args.rounds,
                  'loadavg': open('/proc/loadavg').read().split()[:3]}
        print('| %s, %d ARQs per round, %d rounds (load average %s) | '
              'caller CPU ms per ARQ | agent CPU ms per ARQ | '
              'round wall p50 ms |' % (args.transport, args.batch,
                                       args.rounds,
                                       ' '.join(result['loadavg'])))
        print('|---|---:|---:|---:|')
        for way, s in samples.items():
            row = {
                'caller_cpu_ms_per_arq': round(
                    1000 * sum(s['caller']) / args.rounds / args.batch, 3),
                'agent_cpu_ms_per_arq': round(
                    1000 * sum(s['agent']) / args.rounds / args.batch, 3)
                if vhost is not None else None,
                'wall_p50_ms': round(1000 * statistics.median(s['wall']),
                                     2)}
            result[way] = row
            print('| %s | %s | %s | %s |' % (
                way, row['caller_cpu_ms_per_arq'],
                row['agent_cpu_ms_per_arq'] if vhost is not None
                else '(same process)', row['wall_p50_ms']))
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(result, f, indent=2)
        return 0
    finally:
        if proc is not None:
            proc.stdin.close()
            proc.wait(30)
        if server is not None:
            server.stop()
            server.wait()
        rpc_cleanup = sys.modules.get('cyborg.rpc')
        if rpc_cleanup is not None:
            rpc_cleanup.cleanup()
        if vhost is not None:
            vhost.delete()
