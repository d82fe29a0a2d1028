# SPDX-License-Identifier: Apache-2.0
"""cyborg-api: the API under gunicorn (cyborg.api.service).

    cyborg-api --config-file /etc/cyborg/cyborg.conf

uWSGI or mod_wsgi users load cyborg.wsgi.api:application instead (see
etc/cyborg/api-uwsgi.ini).

Without a usable [database] connection (unset, not a URL, or its Python
driver not installed) it says so in one line on stderr and exits 1 before
starting any worker.
"""

import sys

from cyborg.api import service as api_service
from cyborg.common import config
from cyborg.conf import CONF
from cyborg.db import api as db_api


def main(argv=None):
    config.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        db_api.require_connection()
    except db_api.NotConfigured as e:
        print('cyborg-api: %s' % e, file=sys.stderr)
        return 1
    api_service.Server(CONF).run()


if __name__ == '__main__':
    sys.exit(main())
