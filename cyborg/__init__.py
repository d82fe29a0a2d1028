# SPDX-License-Identifier: Apache-2.0
"""GPU-native accelerator management for OpenStack, wire-compatible with
Cyborg v2."""
