# SPDX-License-Identifier: Apache-2.0
"""Random (version 4) uuids as text, for new rows and request ids."""

import os

# The variant bits (10xx) over the first hex digit of the 4th group.
_VARIANT = {d: '89ab'[int(d, 16) & 3] for d in '0123456789abcdef'}


def new_uuid():
    """str(uuid.uuid4()) (what oslo.utils' generate_uuid() gives), made
    from the same 16 random bytes with string operations alone, in half
    the time (no UUID object, no int formatting).
    """
    h = os.urandom(16).hex()
    return '%s-%s-4%s-%s%s-%s' % (
        h[:8], h[8:12], h[13:16], _VARIANT[h[16]], h[17:20], h[20:])
