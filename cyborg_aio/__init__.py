# SPDX-License-Identifier: Apache-2.0
"""The all-in-one: the whole service in one process (`cyborg-aio`).

The embedded stack (stack.py) wires our API, the real Placement
(placement.py), the conductor and an agent in this process, seeds the
compute-node provider nova-compute would make (compute_node.py) and runs the
Nova-side demo (demo.py). The service package `cyborg` ships without it.
"""
