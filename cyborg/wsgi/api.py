# SPDX-License-Identifier: Apache-2.0
"""WSGI entry point for uWSGI, gunicorn or mod_wsgi:
`cyborg.wsgi.api:application`. Reads /etc/cyborg/cyborg.conf, or the file
named by CYBORG_CONFIG_FILE; the middleware pipeline comes from
[api] api_paste_config (etc/cyborg/api-paste.ini) when that is set."""

import gc
import os

from cyborg.api import pipeline

application = pipeline.build_api(
    [os.environ['CYBORG_CONFIG_FILE']]
    if os.environ.get('CYBORG_CONFIG_FILE') else None)

# What was loaded to build the app lives as long as the process: the cyclic
# garbage collector need not walk it again in every full collection (and,
# in a pre-forking server, touch the pages the workers share).
gc.collect()
gc.freeze()
