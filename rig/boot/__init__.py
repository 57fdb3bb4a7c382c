"""Boot drivers behind one interface. Nothing else in rig starts or stops servers."""

from __future__ import annotations

from rig.boot import compose, native, slurm
from rig.boot.base import BootDriver, BootFailed, BootPreempted, driver_named
from rig.boot.record import BootRecord
from rig.boot.state import current_boot
from rig.deploy.recipe import Resolved

__all__ = ["BootDriver", "BootFailed", "BootPreempted", "BootRecord", "compose", "current_boot", "driver_for", "driver_named", "native", "slurm"]


def driver_for(resolved: Resolved, override: str | None = None) -> BootDriver:
    return driver_named(override or resolved.recipe.driver)
