"""`rig loadtest <recipe>`: the command line's handler. Booting or attaching, the warmup rule and the
runs themselves are rig.loadrun.session's; this prints and writes the series' table.

Without --scenario the default series runs (prose-c1, code-c1, c3000, scaled down on a small box).
A run of it whose only problem is the client (its own timing could move the headline beyond the
scenario's limit: the machine is too small to drive that load and measure it) is reported as
skipped, named with its bound, and does not fail the command, as Locust's own users expect a run
the client could not drive to be named, not to fail a series that measured the rest. Named with
--scenario, the same run is NOT USABLE and fails it (exit 4): the user asked for that figure.
"""

from __future__ import annotations

from collections.abc import Callable

from rig.atomic import write_text_atomic
from rig.cli_args import LoadOptions
from rig.exits import Exit
from rig.load.client_error import share_text
from rig.load.figures import HEADLINE
from rig.load.report import brief_notes, brief_usable, markdown_table, notes, usable_text
from rig.load.scenarios import load_scenario
from rig.load.summary import RunSummary
from rig.loadrun.runner import results_root
from rig.loadrun.session import DEFAULT_SCENARIOS, Interrupted, acquire_target, default_small, run_scenarios, scenarios_for


def client_only(summary: RunSummary) -> str | None:
    """Why the client alone could not measure this run (its bound on the headline, or its own verdict),
    when that is its only problem; None when the run is usable or has another problem too."""
    if summary.warmup or summary.client.valid is not False:
        return None
    client_valid = summary.client.model_copy(update={"valid": True})
    if summary.model_copy(update={"client": client_valid}).problems():
        return None
    headline = HEADLINE[summary.kind].name
    bound = summary.client.figures.get(headline)
    if bound is not None and bound.bound is not None:
        return f"the client's timing could move {headline} by {share_text(bound.bound, bound.limit)} > {share_text(bound.limit)}"
    return "; ".join(summary.client.reasons) or "the client's own verdict"


def verdict(measured: list[RunSummary], skipped: dict[str, str]) -> str:
    """The series' answer in one line: which runs may be used, which the machine could not measure."""
    usable = [s.name for s in measured if not s.problems()]
    failed = [s.name for s in measured if s.problems() and s.name not in skipped]
    parts = [f"usable: {', '.join(usable) or 'none'}"]
    parts += [f"NOT USABLE: {', '.join(failed)} (the notes say why)"] if failed else []
    parts += [f"skipped: {name}: this machine cannot measure it ({why}; `--scenario {name}` runs it alone and reports it "
              "INVALID)" for name, why in skipped.items()]
    return "loadtest: " + "; ".join(parts)


def loadtest(ref: str | None, names: list[str] | None, load: LoadOptions, duration_s: float | None = None,
             remote_workers: int = 0, master_bind: str = "127.0.0.1", url: str | None = None, model: str | None = None,
             boot_id: str | None = None, flush_cache: bool = False, port: int | None = None, verbose: bool = False,
             slurm_workers: bool = False) -> int:
    """Measure a recipe's server (booting it if nothing is up), or with `url` a server rig did not start.
    `names` None: the default series (see the module's docstring). `verbose`: every column and note."""
    default_series = names is None
    names = names or DEFAULT_SCENARIOS
    for name in names:  # a bad scenario is refused before anything boots or is written
        load_scenario(name)
    if duration_s is not None:
        scenarios_for(names, False, duration_s)
    target, driver = acquire_target(ref, url, model, boot_id, port)
    record, resolved = target.record, target.resolved
    root = results_root(record.recipe)
    small = load.sized(default_small(resolved))
    interrupted = False
    summaries: list[RunSummary] = []
    try:
        summaries = run_scenarios(target, names, small, load.workers, root, duration_s=duration_s,
                                  remote_workers=remote_workers, master_bind=master_bind, flush_cache=flush_cache,
                                  slurm_workers=slurm_workers)
    except Interrupted as stop:
        summaries, interrupted = stop.summaries, True
    finally:
        if driver is not None:
            driver.down(record)
    measured = [s for s in summaries if not s.warmup]
    skipped = {s.name: why for s in measured if (why := client_only(s))} if default_series and not interrupted else {}

    def cell(summary: RunSummary, skip: str, otherwise: Callable[[RunSummary], str]) -> str:
        return skip if summary.name in skipped and not summary.warmup else otherwise(summary)

    answer = verdict(measured, skipped)
    full = [markdown_table(summaries, usable=lambda s: cell(s, f"skipped: {skipped.get(s.name)}", usable_text)), ""]
    full += [n for s in summaries for n in notes(s)]
    write_text_atomic(root / "summary.md", "\n".join([answer, "", *full]) + "\n")
    shown = full if verbose else [markdown_table(summaries, brief=True, usable=lambda s: cell(s, "skipped (client)", brief_usable)),
                                  ""] + [n for s in summaries if s.name not in skipped for n in brief_notes(s)]
    print(f"\n{answer}\n\n" + "\n".join(shown).rstrip())
    print(f"\nresults: {root} (summary.md: every column and note; --verbose prints them here)")
    print(answer)
    if interrupted:
        return Exit.INTERRUPTED
    failed = [s for s in measured if s.problems() and s.name not in skipped]
    return Exit.UNUSABLE if failed or len(skipped) == len(measured) else Exit.OK
