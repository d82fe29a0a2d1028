# SPDX-License-Identifier: Apache-2.0
"""Schema fragments shared by several resources."""

UUID = {'type': 'string', 'format': 'uuid',
        'pattern': '^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?'
                   '[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$'}
NAME = {'type': 'string', 'minLength': 1, 'maxLength': 255}
