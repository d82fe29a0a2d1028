# SPDX-License-Identifier: Apache-2.0
"""Deployable request bodies."""

from cyborg.api.schemas import common

PROGRAM = {
    'type': 'array', 'minItems': 1, 'maxItems': 1,
    'items': {
        'type': 'object',
        'properties': {
            'op': {'enum': ['add', 'replace']},
            'path': {'const': '/program'},
            'value': {
                'type': 'array', 'minItems': 1,
                'items': {'type': 'object',
                          'properties': {'image_uuid': common.UUID},
                          'required': ['image_uuid']}},
        },
        'required': ['op', 'path', 'value'],
    },
}
