"""`rig loadtest <recipe>`: the command line's handler. Booting or attaching, the warmup rule and the
runs themselves are rig.load.session's; this prints and writes the series' table."""

from __future__ import annotations

from rig.atomic import write_text_atomic
from rig.exits import Exit
from rig.load.report import markdown_table, notes
from rig.load.runner import results_root
from rig.load.scenarios import load_scenario
from rig.load.session import DEFAULT_SCENARIOS, Interrupted, acquire_target, default_small, run_scenarios, scenarios_for
from rig.load.summary import RunSummary


def loadtest(ref: str | None, names: list[str] | None, small: bool | None, workers: int | None, duration_s: float | None = None,
             remote_workers: int = 0, master_bind: str = "127.0.0.1", url: str | None = None, model: str | None = None,
             boot_id: str | None = None, flush_cache: bool = False, port: int | None = None) -> int:
    """Measure a recipe's server (booting it if nothing is up), or with `url` a server rig did not start."""
    names = names or DEFAULT_SCENARIOS
    for name in names:  # a bad scenario is refused before anything boots or is written
        load_scenario(name)
    if duration_s is not None:
        scenarios_for(names, False, duration_s)
    target, driver = acquire_target(ref, url, model, boot_id, port)
    record, resolved = target.record, target.resolved
    root = results_root(record.recipe)
    small = default_small(resolved) if small is None else small
    interrupted = False
    summaries: list[RunSummary] = []
    try:
        summaries = run_scenarios(target, names, small, workers, root, duration_s=duration_s,
                                  remote_workers=remote_workers, master_bind=master_bind, flush_cache=flush_cache)
    except Interrupted as stop:
        summaries, interrupted = stop.summaries, True
    finally:
        if driver is not None:
            driver.down(record)
    table = markdown_table(summaries)
    lines = [table, ""] + [n for s in summaries for n in notes(s)]
    write_text_atomic(root / "summary.md", "\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))
    print(f"\nresults: {root}")
    if interrupted:
        return Exit.INTERRUPTED
    return Exit.UNUSABLE if any(s.problems() for s in summaries if not s.warmup) else Exit.OK
