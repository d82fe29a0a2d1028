# SPDX-License-Identifier: Apache-2.0
"""One way to stand the service up for tests, the fault suite, benchmarks
and tools, and the helpers they share. Not imported by the service.

Deployments, in three modes:
  embedded     – conductor, agent(s) and the API app in this process
  aio          – cyborg-aio as a subprocess, its ready line parsed
  distributed  – Placement, cyborg-api, conductor(s) and agent(s) as
                 processes over RabbitMQ and a real database

What they are built from:
  processes    – a child process with a log file, in its own session
  placement    – the real Placement as a process, or in this process
  databases    – a throw-away database on SQLite, MariaDB or PostgreSQL
  servers      – private MariaDB and RabbitMQ servers a check may stop
  rabbit       – a broker and a virtual host of our own on it
  nova         – Nova's events API (nova_cyborg_client's) recording
                 every event it is sent
  keystone     – a real Keystone (the keystone package) on loopback, with
                 the secure-RBAC personas and a catalog

Helpers, once each:
  net          – free ports, reachability
  waiting      – eventually(): poll until true or time out
  cpu          – CPU time of a process, a process group, the machine
  stats        – nearest-rank percentiles

pytest-free: the test glue (fixtures, skips) lives in tests/.
"""
