"""WSGI entry point for uWSGI, gunicorn or mod_wsgi:
`cyborg.wsgi.api:application`. Reads /etc/cyborg/cyborg.conf, or the file
named by CYBORG_CONFIG_FILE."""

import os

from cyborg.cmd import common

application = common.build_api(
    [os.environ['CYBORG_CONFIG_FILE']]
    if os.environ.get('CYBORG_CONFIG_FILE') else None)
