# SPDX-License-Identifier: Apache-2.0
"""cyborg-agent: one per compute host; discovers and reports devices."""

import sys

from cyborg.agent import service as agent_service
from cyborg.common import config
from cyborg.common import service
from cyborg import rpc


def main(argv=None):
    rpc.quick_stop_defaults()
    config.parse_args(sys.argv[1:] if argv is None else argv)
    agent = agent_service.AgentService()

    def stop():
        agent.stop()
        rpc.cleanup()

    return service.run_until_signalled('cyborg-agent', agent.start, stop)


if __name__ == '__main__':
    sys.exit(main())
