# SPDX-License-Identifier: Apache-2.0
"""Talking to the Placement service."""
