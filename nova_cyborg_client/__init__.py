# SPDX-License-Identifier: Apache-2.0
"""The Nova side of accelerators: what Nova's compute API, scheduler,
conductor, compute manager and libvirt driver do with a flavor's
`accel:device_profile`, with real Nova's wire behaviour (names, bodies,
exceptions), so it can stand in for Nova against our service or Cyborg.

Modules, in the order a boot uses them:
  cyborg     – the accelerator calls Nova makes (device profiles, ARQs,
              bind, delete), under Nova's names
  cyborg_http – their one request helper and its typed HTTP errors
  scheduler  – request groups → GET /allocation_candidates query
  placement  – allocation candidates, claims, allocations
  conductor  – create ARQs, match them to providers, bind in one PATCH
  events     – POST /os-server-external-events and the event waiters
  compute    – wait for the binding, clean up ARQs
  libvirt    – attach handles → <hostdev> elements (or a refusal)
  mdev       – create/remove the mdevs of MDEV attach handles
  flow       – all of the above as one boot/delete, and its CLI
              (nova-cyborg-flow)
cyborg-aio's demo, built on flow, lives in cyborg_aio.demo.
"""
