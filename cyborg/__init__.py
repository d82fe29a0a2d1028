# SPDX-License-Identifier: Apache-2.0
"""GPU-native accelerator management for OpenStack, wire-compatible with
Cyborg v2."""

import warnings

# oslo.messaging's server module imports oslo_service.service, which loads
# oslo.service's default (eventlet) backend on import, and futurist imports
# eventlet when it is installed (oslo.service requires it): eventlet then
# prints its deprecation banner. Nothing here monkey-patches or runs on
# eventlet (threads only), so the banner is silenced here, where every
# command's first import of this package passes before any of those.
warnings.filterwarnings('ignore', message='(?s).*Eventlet is deprecated')
