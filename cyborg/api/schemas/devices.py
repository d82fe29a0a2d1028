# SPDX-License-Identifier: Apache-2.0
"""Device action bodies (microversion 2.4)."""

SHARE = {
    'type': 'object',
    'properties': {
        'mode': {'type': 'string', 'enum': ['none', 'mps', 'time-slice']},
        # MPS serves at most 48 clients per GPU (Volta and later).
        'slots': {'type': 'integer', 'minimum': 1, 'maximum': 48},
    },
    'required': ['mode'],
    'additionalProperties': False,
}
