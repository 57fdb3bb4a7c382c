"""`rig sweep RECIPE --scenario S --rates 1,2,4 | --concurrency 1,4,16 --goodput ttft<=2s,tpot<=50ms`:
one scenario at a series of loads on one boot, as a table and a picture of throughput, goodput
and latency percentiles against load, and the knee: the highest load at which at least the
given share of requests met every SLO (AIPerf's SLA search, vLLM's --goodput).

The boot's warmup runs once, at the highest load (the largest batch shapes, the most autotuning);
the loads are then measured lowest first. Every point is an ordinary run directory with its own
records and summary; the sweep's table, JSON and PNG are written after every point, so an
interrupted sweep keeps what it measured."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import Field

from rig.atomic import write_text_atomic
from rig.cli_args import LoadOptions
from rig.errors import RigError
from rig.exits import Exit
from rig.load.figures import SWEEP, Figure
from rig.load.goodput import SLO_KEYS, Goodput, goodput, parse_slos
from rig.load.kinds import KINDS
from rig.load.prompts import TokenCounter
from rig.load.records import read_records
from rig.load.report import UNBOUND_LEGEND, UNBOUND_MARK
from rig.load.scenarios import MAX_RATE, MAX_USERS, Scenario
from rig.load.summary import RunSummary
from rig.loadrun.runner import LoadTarget, results_root, run_scenario
from rig.loadrun.session import acquire_target, default_small, note_run, scenarios_for, settle_estimate, warmup_pending
from rig.png import save_png
from rig.typed import Typed, Versioned

SWEEP_SCHEMA = 1

MAX_POINTS = 32
DEFAULT_SHARE = 0.9



def _legend(axis: Any, **options: Any) -> None:
    """A legend where something on the axis is labelled (matplotlib warns on an empty one)."""
    if axis.get_legend_handles_labels()[0]:
        axis.legend(**options)

def parse_loads(text: str, option: str, integer: bool) -> list[float]:
    """'1,2,4' -> [1.0, 2.0, 4.0]: positive, distinct, at most MAX_POINTS, within the scenario bounds."""
    high = MAX_USERS if integer else MAX_RATE
    fix = f"write e.g. {option} 1,2,4 (at most {MAX_POINTS} values, each {'a whole number ' if integer else ''}from "\
          f"{'1' if integer else 'above 0'} to {high:g})"
    values: list[float] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            value = int(part) if integer else float(part)
        except ValueError:
            raise RigError("command line", option, f"{part!r} is not a {'whole number' if integer else 'number'}", fix) from None
        if not (0 < value <= high) or not math.isfinite(value):
            raise RigError("command line", option, f"{part} is out of range", fix)
        values.append(float(value))
    if not values or len(values) > MAX_POINTS or len(set(values)) != len(values):
        raise RigError("command line", option, f"{len(values)} load(s), {len(set(values))} distinct", fix)
    return sorted(values)


def point_scenario(scenario: Scenario, load: float, by_rate: bool) -> Scenario:
    if by_rate:
        assert scenario.arrivals is not None
        return scenario.with_changes(arrivals={**scenario.arrivals.model_dump(exclude_none=True), "rate": load})
    return scenario.with_changes(users=int(load), spawn_rate=float(int(load)))


def _label(load: float, by_rate: bool) -> str:
    return f"rate-{load:g}" if by_rate else f"c-{int(load)}"


class SweepPoint(Typed):
    """One load of a sweep: what it delivered, its goodput and latency percentiles, and whether
    its run may be used."""

    load: float
    achieved_rate: float | None
    requests_per_s: float
    output_tok_s: float
    goodput_requests_per_s: float | None
    slo_share: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    completed: int
    problems: list[str]  # why the run's headline may not be used (RunSummary.problems)
    dir: str
    # the columns whose figure the client's timing could move beyond its limit (as a load test's table
    # marks them: rig.load.report): printed marked, and the goodput share not usable where it counts one
    client_unusable: list[str] = Field(default_factory=list)


class Knee(Typed):
    load: float | None
    status: str
    above: bool = False  # every load met the SLOs: the knee is at the highest load or above


class SweepReport(Versioned):
    """sweep.json."""

    schema_version: int = Field(SWEEP_SCHEMA, alias="schema")
    title: str
    unit: str
    slos_s: dict[str, float] | None
    share: float
    knee: Knee
    complete: bool
    points: list[SweepPoint]


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a point: the points measured so far are kept (and already written)."""

    def __init__(self, rows: list[SweepPoint]) -> None:
        super().__init__("interrupted")
        self.rows = rows


