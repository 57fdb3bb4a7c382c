"""What a boot entry read back may claim. An entry is a file in the comparison's directory, read again
by `rig compare --resume` and `rig import --compare`; its fields are not trusted on their own:

- every path it names lies inside its comparison (links resolved): a round's run directory elsewhere
  would have rig read, and trust, records no boot of this comparison measured;
- an imported entry (another tool's run, `rig import --compare`) is held to the plan: an arm of the
  plan, measured, never the control or a burn-in (a planned entry is held to its position:
  rig.compare.entries.check_position).

A breach is Damaged, naming the entry's file and field: the resume redoes a planned boot and leaves
an imported one out, as it does for any damaged entry.
"""

from __future__ import annotations

import os
from pathlib import Path

from rig.compare.model import BootEntry, ComparePlan
from rig.errors import Damaged

FIX = "it was moved or edited: the comparison does not read it (a planned boot is redone; re-import an imported one)"


def inside(path: str, root: Path) -> bool:
    """Whether `path`, links resolved, is `root` or lies below it."""
    return Path(os.path.realpath(path)).is_relative_to(Path(os.path.realpath(root)))


def confined(entry: BootEntry, path: Path, comparison: Path) -> BootEntry:
    """`entry` (read from `path`) when every run directory it names lies inside `comparison`."""
    for number, rounds in enumerate(entry.rounds):
        for name, result in rounds.items():
            if result.dir and not inside(result.dir, comparison):
                raise Damaged(str(path), f"rounds.{number}.{name}.dir", f"{result.dir[:200]!r} lies outside the comparison "
                              f"{comparison}", FIX)
    return entry


def held_to_plan(entry: BootEntry, path: Path, plan: ComparePlan) -> BootEntry:
    """An imported `entry` (read from `path`) that is a measured boot of one of the plan's arms."""
    arms = [arm.name for arm in plan.arms]
    if entry.arm not in arms:
        raise Damaged(str(path), "arm", f"{entry.arm[:80]!r} is not an arm of this comparison ({', '.join(arms)})", FIX)
    if entry.control or entry.burn_in or entry.block < 0:
        raise Damaged(str(path), "control/burn_in/block", "an imported boot is a measured boot of a block, never the control "
                      "or a burn-in", FIX)
    return entry
