# SPDX-License-Identifier: Apache-2.0
"""The driver contract: every hook the agent and conductor call.

A driver only describes and prepares hardware; it reports the records of
cyborg.objects.device. The agent turns them into Placement providers and
the conductor into DB rows. Only discover() must be written; every other
hook has a default that is right for a driver whose devices need no
setup, cannot be shared, hold no state across reboots and have no
telemetry (see cyborg.drivers.fake).

The agent calls the hooks of one driver from its report loop and from
RPC threads at once: a driver that keeps state guards it itself.
"""

import abc


class PrepareError(Exception):
    """A driver cannot prepare a handle; the message is the reason the ARQ
    fails to bind (an expected outcome, not an agent fault).
    """


class Unsupported(PrepareError):
    """The driver does not offer this operation (e.g. reclaim); the
    message says so to the operator who asked for it.
    """


class Busy(PrepareError):
    """Something still uses the device, or its use cannot be established
    (reason 'Busy' or 'OccupancyUnknown'): the operation was refused
    before anything was touched.
    """

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason


class Driver(abc.ABC):
    """What an accelerator driver provides to the agent."""

    # The entry point name in cyborg.accelerator.driver; deployables carry
    # it as their driver_name.
    name = None
    # True when what a binding takes changes the provider's inventories or
    # traits (the agent then republishes them right after prepare/release,
    # and the conductor asks the agent to look again after a bind).
    inventory_follows_bindings = False
    # A health monitor the agent's metrics read, or None: an object with
    # xid_counts() → {GPU uuid or address: {xid: count}}.
    health = None

    # Discovery -------------------------------------------------------------

    @abc.abstractmethod
    def discover(self):
        """Return the [cyborg.objects.device.Device] present on this host
        now. A driver may propose each device's `phase` and fill its
        `observations`; the agent settles the lifecycle
        (cyborg.common.lifecycle) before reporting.
        """

    # Binding ---------------------------------------------------------------

    @classmethod
    def pick_handles(cls, deployable, request_group, handles):
        """Which free handles of `deployable` (a DB row) suit a request
        group ({"resources:RC": "n", "trait:T": "required", ...}); the
        conductor takes the first it can claim. Called on the class: the
        conductor has no devices. Default: any.
        """
        return handles

    def prepare(self, deployable_name, handle):
        """Make an attach handle usable for a binding (MIG, mdev, rebind).

        handle: {uuid, attach_type, attach_info (JSON), ...}. Returns attach
        info updates, or None. Raise PrepareError to fail the bind (the
        message becomes the ARQ's failure reason). Default: nothing to do.
        """
        return None

    def release(self, deployable_name, handle):
        """Undo prepare() when the ARQ is unbound or deleted. Default:
        nothing to undo.
        """

    # What the agent learns from the conductor, before each discovery -------

    def set_share_modes(self, modes):
        """The share modes operators set ({deployable name: {mode, slots}};
        mode 'none' or absent: not shared). Returns True when what the
        driver reports changes. Default: the driver shares nothing, so
        nothing changes.
        """
        return False

    def reconcile(self, prepared):
        """Which handles bindings hold ({deployable name: [handle {uuid,
        attach_info}]}), so that the driver can tell its own work from
        strangers' and re-make what a reboot undid. Returns (changed,
        {handle uuid: new attach info}): changed when the last discovery
        is out of date. Default: (False, {}), nothing to re-make.
        """
        return False, {}

    # Operator actions ------------------------------------------------------

    def reclaim(self, address):
        """Reset a device that no binding or allocation holds (the agent
        has checked) back to a state it can be offered in: an admin's
        reclaim of an Orphaned device and reset of a Failed or Lost one.
        The driver checks what only it can see (e.g. a VM holding the
        device) before touching anything and raises Busy then. Returns
        what was done, as a sentence; raises PrepareError when a step
        fails. Default: Unsupported.
        """
        raise Unsupported('driver %s cannot reclaim devices' % self.name)

    # Service lifetime and observation --------------------------------------

    def start(self):
        """Start background work (event listeners) when the agent's
        service starts. Default: none.
        """

    def stop(self):
        """Stop what start() started. Default: nothing to stop."""

    def telemetry(self, address):
        """What a metrics scrape shows of the device at `address` (a dict
        of readings, cyborg.agent.metrics says which), or None when there
        is nothing to read. Default: None.
        """
        return None
