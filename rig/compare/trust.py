"""What a boot entry read back may claim. An entry is a file in the comparison's directory, read again
by `rig compare --resume` and `rig import --compare`; its fields are not trusted on their own:

- every path it names lies inside its comparison (links resolved): a round's run directory elsewhere
  would have rig read, and trust, records no boot of this comparison measured. A comparison moved
  whole (a pack unpacked into another directory, another host's results) is read where it lies now:
  a run directory recorded under the old location is taken at the same place below this one's runs/;
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

RUNS = "runs"  # a comparison's (and a race's) load runs: runs/<NN-arm>/attempt-<k>/round-<j>/<scenario>
FIX = "it was moved or edited: the comparison does not read it (a planned boot is redone; re-import an imported one)"


def inside(path: str, root: Path) -> bool:
    """Whether `path`, links resolved, is `root` or lies below it."""
    return Path(os.path.realpath(path)).is_relative_to(Path(os.path.realpath(root)))


def below_runs(recorded: str, comparison: Path) -> Path | None:
    """Where the run directory `recorded` lies in `comparison` if the comparison was moved: the same
    place below its runs/, when that is a directory inside it. None: no such run here."""
    _, marker, below = recorded.rpartition(f"/{RUNS}/")
    target = comparison / RUNS / below
    if not marker or not below or not inside(str(target), comparison / RUNS) or not target.is_dir():
        return None
    return target


def confined(entry: BootEntry, path: Path, comparison: Path) -> BootEntry:
    """`entry` (read from `path`) when every run directory it names lies inside `comparison`, each
    recorded under a location the comparison was moved from taken where it lies now (below_runs)."""
    rounds = []
    for number, by_scenario in enumerate(entry.rounds):
        here = {}
        for name, result in by_scenario.items():
            if result.dir and not inside(result.dir, comparison):
                moved = below_runs(result.dir, comparison)
                if moved is None:
                    raise Damaged(str(path), f"rounds.{number}.{name}.dir", f"{result.dir[:200]!r} lies outside the "
                                  f"comparison {comparison}", FIX)
                result = result.model_copy(update={"dir": str(moved)})
            here[name] = result
        rounds.append(here)
    return entry.model_copy(update={"rounds": rounds})


def held_to_plan(entry: BootEntry, path: Path, plan: ComparePlan) -> BootEntry:
    """An imported `entry` (read from `path`) that is a measured boot of one of the plan's arms."""
    arms = [arm.name for arm in plan.arms]
    if entry.arm not in arms:
        raise Damaged(str(path), "arm", f"{entry.arm[:80]!r} is not an arm of this comparison ({', '.join(arms)})", FIX)
    if entry.control or entry.burn_in or entry.block < 0:
        raise Damaged(str(path), "control/burn_in/block", "an imported boot is a measured boot of a block, never the control "
                      "or a burn-in", FIX)
    return entry
