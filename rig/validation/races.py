"""Races as evidence: a `rig tune` race's directory (race.json, boots/*.json, looks.json, tune.json;
no server logs, no load runs), recomputed with rig.tune's own code.

The race is replayed from its boot entries: rig.tune.run.Racer's loop, rule and constraint checks
take each position's boot from the evidence instead of booting it, so every look, elimination and
the stop are decided again, and rig.tune.result.analyze gives the ranked table. The looks.json and
tune.json the race wrote are held to the replay too ("as written"): a race directory edited after
the fact recomputes to figures of its own, and says its files differ.

A goodput race reads each round's figure from that round's records (rig.tune.goodput), so its
evidence carries runs/ too (records-*.jsonl of every measured round, as rig tune wrote them). A
round's directory is named as the racing host wrote it (<race>/runs/...): it is read below the
evidence's own runs/, never anywhere else, and a round whose records are missing is damaged evidence.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from rig.compare.model import ENTRY_MAX_BYTES, BootEntry
from rig.compare.trust import below_runs
from rig.errors import Damaged
from rig.strict_yaml import load_json_file
from rig.tune.plan import RacePlan
from rig.tune.result import RaceResult, Row, analyze, headline
from rig.tune.run import LOOKS_FILE, Looks, Racer, RaceState
from rig.validation.comparisons import IN_PROGRESS
from rig.validation.figures import Kind, percent

RESULT_FILE = "tune.json"


class ReplayRacer(Racer):
    """The race's loop, with every boot taken from the evidence (a missing one is damaged evidence)."""

    def __init__(self, plan: RacePlan, out: Path, stored: dict[tuple[int, str, bool], BootEntry]) -> None:
        super().__init__(plan, out, progress=False, steps=False, port=None)
        self.stored = stored

    def boot(self, index: int, block: int, name: str, label: str) -> BootEntry:
        done = self.stored.get((index, name, False))
        if done is None:
            raise Damaged(str(BootEntry.path(self.out, index, name)), "(file)", f"the race's boot {index + 1} ({label}) of "
                          f"{name} is not in the evidence", "pack every boots/*.json the race wrote")
        if (done.index, done.block, done.arm) != (index, block, name):
            raise Damaged(str(BootEntry.path(self.out, index, name)), "index/block/arm", f"holds boot {done.index} (round "
                          f"{done.block}) of {done.arm!r}, not boot {index} (round {block}) of {name!r}", "pack the files unchanged")
        first = self.stored.get((index, name, True))
        for entry in (first, done):
            if entry is not None:
                self.state.entries.append(entry)
                self.state.seconds += sum(entry.phases_s.values())
        return done


def in_evidence(entry: BootEntry, path: Path, directory: Path) -> BootEntry:
    """`entry` with each round's run directory taken below the evidence's runs/ (a goodput race's)."""
    rounds = []
    for number, by_scenario in enumerate(entry.rounds):
        moved = {}
        for name, result in by_scenario.items():
            target = below_runs(result.dir, directory)
            if target is None:
                raise Damaged(str(path), f"rounds.{number}.{name}.dir", f"{result.dir[:200]!r} is not a load run of the "
                              "evidence's runs/", "pack runs/ with every measured round's records, as rig tune wrote them")
            moved[name] = result.model_copy(update={"dir": str(target)})
        rounds.append(moved)
    return entry.model_copy(update={"rounds": rounds})


def read_boots(directory: Path, goodput: bool = False) -> dict[tuple[int, str, bool], BootEntry]:
    """Every finished boot entry of the race, by (position, candidate, burn-in); a goodput race's
    with its rounds read from the evidence's runs/."""
    stored = {}
    for path in sorted((directory / "boots").glob("*.json")):
        if path.name.endswith(IN_PROGRESS):
            continue
        entry = BootEntry.read(path)
        if goodput and entry.measured:
            entry = in_evidence(entry, path, directory)
        stored[(entry.index, entry.arm, path.name.endswith(".burn-in.json"))] = entry
    return stored


def replay(directory: Path) -> tuple[RacePlan, RaceState, RaceResult]:
    plan = RacePlan.read(directory)
    state = ReplayRacer(plan, directory, read_boots(directory, goodput=bool(plan.slos))).run()
    return plan, state, analyze(plan, state)


def _interval(row: Row) -> str:
    if row.vs_winner is None or row.delta_pct is None:
        return "none"
    return f"{percent(row.delta_pct)} [{percent(row.vs_winner[0])}, {percent(row.vs_winner[1])}]"


def _same(written: object, replayed: object) -> bool:
    """Equal, floats to 1e-9 relative: the race's least-squares fit, run by another machine's BLAS,
    differs in the last digits (1e-13 on an H100 host against this one), never in a printed one."""
    if isinstance(written, float) or isinstance(replayed, float):
        return (isinstance(written, (int, float)) and isinstance(replayed, (int, float))
                and math.isclose(written, replayed, rel_tol=1e-9, abs_tol=1e-12))
    if isinstance(written, list) and isinstance(replayed, list):
        return len(written) == len(replayed) and all(_same(a, b) for a, b in zip(written, replayed))
    if isinstance(written, dict) and isinstance(replayed, dict):
        return written.keys() == replayed.keys() and all(_same(written[k], replayed[k]) for k in written)
    return written == replayed


def _as_written(directory: Path, state: RaceState, result: RaceResult) -> dict[str, str]:
    """Whether looks.json and tune.json hold what the replay decided."""
    out = {}
    looks_path, result_path = directory / LOOKS_FILE, directory / RESULT_FILE
    written_looks = Looks.read_file(looks_path, ENTRY_MAX_BYTES).looks if looks_path.exists() else None
    out["looks.json as written"] = ("missing" if written_looks is None else
                                    "the replay's" if _same([look.model_dump() for look in written_looks],
                                                       [look.model_dump() for look in state.looks])
                                    else "differs from the replay")
    if result_path.exists():
        written = load_json_file(result_path, ENTRY_MAX_BYTES, str(result_path))
        replayed = json.loads(result.json_text())
        same = isinstance(written, dict) and all(_same(written.get(key), replayed[key]) for key in
                                                 ("winner", "tied", "stop", "boots", "burn_ins", "rows"))
        out["tune.json as written"] = "the replay's" if same else "differs from the replay"
    else:
        out["tune.json as written"] = "missing"
    return out


class RaceKind(Kind):
    name = "race"
    method = ("the race replayed from its boot entries through rig.tune.run.Racer's own loop, rule and constraint checks "
              "(each boot taken from the evidence), and rig.tune.result.analyze's ranked table; looks.json and tune.json "
              "held to the replay")

    def compute(self, directory: Path) -> dict[str, str]:
        plan, state, result = replay(directory)
        out = {
            "answer": headline(result),
            "winner": result.winner,
            "stop": result.stop_text,
            "not told apart": ", ".join(result.tied) or "none",
            "boots spent": f"{result.boots} measured, {result.burn_ins} burn-in(s)",
            "looks": str(len(state.looks)),
            "eliminated": ", ".join(row.candidate for row in result.rows if row.candidate in state.eliminated) or "none",
        }
        for row in result.rows:
            out[f"figure {row.candidate}"] = "none" if row.figure is None else f"{row.figure:.4g}"
            out[f"vs best {row.candidate}"] = _interval(row)
            left = state.eliminated.get(row.candidate)
            out[f"left {row.candidate}"] = f"after round {left[0] + 1}" if left else "stayed"
            out[f"status {row.candidate}"] = row.status
        return out | _as_written(directory, state, result)
