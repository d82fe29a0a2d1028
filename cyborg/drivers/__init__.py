# SPDX-License-Identifier: Apache-2.0
"""Accelerator drivers; loaded by name from the cyborg.accelerator.driver
entry points."""

import functools

from stevedore import driver as stevedore_driver

from cyborg.drivers import base

NAMESPACE = 'cyborg.accelerator.driver'


@functools.lru_cache(maxsize=None)
def driver_class(driver_name):
    """A driver's class, without instantiating it (the conductor has no
    devices, nor their libraries); None when no such driver exists.
    """
    try:
        return stevedore_driver.DriverManager(
            NAMESPACE, driver_name, invoke_on_load=False).driver
    except Exception:
        return None


def _class_or_base(driver_name):
    # An unknown driver (uninstalled since its devices were reported)
    # behaves as the contract's defaults say.
    return driver_class(driver_name) or base.Driver


def handle_picker(driver_name):
    """The driver's pick_handles; unknown drivers take any handle."""
    return _class_or_base(driver_name).pick_handles


def follows_bindings(driver_name):
    """Whether a binding changes what the driver's devices look like
    (inventories, fit traits, lifecycle), so its agent must look again.
    """
    return bool(_class_or_base(driver_name).inventory_follows_bindings)
