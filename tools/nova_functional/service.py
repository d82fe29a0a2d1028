# SPDX-License-Identifier: Apache-2.0
"""Our service for one Nova functional test, in its own process.

Nova and cyborg both register options on oslo.config's global CONF, with
clashing definitions ([DEFAULT] host, [api] max_limit, ...): they cannot
share a process. This one runs the real API (pecan app, noauth, SQLite),
the conductor (binder and Nova notifier) and one agent RPC server per
compute host, on the in-process oslo.messaging transport (the pieces of
the harness's embedded mode). Placement and Nova's API are the test's
own, reached through the loopback bridges the fixture serves
(bridge.py).

Protocol: prints one JSON line {"api": URL} when ready, then answers each
JSON line on stdin with one JSON line on stdout:
  {"op": "report", "host": H, "devices": [{"name", "rp_uuid",
   "resource_class", "total", "traits"}]}   the host's devices, as its
   agent would report them (the test seeded Placement with them itself)
"""

import argparse
import json
import os
import sys
import traceback


def _device(host, index, spec):
    """One fake device per test-seeded provider: `total` TEST_PCI
    functions, the attach info shape Nova's port code reads.
    """
    from cyborg.objects import device as records

    handles = [records.AttachHandle('TEST_PCI', {
        'domain': '0000', 'bus': '%02x' % (0x0c + index), 'device': '00',
        'function': str(fn), 'physical_network': 'PHYNET1'})
        for fn in range(spec['total'])]
    dep = records.Deployable(
        name=spec['name'], num_accelerators=spec['total'],
        resource_class=spec['resource_class'], traits=spec['traits'],
        attach_handles=handles, driver_name='fake',
        rp_uuid=spec['rp_uuid'])
    return records.Device(
        type='FPGA', vendor='abcd', model='Nova functional test device',
        product_id='abcd',
        controlpath_id={'cpid_type': 'PCI', 'cpid_info': {
            'domain': '0000', 'bus': '%02x' % (0x0c + index),
            'device': '00', 'function': '0'}},
        deployables=[dep], std_board_info={}, phase='Ready',
        management_state='Managed', conditions=[])


class Service:
    """The harness's embedded pieces (cyborg_harness.embedded), wired for
    this test: a conductor, the API served on loopback, and an agent RPC
    server per compute host on demand.
    """

    def __init__(self, state_dir, placement_url, nova_url):
        self.state_dir = state_dir
        self.placement_url = placement_url
        self.nova_url = nova_url
        self.agents = {}
        self.conductor = None
        self.api = None

    def start(self):
        from cyborg.api import app as api_app
        from cyborg.common import config
        from cyborg.common import wsgi_server
        from cyborg.conf import CONF
        from cyborg.db import api as db_api
        from cyborg.db import migration
        from cyborg_harness import embedded

        config.parse_args([], config_files=[], log_to_stderr=True)
        CONF.set_override('state_path', self.state_dir)
        CONF.set_override('auth_strategy', 'noauth', group='api')
        CONF.set_override('metrics_enabled', False, group='api')
        CONF.set_override('connection', 'sqlite:///%s' % os.path.join(
            self.state_dir, 'cyborg.sqlite'), group='database')
        CONF.set_override('transport_url', 'inproc://')
        embedded.point_at('placement', self.placement_url)
        embedded.point_at('nova', self.nova_url)
        db_api.configure()
        migration.upgrade()
        self.conductor = embedded.Conductor(
            sweep_interval=CONF.conductor.bind_sweep_interval,
            stale_after=CONF.conductor.bind_stale_after).start()
        self.api = wsgi_server.ThreadedServer(
            'cyborg-api', api_app.setup_app(CONF), '127.0.0.1', 0)
        self.api.start()
        return self.api.url

    def _agent(self, host):
        """The agent of `host`: its RPC server (prepare, release) only.
        Its report loop would publish providers of its own next to the
        ones the test created, so the report is sent for it (report).
        """
        if host not in self.agents:
            from cyborg.agent import manager
            from cyborg.common import ksa
            from cyborg.placement import client as placement
            from cyborg_harness import embedded

            self.agents[host] = embedded.Agent.build(
                host, manager.load_drivers(['fake']),
                placement.PlacementClient(ksa.get_adapter('placement')),
            ).start()
        return self.agents[host].manager

    def report(self, host, devices):
        agent = self._agent(host)
        found = [_device(host, i, spec) for i, spec in enumerate(devices)]
        # The conductor's report path, over RPC, as the agent sends it.
        result = agent.conductor_api.report_data(agent.context, host, found)
        return {'writes': result.get('writes')}

    def stop(self):
        for agent in self.agents.values():
            agent.stop()
        if self.api:
            self.api.stop()
        if self.conductor:
            self.conductor.stop()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--placement-url', required=True)
    parser.add_argument('--nova-url', required=True)
    args = parser.parse_args(argv)
    service = Service(args.state_dir, args.placement_url, args.nova_url)
    out = sys.stdout
    sys.stdout = sys.stderr     # logs and prints never mix with answers
    out.write(json.dumps({'api': service.start()}) + '\n')
    out.flush()
    for line in sys.stdin:
        try:
            cmd = json.loads(line)
            if cmd['op'] == 'report':
                answer = service.report(cmd['host'], cmd['devices'])
            else:
                answer = {'error': 'unknown op %r' % cmd['op']}
        except Exception:
            answer = {'error': traceback.format_exc()}
        out.write(json.dumps(answer) + '\n')
        out.flush()
    service.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
