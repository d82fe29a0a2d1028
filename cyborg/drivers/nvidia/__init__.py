"""NVIDIA GPUs through NVML: whole-GPU passthrough and MIG on demand."""
