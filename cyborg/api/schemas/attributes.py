# SPDX-License-Identifier: Apache-2.0
"""Attribute request bodies (bare, or wrapped as openstacksdk sends it)."""

from cyborg.api.schemas import common

ATTRIBUTE = {
    'type': 'object',
    'properties': {
        # The deployable's integer id (digits too: the OSC plugin sends
        # its argument as a string) or, beyond Cyborg, its uuid.
        'deployable_id': {'anyOf': [{'type': 'integer', 'minimum': 1},
                                    {'type': 'string', 'pattern': '^[0-9]+$'},
                                    common.UUID]},
        'key': common.NAME,
        'value': {'type': 'string', 'maxLength': 65535},
    },
    'required': ['deployable_id', 'key', 'value'],
    'additionalProperties': False,
}

CREATE = {
    'oneOf': [
        ATTRIBUTE,
        {'type': 'object', 'properties': {'attribute': ATTRIBUTE},
         'required': ['attribute'], 'additionalProperties': False},
    ],
}
