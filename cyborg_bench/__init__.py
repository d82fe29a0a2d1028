# SPDX-License-Identifier: Apache-2.0
"""cyborg-bench: the benchmarks of this project, as subcommands.

One module per benchmark (load, api, bind, agent_scale, nvidia,
side_by_side, soak). The deployments they measure, Placement, throw-away
databases, the RabbitMQ vhost, Nova's events stand-in, processes, CPU
time and percentiles come from cyborg_harness; what only the benchmarks
share lives here once: client (HTTP, Nova's bind body and identity),
stats (latency summaries), machine (what a run records), hostspec
(fake-driver hosts), floor (the no-op server). Nothing imports this
package.
"""
