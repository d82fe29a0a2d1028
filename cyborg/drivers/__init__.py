"""Accelerator drivers; loaded by name from the cyborg.accelerator.driver
entry points."""

import functools

from stevedore import driver as stevedore_driver

NAMESPACE = 'cyborg.accelerator.driver'


@functools.lru_cache(maxsize=None)
def driver_class(driver_name):
    """A driver's class, without instantiating it (the conductor has no
    devices, nor their libraries); None when no such driver exists."""
    try:
        return stevedore_driver.DriverManager(
            NAMESPACE, driver_name, invoke_on_load=False).driver
    except Exception:
        return None


def _any(deployable, request_group, handles):
    return handles


def handle_picker(driver_name):
    """The driver's pick_handles; unknown drivers take any handle."""
    return getattr(driver_class(driver_name), 'pick_handles', _any)


def follows_bindings(driver_name):
    """Whether a binding changes what the driver's devices look like
    (inventories, fit traits, lifecycle), so its agent must look again."""
    return bool(getattr(driver_class(driver_name),
                        'inventory_follows_bindings', False))
