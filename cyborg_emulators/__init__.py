# SPDX-License-Identifier: Apache-2.0
"""Emulated hardware for tests, benchmarks and the all-in-one (as
sushy-tools is beside Ironic). The service never imports this package:
an emulator plugs itself into the hooks the drivers offer (e.g.
cyborg.drivers.nvidia.sysfs.register_simulated)."""
