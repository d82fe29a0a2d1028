# SPDX-License-Identifier: Apache-2.0
"""MIG profiles of the shipped GPU models, read straight from the model
files (capture format) without NVML: for the pure allocator tests."""

from cyborg.drivers.nvidia import backend
from cyborg.drivers.nvidia import models

MODELS = ('a100-40gb', 'a100-80gb', 'h100-80gb', 'h200')


def profiles(model):
    return backend.profiles_from_capture(models.load(model)['devices'][0])
