# SPDX-License-Identifier: Apache-2.0
"""The real Keystone of tests and tools.

It lives in cyborg_aio.keystone, below the harness, because
`cyborg-aio --keystone` starts it too; the harness offers it from here.
"""

from cyborg_aio.keystone import available  # noqa: F401
from cyborg_aio.keystone import Keystone  # noqa: F401
from cyborg_aio.keystone import KeystoneError  # noqa: F401
from cyborg_aio.keystone import Persona  # noqa: F401
from cyborg_aio.keystone import PERSONAS  # noqa: F401