# The sweep's figures (rig.load.figures.SWEEP): its rates, then its latency percentiles.
RATES = tuple(figure for figure in SWEEP if figure.quantile is None)
PERCENTILES = tuple(figure for figure in SWEEP if figure.quantile is not None)
# The figure (its client bound: rig.load.client_error.BOUNDS) of each column, and the columns whose
# figures an SLO's per-request values are the samples of.
BOUNDED_COLUMNS = {figure.name: figure.name for figure in SWEEP}
SLO_COLUMNS = {key: tuple(f.name for f in PERCENTILES if f.samples == key) for key in SLO_KEYS}  # every SLO key's per-request figure


def point_row(load: float, summary: RunSummary, good: Goodput | None, run_dir: Path) -> SweepPoint:
    metrics = summary.metrics
    bounds = summary.client.figures
    client_unusable = [column for column, figure in BOUNDED_COLUMNS.items() if figure in bounds and not bounds[figure].holds]
    problems = summary.problems()
    for key in good.slos_s if good else ():
        moved = [column for column in SLO_COLUMNS[key] if column in client_unusable]
        if moved:
            problems.append(f"goodput: the client's timing could move {', '.join(moved)} beyond its limit, and the {key} SLO "
                            "counts those requests")

    completed = metrics.requests.completed
    return SweepPoint(load=load, achieved_rate=metrics.arrivals.achieved_rate if metrics.arrivals else None,
                      requests_per_s=completed / metrics.window.seconds,
                      goodput_requests_per_s=good.requests_per_s if good else None, slo_share=good.share if good else None,
                      **{figure.name: figure.read(metrics) for figure in SWEEP},
                      completed=completed, problems=problems, dir=str(run_dir), client_unusable=client_unusable)


def knee(rows: list[SweepPoint], share: float) -> Knee:
    """The highest load such that it and every lower load met the SLOs for at least `share` of
    requests, in runs whose figures may be used. A point that is not usable ends the walk: beyond
    it the knee is unknown, and the result says so rather than skipping it."""
    best = None
    for row in rows:
        if row.problems:
            return Knee(load=best, status=f"unknown beyond {best if best is not None else 'the first load'}: the run at "
                        f"{row.load:g} is not usable ({'; '.join(row.problems)[:200]})")
        if row.slo_share is None or row.slo_share < share:
            met = "no completed request" if row.slo_share is None else f"{100 * row.slo_share:.1f}%"
            if best is None:
                return Knee(load=None, status=f"no load met the SLOs for {100 * share:g}% of requests (lowest, {row.load:g}: {met})")
            return Knee(load=best, status=f"knee at {best:g}: the next load, {row.load:g}, met the SLOs for {met} of requests")
        best = row.load
    return Knee(load=best, above=True,
                status=f"every load met the SLOs for at least {100 * share:g}% of requests: the knee is at {best:g} or above")



def _column(figure: Figure) -> tuple[str, str]:
    return figure.name, str(figure.sweep_format)


COLUMNS = [("load", "{:g}"), ("achieved_rate", "{:.2f}"), ("requests_per_s", "{:.2f}"), *map(_column, RATES),
           ("goodput_requests_per_s", "{:.2f}"), ("slo_share", "{:.1%}"), *map(_column, PERCENTILES)]
MARKERS = {"ttft": "o", "tpot": "s", "e2e": "^"}  # a latency percentile's marker in the plot, by its samples


