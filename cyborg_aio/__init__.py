"""The embedded stack: everything `cyborg-aio` runs in one process."""
