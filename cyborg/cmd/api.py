# SPDX-License-Identifier: Apache-2.0
"""cyborg-api: the API under gunicorn (cyborg.api.service).

    cyborg-api --config-file /etc/cyborg/cyborg.conf

uWSGI or mod_wsgi users load cyborg.wsgi.api:application instead (see
etc/cyborg/api-uwsgi.ini).
"""

import sys

from cyborg.api import service as api_service
from cyborg.common import config
from cyborg.conf import CONF


def main(argv=None):
    config.parse_args(sys.argv[1:] if argv is None else argv)
    api_service.Server(CONF).run()


if __name__ == '__main__':
    sys.exit(main())
