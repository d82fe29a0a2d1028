# SPDX-License-Identifier: Apache-2.0
import sys

from cyborg_bench import cli

sys.exit(cli.main())
