# SPDX-License-Identifier: Apache-2.0
"""Records shared by the layers: what drivers report and the agent,
conductor and DB pass along (below the drivers, above nothing)."""
