"""GPU-native accelerator management for OpenStack, wire-compatible with
Cyborg v2."""
