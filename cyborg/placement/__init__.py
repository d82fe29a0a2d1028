"""Talking to the Placement service."""
