# SPDX-License-Identifier: Apache-2.0
"""WSGI entry point for uWSGI, gunicorn or mod_wsgi:
`cyborg.wsgi.api:application`. Reads /etc/cyborg/cyborg.conf, or the file
named by CYBORG_CONFIG_FILE; the middleware pipeline comes from
[api] api_paste_config (etc/cyborg/api-paste.ini) when that is set.
Without a usable [database] connection it says so in one line on stderr
and exits 1 (SystemExit) instead of loading."""

import gc
import os
import sys

from cyborg.api import pipeline
from cyborg.db import api as db_api

try:
    application = pipeline.build_api(
        [os.environ['CYBORG_CONFIG_FILE']]
        if os.environ.get('CYBORG_CONFIG_FILE') else None)
except db_api.NotConfigured as e:
    # No usable [database] connection (unset, not a URL, its Python driver
    # not installed): one line, not a traceback, and the WSGI server (uWSGI,
    # gunicorn, mod_wsgi) fails to load the app.
    print('cyborg.wsgi.api: %s' % e, file=sys.stderr, flush=True)
    raise SystemExit(1) from None

# What was loaded to build the app lives as long as the process: the cyclic
# garbage collector need not walk it again in every full collection (and,
# in a pre-forking server, touch the pages the workers share).
gc.collect()
gc.freeze()
