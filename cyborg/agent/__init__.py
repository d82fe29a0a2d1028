# SPDX-License-Identifier: Apache-2.0
"""The per-host agent: discovers devices, reports them to the conductor and
keeps this host's accelerator providers in Placement in step."""
