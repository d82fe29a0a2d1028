"""Accelerator drivers, loaded by stevedore from [agent] enabled_drivers."""
