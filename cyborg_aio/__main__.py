# SPDX-License-Identifier: Apache-2.0
"""python -m cyborg_aio: the same as the cyborg-aio console script."""

import sys

from cyborg_aio import cli

sys.exit(cli.main())
