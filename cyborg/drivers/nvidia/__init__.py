# SPDX-License-Identifier: Apache-2.0
"""NVIDIA GPUs through NVML: whole-GPU passthrough and MIG on demand."""
