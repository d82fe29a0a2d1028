"""MIG profiles of the shipped GPU models, read straight from the model
files (capture format) without NVML: for the pure allocator tests."""

import json
import os

from cyborg.drivers.nvidia import backend

MODELS_DIR = os.path.join(os.path.dirname(backend.__file__), 'models')
MODELS = ('a100-40gb', 'a100-80gb', 'h100-80gb', 'h200')


def profiles(model):
    with open(os.path.join(MODELS_DIR, model + '.json')) as f:
        device = json.load(f)['devices'][0]
    out = []
    for entry in device['gi_profiles']:
        info = entry['info']
        if 'error' in info or not isinstance(entry.get('placements'), list):
            continue
        out.append(backend.MigProfile(
            id=info['id'], name=info['name'].removeprefix('MIG '),
            slices=entry['placements'][0]['size'],
            compute_slices=info['sliceCount'],
            multiprocessors=info['multiprocessorCount'],
            memory_mib=info['memorySizeMB'],
            max_instances=info['instanceCount'],
            placements=tuple(p['start'] for p in entry['placements']),
            decoders=info['decoderCount'], jpegs=info['jpegCount'],
            ofas=info['ofaCount'], copy_engines=info['copyEngineCount']))
    return tuple(out)