def table(rows: list[SweepPoint], unit: str) -> str:
    header = [unit if name == "load" else name for name, _ in COLUMNS] + ["usable"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for row in rows:
        cells = ["-" if getattr(row, name) is None else form.format(getattr(row, name))
                 + (UNBOUND_MARK if name in row.client_unusable else "") for name, form in COLUMNS]
        cells.append("yes" if not row.problems else "NO: " + "; ".join(row.problems)[:160])
        lines.append("| " + " | ".join(cells) + " |")
    if any(row.client_unusable for row in rows):
        lines.append(f"\n{UNBOUND_LEGEND} (each load's own summary.md says by how much)")
    return "\n".join(lines)


def plot(rows: list[SweepPoint], path: Path, unit: str, slos: dict[str, float] | None, share: float,
         found: Knee, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loads = [row.load for row in rows]
    usable = [not row.problems for row in rows]
    figure, (through, good, latency) = plt.subplots(1, 3, figsize=(16, 4.8), layout="constrained")

    def series(axis: Any, key: str, label: str, style: str) -> None:
        points = [(x, getattr(row, key)) for x, row in zip(loads, rows) if getattr(row, key) is not None]
        if points:
            axis.plot(*zip(*points), style, label=label)

    for rate in RATES:
        series(through, rate.name, str(rate.column), "o-")
    through.set_ylabel("output tok/s")
    right = through.twinx()
    series(right, "requests_per_s", "completed req/s", "s--")
    series(right, "achieved_rate", "sent req/s", "^:")
    right.set_ylabel("requests/s")
    _legend(through, loc="upper left", fontsize=8)
    _legend(right, loc="lower right", fontsize=8)
    through.set_title("throughput")
    series(good, "goodput_requests_per_s", "goodput req/s", "o-")
    good.set_ylabel("requests/s meeting every SLO")
    share_axis = good.twinx()
    series(share_axis, "slo_share", "share meeting the SLOs", "s--")
    share_axis.axhline(share, color="C3", lw=0.8, ls=":", label=f"required share ({100 * share:g}%)")
    _legend(good, loc="upper left", fontsize=8)
    _legend(share_axis, loc="lower right", fontsize=8)
    share_axis.set_ylim(0, 1.05)
    share_axis.set_ylabel("share of requests")
    if found.load is not None:
        for axis in (through, good, latency):
            axis.axvline(found.load, color="C3", lw=1.0, alpha=0.6)
    good.set_title(f"goodput ({', '.join(f'{k}<={v * 1000:g}ms' for k, v in (slos or {}).items()) or 'no SLOs given'}); "
                   f"knee {'-' if found.load is None else ('>= ' if found.above else '') + format(found.load, 'g')}",
                   fontsize=9)
    for percentile in PERCENTILES:
        series(latency, percentile.name, f"{str(percentile.samples).upper()} p{round(100 * float(percentile.quantile or 0))}",
               MARKERS[str(percentile.samples)] + ("-" if percentile.quantile == 0.5 else "--"))
    for key, limit in (slos or {}).items():
        latency.axhline(limit * 1000, color="0.5", lw=0.8, ls=":")
        latency.text(loads[0], limit * 1000, f" {key} SLO", fontsize=7, va="bottom", color="0.4")
    latency.set_yscale("log")
    latency.set_ylabel("ms")
    _legend(latency, fontsize=7)
    latency.set_title("latency percentiles")
    for axis in (through, good, latency):
        axis.set_xlabel(unit)
        for x, ok in zip(loads, usable):
            if not ok:
                axis.axvspan(x * 0.98, x * 1.02, color="red", alpha=0.15)
    figure.suptitle(title + "  (red: run not usable)", fontsize=10)
    save_png(figure, path)
    plt.close(figure)


def write_sweep(out: Path, rows: list[SweepPoint], unit: str, slos: dict[str, float] | None, share: float,
                title: str, complete: bool) -> Knee:
    found = knee(rows, share) if slos else Knee(load=None, status="no --goodput SLOs given: no knee")
    if not complete:
        found.status += " (sweep interrupted: later loads not measured)"
    text = "\n".join([f"# {title}", "", table(rows, unit), "", f"Knee: {found.status}.",
                      f"SLOs: {', '.join(f'{k}<={v * 1000:g}ms' for k, v in (slos or {}).items()) or 'none'}; "
                      f"share required: {100 * share:g}%."]) + "\n"
    write_text_atomic(out / "sweep.md", text)
    write_text_atomic(out / "sweep.json", SweepReport(title=title, unit=unit, slos_s=slos, share=share, knee=found,
                                                      complete=complete, points=rows).json_text())
    plot(rows, out / "sweep.png", unit, slos, share, found, title)
    return found


def sweep(ref: str | None, scenario_ref: str, rates: str | None, concurrency: str | None, slos_text: str | None,
          share: float, load_options: LoadOptions, duration_s: float | None = None, url: str | None = None,
          model: str | None = None, progress: bool = True) -> int:
    if (rates is None) == (concurrency is None):
        raise RigError("command line", "--rates/--concurrency", "give exactly one of them", "e.g. --rates 1,2,4 or --concurrency 1,4,16")
    if not 0 < share <= 1:
        raise RigError("command line", "--slo-share", f"{share} is not a share of requests", "write e.g. --slo-share 0.9")
    by_rate = rates is not None
    loads = parse_loads(rates or concurrency or "", "--rates" if by_rate else "--concurrency", integer=not by_rate)
    slos = parse_slos(slos_text)
    base = scenarios_for([scenario_ref], False, duration_s)[0]  # validated before anything boots or is written
    if by_rate and not KINDS[base.kind].sweeps_rate:
        raise RigError("command line", "--rates", f"scenario {base.name} is {base.kind}: a rate needs an open_loop scenario",
                       "sweep --concurrency, or pick an open_loop scenario (e.g. open-loop)")
    if not by_rate and KINDS[base.kind].arrival_driven:
        raise RigError("command line", "--concurrency", f"scenario {base.name} is {base.kind}: its load is its arrivals",
                       "sweep --rates, or pick a closed-loop scenario")
    for load in loads:
        point_scenario(base, load, by_rate)  # every point within the scenario's bounds, checked up front
    target, driver = acquire_target(ref, url, model)
    scenario = scenarios_for([scenario_ref], load_options.sized(default_small(target.resolved)), duration_s)[0]
    unit = "request rate (req/s)" if by_rate else "concurrency (users)"
    out = results_root(target.record.recipe) / f"sweep-{scenario.name}"
    title = f"rig sweep {target.record.ref} {scenario.name} (boot {target.boot_id})"
    rows: list[SweepPoint] = []
    complete = False
    try:
        rows, complete = _measure(target, scenario, loads, by_rate, slos, out, load_options.workers, progress, unit, share, title)
    except SweepInterrupted as stop:
        rows = stop.rows
    finally:
        if driver is not None:
            driver.down(target.record)
    found = write_sweep(out, rows, unit, slos, share, title, complete) if rows else Knee(load=None, status="nothing measured")
    print((out / "sweep.md").read_text() if rows else "sweep: nothing measured")
    print(f"results: {out} (sweep.md, sweep.json, sweep.png; one run directory per load)")
    if not complete:
        return Exit.INTERRUPTED
    return Exit.UNUSABLE if found.load is None and slos else Exit.OK


def _measure(target: LoadTarget, scenario: Scenario, loads: list[float], by_rate: bool, slos: dict[str, float] | None,
             out: Path, workers: int | None, progress: bool, unit: str, share: float, title: str) -> tuple[list[SweepPoint], bool]:
    counter = TokenCounter(target.model_dir, target.record.base_url, target.record.served_model)
    rows: list[SweepPoint] = []
    heaviest = point_scenario(scenario, loads[-1], by_rate)
    if warmup_pending(target.record, heaviest):  # the heaviest point's shapes hold the lighter ones'
        summary = run_scenario(target, heaviest, out / f"warmup-{_label(loads[-1], by_rate)}", workers, counter, warmup=True,
                               progress=progress)
        note_run(target.record, out / f"warmup-{_label(loads[-1], by_rate)}", summary, heaviest)
        if summary.interrupted:
            raise SweepInterrupted([])
    for load in loads:
        point = point_scenario(scenario, load, by_rate)
        run_dir = out / _label(load, by_rate)
        summary = run_scenario(target, point, run_dir, workers, counter, progress=progress,
                               settle_s=settle_estimate(target.record, point))
        note_run(target.record, run_dir, summary, point)
        rows.append(point_row(load, summary, goodput(read_records(run_dir), summary, slos) if slos else None, run_dir))
        write_sweep(out, rows, unit, slos, share, title, complete=False)
        if progress:
            print(f"sweep: {unit} {load:g}: {rows[-1].output_tok_s:.1f} tok/s, SLO share "
                  f"{'-' if rows[-1].slo_share is None else format(rows[-1].slo_share, '.1%')}")
        if summary.interrupted:
            raise SweepInterrupted(rows)
    return rows, True
