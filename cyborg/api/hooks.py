# SPDX-License-Identifier: Apache-2.0
"""The request context every handler authorizes with, made from the
identity headers (keystonemiddleware's, or NoAuth's) once per request,
when a handler first asks for it (controllers.base.context()).
"""

from cyborg import context as request_context

ENVIRON_KEY = 'cyborg.context'


def context(environ):
    ctx = environ.get(ENVIRON_KEY)
    if ctx is None:
        ctx = environ[ENVIRON_KEY] = \
            request_context.RequestContext.from_environ(environ)
    return ctx
