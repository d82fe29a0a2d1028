# SPDX-License-Identifier: Apache-2.0
"""Configuration options, registered once on the global CONF."""

from oslo_config import cfg

from cyborg.conf import opts

CONF = cfg.CONF
opts.register_opts(CONF)
