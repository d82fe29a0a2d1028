# SPDX-License-Identifier: Apache-2.0
"""The conductor: keeps the DB in step with agents' reports (and, with the
bind issue, binds ARQs and tells Nova)."""
