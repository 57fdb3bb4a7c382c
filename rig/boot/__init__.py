"""Boot drivers behind one interface. Nothing else in rig starts or stops servers."""

from __future__ import annotations

from rig.boot.base import BootDriver, BootFailed, BootRecord, current_boot
from rig.boot.compose import ComposeDriver
from rig.boot.native import NativeDriver
from rig.recipe import Resolved

__all__ = ["BootDriver", "BootFailed", "BootRecord", "current_boot", "driver_for", "driver_named"]


def driver_named(name: str) -> BootDriver:
    return NativeDriver() if name == "native" else ComposeDriver()


def driver_for(resolved: Resolved, override: str | None = None) -> BootDriver:
    return driver_named(override or resolved.recipe.driver)
