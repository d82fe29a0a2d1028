import sys

from cyborg_bench import cli

sys.exit(cli.main())
