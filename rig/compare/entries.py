"""A comparison's directory: each boot's attempt folders and in-progress marker, the boot entries
read back (a damaged one set aside, so its boot is redone), a burn-in superseded, the entries `rig
import --compare` added, and the saved plan a resume must match."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from rig import paths
from rig.boot import driver_named
from rig.boot.record import BootRecord
from rig.compare.arms import Arm, recorded_spec
from rig.compare.model import IMPORTED_INDEX, BootEntry, ComparePlan
from rig.compare.trust import RUNS, confined, held_to_plan
from rig.errors import Damaged, NotFound, RigError
from rig.load.wire import BootMarker


def attempt_dir(out: Path, index: int, arm: Arm) -> tuple[int, Path]:
    root = out / RUNS / f"{index:02d}-{arm.name}"
    attempt = 1 + sum(1 for p in root.glob("attempt-*") if p.is_dir()) if root.exists() else 1
    return attempt, root / f"attempt-{attempt}"


IN_PROGRESS = ".in-progress.json"  # a boot's marker while it runs (what a resume stops first)


def in_progress(out: Path, index: int, arm: Arm) -> Path:
    return out / "boots" / f"{index:02d}-{arm.name}{IN_PROGRESS}"


def finished_boots(out: Path) -> int:
    """Boot entries the comparison in `out` has written (a running boot's marker is not one)."""
    return sum(1 for path in (out / "boots").glob("*.json") if not path.name.endswith(IN_PROGRESS)) if (out / "boots").is_dir() else 0


def stop_leftover(out: Path, index: int, arm: Arm, recipe: str) -> str | None:
    """A killed attempt can leave its server running: stop it, and only it (its boot id, or, when
    the kill came before the boot had one, this recipe's boot that started after the attempt)."""
    marker = in_progress(out, index, arm)
    if not marker.exists():
        return None
    try:
        found = BootMarker.parse(marker.read_bytes(), str(marker))
        boot_id, since = found.boot_id, found.since
    except Damaged:
        # A marker of another schema (markers are written atomically, so not a cut one): which boot
        # it meant cannot be told, and a server that is not provably this attempt's is never stopped.
        marker.unlink(missing_ok=True)
        return (f"an unreadable in-progress marker ({marker.name}): a server its attempt left running, if any, was not "
                f"stopped; see `rig status` and stop it with `rig down {recipe}`")
    note = None
    for path in sorted(paths.state_dir().glob("*.json")):
        try:
            record = BootRecord.load(path)
        except (NotFound, Damaged):  # gone meanwhile, or not a record rig wrote: nothing of ours to stop
            continue
        if record.boot_id == boot_id or (boot_id is None and record.recipe == recipe and record.started >= since):
            driver_named(record.driver).down(record)
            note = f"stopped {record.boot_id}, left running by an interrupted attempt"
    marker.unlink(missing_ok=True)
    return note


def kept_design(saved: ComparePlan, command: ComparePlan) -> str:
    """The design settings a resume keeps from its saved plan where the command line (or its
    defaults) says otherwise, as the flags would spell them; "" when they agree. Without it, a resume
    with --boots 3 --duration 12 would run the saved 2 pairs of 6 s rounds without a word."""
    def shown(value: object) -> str:
        return "the scenario's" if value is None else f"{value:g}" if isinstance(value, float) else str(value)

    pairs = [(flag, getattr(saved, field), getattr(command, field)) for flag, field in (
        ("--boots", "boots"), ("--duration", "duration_s"), ("--small", "small"), ("--workers", "workers"),
        ("--target", "target_pct"), ("--max-boots", "max_boots"), ("--cold-caches", "cold_caches"), ("--driver", "driver"))]
    return ", ".join(f"{flag} {shown(was)} (this command: {shown(now)})" for flag, was, now in pairs
                     if was != now and not (flag == "--boots" and saved.target_pct is not None))


def saved_plan_of_the_same_comparison(plan: ComparePlan, out: Path) -> ComparePlan | None:
    """The plan a resumed directory holds (None: a new comparison), refused in one line when it is
    another comparison's: recipe, arms, scenarios, rounds and control must be this command's."""
    if not (out / "plan.json").exists():
        return None
    try:
        saved = ComparePlan.read(out)
    except Damaged as error:
        raise Damaged(str(out / "plan.json"), error.field, f"unreadable comparison plan ({error.problem})",
                      "start a new comparison; this directory's boots stay for reference") from None
    differing = [(name, was, now) for name, was, now in (
        ("recipe", saved.recipe, plan.recipe),
        ("arms", " ".join(recorded_spec(a.spec) for a in saved.arms), " ".join(a.spec for a in plan.arms)),
        ("scenarios", " ".join(saved.scenarios), " ".join(plan.scenarios)),
        ("rounds", saved.rounds, plan.rounds),
        ("control", recorded_spec(saved.control.spec) if saved.control else "none", plan.control.spec if plan.control else "none"),
    ) if was != now]
    if differing:
        name, was, now = differing[0]
        raise RigError(str(out / "plan.json"), name, f"this directory holds a different comparison: its {name} "
                       f"{str(was)[:200]!r}, this command's {str(now)[:200]!r}"
                       + (f" (and {', '.join(d[0] for d in differing[1:])} differ too)" if differing[1:] else ""),
                       "resume with the same recipe, arms, scenarios, rounds and control, or start a new comparison")
    return saved


def check_position(entry: BootEntry, path: Path, index: int, block: int, arm: Arm) -> None:
    """An entry read back is the boot of the plan's position it is filed under, or Damaged."""
    if (entry.index, entry.block, entry.arm, entry.spec) != (index, block, arm.name, arm.spec):
        raise Damaged(str(path), "index/block/arm", f"holds boot {entry.index} (block {entry.block}) of arm {entry.arm!r}, "
                      f"not this position's boot {index} (block {block}) of {arm.name!r}", "it was moved or edited; the boot is redone")


def read_entry(path: Path, check: Callable[[BootEntry], None] | None = None, who: str = "compare") -> BootEntry | None:
    """A finished boot's entry; None when there is none, or when it is damaged (cut short by a lost
    machine or a full disk, another schema, not a regular file, a run directory outside its folder,
    or refused by `check`: not the boot of this position): then it is renamed aside, kept for
    reference, and the boot is redone. Nothing measured is lost: its runs stay under runs/."""
    try:
        entry = confined(BootEntry.read(path), path, path.parent.parent)  # boots/NN-arm.json of its comparison
        if check is not None:
            check(entry)
        return entry
    except NotFound:
        return None
    except Damaged as error:
        aside = path.with_name(f"{path.name}.unreadable-{int(time.time())}")
        path.rename(aside)
        print(f"{who}: {path.name} is damaged ({error.problem}); kept as {aside.name}, redoing that boot", file=sys.stderr)
        return None


def read_position_entry(out: Path, index: int, block: int, arm: Arm, burn_in: bool = False) -> BootEntry | None:
    """read_entry of a position's boot (or of its burn-in), held to the plan's position."""
    path = BootEntry.path(out, index, arm.name, burn_in=burn_in)
    return read_entry(path, lambda entry: check_position(entry, path, index, block, arm))


def supersede(out: Path, earlier: BootEntry, burn_in: bool = True) -> None:
    """A position's burn-in replaced by a later one (its boot compiled again on a fresh host), or its
    boot set aside to be booted again (its pair's other boot ran on another GPU), moves to
    boots/superseded/: kept for reference, no longer read as the position's (its runs stay under
    runs/)."""
    path = BootEntry.path(out, earlier.index, earlier.arm, burn_in=burn_in)
    aside = out / "boots" / "superseded" / f"{path.stem}.{earlier.boot_id or earlier.attempt}.json"
    aside.parent.mkdir(exist_ok=True)
    path.replace(aside)


def imported_entries(out: Path, plan: ComparePlan) -> list[BootEntry]:
    """Boots `rig import --compare` added (another tool's runs), numbered after every planned boot."""
    planned = len(plan.order())
    entries = []
    for path in sorted((out / "boots").glob("*.json")):
        head = path.name.split("-", 1)[0]
        if path.name.endswith(IN_PROGRESS) or not head.isdigit() or int(head) < max(planned, IMPORTED_INDEX):
            continue
        try:
            entries.append(held_to_plan(confined(BootEntry.read(path), path, out), path, plan))
        except Damaged as error:  # an imported entry rig cannot read or trust: left out, not guessed at
            print(f"compare: {error}; left out", file=sys.stderr)
            continue
    return entries


def all_entries(out: Path, plan: ComparePlan) -> list[BootEntry]:
    """Every finished boot of a comparison directory, planned (burn-ins included) and imported,
    without running any."""
    entries = []
    for index, (block, arm) in enumerate(plan.order()):
        for path in (BootEntry.path(out, index, arm.name, burn_in=True), BootEntry.path(out, index, arm.name)):
            try:
                entry = confined(BootEntry.read(path), path, out)
                check_position(entry, path, index, block, arm)
                entries.append(entry)
            except (NotFound, Damaged):  # not run yet, or damaged (or not this position's): a resume redoes it
                continue
    return entries + imported_entries(out, plan)
