"""The driver interface: what an accelerator driver provides to the agent.

Drivers describe hardware with the records of cyborg.objects.device.
"""

import abc


class PrepareError(Exception):
    """A driver cannot prepare a handle; the message is the reason the ARQ
    fails to bind (an expected outcome, not an agent fault)."""


class Driver(abc.ABC):
    """What an accelerator driver provides to the agent."""

    name = None
    # True when what a binding takes changes the provider's inventories or
    # traits (the agent then republishes them right after prepare/release).
    inventory_follows_bindings = False

    @abc.abstractmethod
    def discover(self):
        """Return the [Device] present on this host now."""

    def prepare(self, deployable_name, handle):
        """Make an attach handle usable for a binding (MIG, mdev, rebind).

        handle: {uuid, attach_type, attach_info (JSON), ...}. Returns attach
        info updates, or None. Raise to fail the bind (the message becomes
        the ARQ's failure reason).
        """
        return None

    def release(self, deployable_name, handle):
        """Undo prepare() when the ARQ is unbound or deleted."""

    @classmethod
    def pick_handles(cls, deployable, request_group, handles):
        """Which free handles of `deployable` (a DB row) suit a request
        group ({"resources:RC": "n", "trait:T": "required", ...}); the
        conductor takes the first it can claim. Default: any."""
        return handles
