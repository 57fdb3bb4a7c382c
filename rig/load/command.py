"""`rig loadtest <recipe>`: boot if needed, discard the first run after the boot, run scenarios."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from rig.boot import BootRecord, current_boot, driver_for
from rig.boot.native import NativeDriver
from rig.load.report import markdown_table, notes
from rig.load.runner import LoadTarget, note_run, results_root, run_scenario, warmup_pending
from rig.load.scenarios import TokenCounter, load_scenario
from rig.recipe import Resolved, load

DEFAULT_SCENARIOS = ["prose-c1", "code-c1", "c3000"]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the interrupted run's summary is written; callers stop and report."""

    def __init__(self, summaries: list[dict[str, Any]]) -> None:
        super().__init__("interrupted")
        self.summaries = summaries


def model_dir_for(resolved: Resolved) -> str | None:
    """Where the served tokenizer can be read on this host."""
    if resolved.recipe.model.source == "generated":
        return NativeDriver().model_path(resolved)
    return os.environ.get("RIG_MODEL_DIR")


def default_small(resolved: Resolved) -> bool:
    return resolved.recipe.driver == "native"


def run_scenarios(target: LoadTarget, names: list[str], small: bool, workers: int | None, root: Path,
                  progress: bool = True, warmup: bool = True, duration_s: float | None = None,
                  remote_workers: int = 0, master_bind: str = "127.0.0.1") -> list[dict[str, Any]]:
    """The warmup rule lives here: a boot's first run is run, kept, marked and left out of results."""
    scenarios = [load_scenario(name).scaled(small) for name in names]
    if duration_s:
        scenarios = [replace(s, duration_s=duration_s) for s in scenarios]
    counter = TokenCounter(target.model_dir, target.record.base_url, target.record.served_model)
    summaries = []
    plan = [(scenario, True) for scenario in scenarios[:1] if warmup and warmup_pending(target.record)]
    plan += [(scenario, False) for scenario in scenarios]
    for scenario, is_warmup in plan:
        out = root / (f"warmup-{scenario.name}" if is_warmup else scenario.name)
        summaries.append(run_scenario(target, scenario, out, workers, counter, warmup=is_warmup, progress=progress,
                                      remote_workers=remote_workers if scenario.distributed else 0, master_bind=master_bind))
        note_run(target.record, out, warmup=is_warmup)
        if summaries[-1]["interrupted"]:
            raise Interrupted(summaries)
    return summaries


def loadtest(ref: str, names: list[str] | None, small: bool | None, workers: int | None, duration_s: float | None = None,
             remote_workers: int = 0, master_bind: str = "127.0.0.1") -> int:
    resolved = load(ref)
    record: BootRecord | None = current_boot(resolved.recipe.name)
    driver = None
    if record is None:
        driver = driver_for(resolved)
        record = driver.up(resolved)
    elif record.ref != resolved.ref and ":" in ref:
        print(f"note: {record.ref} is up (boot {record.boot_id}); measuring it, not {resolved.ref}")
    target = LoadTarget(resolved, record, model_dir_for(resolved))
    root = results_root(resolved.recipe.name)
    small = default_small(resolved) if small is None else small
    interrupted = False
    try:
        summaries = run_scenarios(target, names or DEFAULT_SCENARIOS, small, workers, root, duration_s=duration_s,
                                  remote_workers=remote_workers, master_bind=master_bind)
    except Interrupted as stop:
        summaries, interrupted = stop.summaries, True
    finally:
        if driver is not None:
            driver.down(record)
    table = markdown_table(summaries)
    lines = [table, ""] + [n for s in summaries for n in notes(s)]
    (root / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))
    print(f"\nresults: {root}")
    if interrupted:
        return 130
    invalid = [s for s in summaries if not s["warmup"] and not s["client"]["valid"] and s["client"].get("note") is None]
    return 4 if invalid else 0
