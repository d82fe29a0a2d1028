# SPDX-License-Identifier: Apache-2.0
"""cyborg-bench: the benchmarks of this project, as subcommands.

One module per benchmark (load, api, bind, agent_scale, nvidia,
side_by_side, soak); what they share lives once: client (HTTP), stats
(percentiles), machine (what a run records about the machine), events
(Nova's events API stand-in), deployment (the deployments they start),
hostspec (fake-driver hosts). Nothing imports this package.
"""
