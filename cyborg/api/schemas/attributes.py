"""Attribute request bodies (bare, or wrapped as openstacksdk sends it)."""

from cyborg.api.schemas import common

ATTRIBUTE = {
    'type': 'object',
    'properties': {
        'deployable_id': {'type': ['integer', 'string'],
                          'pattern': '^[0-9]+$', 'minimum': 1},
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
