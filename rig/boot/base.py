"""What every boot driver shares: the driver protocol, the registry of drivers, and the failure a
boot that never became healthy raises. The record, the state claims and the health wait live in
rig.boot.record, rig.boot.state and rig.boot.health."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol

from rig.boot.record import BootRecord
from rig.deploy.recipe import Resolved


class BootFailed(Exception):
    """A boot that did not become healthy; the server has been stopped and its log kept."""


class BootPreempted(BootFailed):
    """The scheduler ended the boot's job (its time limit, a node failure, a cancel from outside):
    the nodes were taken away, which says nothing of the engine. A comparison stops there, without
    an entry for that boot, so `rig compare --resume` boots it again."""


class BootDriver(Protocol):
    name: str

    def up(self, resolved: Resolved, overlay: dict[str, str] | None = None, port: int | None = None,
           progress: bool = True, cold_caches: bool = False, unset: Collection[str] = ()) -> BootRecord: ...

    def down(self, record: BootRecord) -> None: ...

    def alive(self, record: BootRecord) -> str | None: ...


# Every driver, by the name a boot record keeps: rig.boot.compose and rig.boot.native register
# theirs as they load (the rig.boot package loads both), so code here can stop a boot recorded
# by either without importing the drivers that import it.
DRIVERS: dict[str, Callable[[], BootDriver]] = {}
DEFAULT_DRIVER = "compose"


def driver_named(name: str) -> BootDriver:
    """The driver a boot record names; one rig does not have is refused (a state file is input:
    an edited one must not make `rig down` stop something through another driver)."""
    if name not in DRIVERS:
        from rig.errors import Invalid

        raise Invalid("boot record", "driver", f"{name!r} is not a driver rig has ({', '.join(sorted(DRIVERS))})",
                      "check the boot record or state file; rig writes only these")
    return DRIVERS[name]()
