"""MIG profiles of the shipped GPU models, read straight from the model
files (capture format) without NVML: for the pure allocator tests."""

import json
import os

from cyborg.drivers.nvidia import backend

MODELS_DIR = os.path.join(os.path.dirname(backend.__file__), 'models')
MODELS = ('a100-40gb', 'a100-80gb', 'h100-80gb', 'h200')


def profiles(model):
    with open(os.path.join(MODELS_DIR, model + '.json')) as f:
        return backend.profiles_from_capture(json.load(f)['devices'][0])
