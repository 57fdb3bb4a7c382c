"""`rig compare` and `make compare`."""

from __future__ import annotations

from pathlib import Path

from rig.compare.arms import parse_arm
from rig.compare.report import analyze, write_report
from rig.compare.run import ComparePlan, compare_root, run_compare
from rig.errors import RigError
from rig.load.command import default_small
from rig.recipe import load, split_ref


def compare(recipe: str, arm_specs: list[str], control: str | None, boots: int, rounds: int, scenarios: list[str] | None,
            small: bool | None, workers: int | None, resume: str | None, progress: bool = True,
            duration_s: float | None = None) -> tuple[Path, dict]:
    name, variant = split_ref(recipe)
    if variant:
        raise RigError("command line", "recipe", "compare takes a recipe name; variants are arms", f"use --arm NAME:@{variant}")
    arms = [parse_arm(spec) for spec in arm_specs]
    if len(arms) < 2 or len({a.name for a in arms}) != len(arms):
        raise RigError("command line", "--arm", "a comparison needs at least two arms with distinct names",
                       "e.g. --arm before:DSV41_SHARED_PAD_K=0 --arm after:DSV41_SHARED_PAD_K=1")
    resolved = load(name)
    plan = ComparePlan(recipe=name, arms=arms, control=parse_arm(control) if control else None, boots=boots, rounds=rounds,
                       scenarios=scenarios or ["prose-c1"], small=default_small(resolved) if small is None else small,
                       workers=workers, duration_s=duration_s)
    out = Path(resume) if resume else compare_root()
    entries = run_compare(plan, out, progress)
    analysis = analyze(_saved_plan(out), entries)
    text = write_report(out, analysis)
    print(text)
    print(f"report: {out}/compare.md, compare.json, compare.png, boot-log-diff.txt")
    return out, analysis


def _saved_plan(out: Path) -> ComparePlan:
    import json

    return ComparePlan.from_json(json.loads((out / "plan.json").read_text()))
