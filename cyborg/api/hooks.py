# SPDX-License-Identifier: Apache-2.0
"""Pecan hooks: the request context every handler authorizes with."""

import pecan

from cyborg import context


class ContextHook(pecan.hooks.PecanHook):

    def before(self, state):
        state.request.context = context.RequestContext.from_environ(
            state.request.environ)
