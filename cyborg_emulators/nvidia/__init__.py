# SPDX-License-Identifier: Apache-2.0
"""NVIDIA GPUs without a GPU: a fake libnvidia-ml under the real
nvidia-ml-py bindings (fake_nvml), a fake /sys for them (fake_sysfs),
and the read-only capture of a real GPU that the fake is checked
against (capture; run it with `python -m cyborg_emulators.nvidia.capture`).
"""
