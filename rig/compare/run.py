"""`rig compare`: boots each arm in ABBA order through the boot drivers, discards each scenario's
first run after every boot, runs R interleaved rounds, checks greedy identity, shuts every boot
down (also when it fails), and writes each finished boot at once. Each attempt at a boot has its
own directory, so a resumed comparison redoes exactly the boots that did not finish, and a
server left behind by a killed attempt is stopped before its redo.

The boot-state control (on unless --no-burn-in): a boot that compiled its torch.compile graph can
decode slower for its whole life than boots that reused it (1-2% with vLLM on an H200), and under
ABBA the machine's first boot is always the baseline's. So a measured boot whose engine log says it compiled
(its caches did not hold its arm's configuration yet) becomes a burn-in as soon as it is healthy
(measured, kept, paired with nothing; no quality reference, no identity check) and is booted again
at once; if that second boot compiles too, the caches do not persist and redoing stops. A resumed
comparison may run on a fresh host, whose caches hold nothing of the earlier burn-ins: there each
arm's first boot is booted again when it compiles, and its position's earlier burn-in moves to
boots/superseded/. Where the
engine's log cannot say (transformers serve), the comparison opens with a burn-in boot of the
baseline arm instead."""

from __future__ import annotations

import hashlib
import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import JsonValue

from rig import paths
from rig.atomic import write_text_atomic
from rig.boot import BootFailed, BootPreempted, driver_for, driver_named
from rig.boot.checks import check_boot, read_manifests
from rig.boot.record import BootRecord
from rig.chat import stream_chat
from rig.compare.arms import Arm, recorded_spec
from rig.compare.coherence import BootCoherence, boot_coherence, prompt_scripts_of
from rig.compare.model import (
    BURN_IN_BLOCK,
    ENTRY_MAX_BYTES,
    IMPORTED_INDEX,
    BootEntry,
    BootQuality,
    ComparePlan,
    QualityReference,
    RunResult,
)
from rig.compare.percentiles import LatencyHistogram
from rig.compare.scoring import check_scoring_tokenizer
from rig.compare.sequential import Decision, Look, UntilDecided, look_line
from rig.compare.trust import confined, held_to_plan
from rig.deploy.recipe import Resolved
from rig.errors import Damaged, NotFound, RigError
from rig.load.figures import LATENCY, LATENCY_SAMPLES
from rig.load.goodput import goodput
from rig.load.metrics import latency_samples
from rig.load.records import RequestRecord, read_records
from rig.load.request_metrics import done_in_window
from rig.load.scenarios import greedy_prompts, load_scenario
from rig.load.summary import RunSummary
from rig.load.wire import BootMarker
from rig.loadrun.runner import LoadTarget
from rig.loadrun.session import Interrupted, model_dir_for, run_scenarios


def greedy_identity(base_url: str, model: str, small: bool) -> dict[str, str]:
    """Each fixed prompt at temperature 0 and concurrency 1, hashed."""
    prompts, max_tokens = greedy_prompts(small)
    hashes = {}
    for prompt in prompts:
        text = stream_chat(base_url, model, prompt.text, max_tokens, out=io.StringIO()).text
        hashes[prompt.name] = hashlib.sha256(text.encode()).hexdigest()
    return hashes


QUALITY_REFERENCE = "quality-reference.json"


def boot_quality(plan: ComparePlan, out: Path, resolved: Resolved, record: BootRecord, baseline: bool) -> BootQuality:
    """This boot's greedy continuations of the probe set and its scores of the comparison's reference
    continuation; the first baseline boot's continuations become that reference."""
    from rig.compare.scoring import collect, probes

    path = out / QUALITY_REFERENCE
    reference = QualityReference.read_file(path, ENTRY_MAX_BYTES).generations if path.exists() else None
    chosen = probes([load_scenario(name).prompt_set for name in plan.scenarios])
    _, max_tokens = greedy_prompts(plan.small)
    quality = collect(record.base_url, record.served_model or "", resolved.recipe.engine.name, chosen, max_tokens, reference,
                      defines_reference=baseline)
    if reference is None and baseline:
        generations = {name: g.model_copy(update={"top": None}) for name, g in quality.generations.items()}
        write_text_atomic(path, QualityReference(generations=generations).json_text(indent=None))
    return quality


def boot_coherence_of(plan: ComparePlan, entry: BootEntry) -> BootCoherence | None:
    """The boot's load-test outputs over its usable rounds (None: no usable round)."""
    dirs = [Path(r.dir) for round_results in entry.rounds for r in round_results.values() if r.usable]
    scripts = prompt_scripts_of([load_scenario(name).prompt_set for name in plan.scenarios])
    return boot_coherence(dirs, scripts) if dirs else None


def run_result(summary: RunSummary, records: list[RequestRecord], out_dir: Path, slos: dict[str, float] | None) -> RunResult:
    """What a comparison keeps of one round: its headline, why it may not be used, its goodput,
    and its window's per-request latencies (ms) for the boot's pooled percentiles."""
    window = summary.metrics.window
    samples = latency_samples(done_in_window(records, window.start, window.end))
    latency = {name: LatencyHistogram.of(1000 * value for value in getattr(samples, name)) for name in LATENCY_SAMPLES}
    telemetry = summary.observations.gpu if summary.observations else None
    gpu = {index: t for index, t in telemetry.gpus.items() if t.serving} if telemetry and telemetry.gpus else None
    return RunResult(scenario=summary.name, dir=str(out_dir), figures=summary.figures(), problems=summary.problems(),
                     goodput=goodput(records, summary, slos) if slos else None, latency=latency, gpu=gpu,
                     window=(window.start, window.end),
                     problems_by_figure={figure.name: summary.problems(figure.name) for figure in LATENCY},
                     client_bounds={name: bound.bound for name, bound in summary.client.figures.items()})


# Statistics whose processes' values combine by their extreme, not their mean: the last process
# to finish measuring is when the measurement ended (each TP rank measures its own).
_LATEST, _EARLIEST = {"measured_until"}, {"measuring_from"}


def merged_adapter_stats(manifests: list[dict]) -> dict[str, JsonValue]:
    """adapter -> statistic -> {count, sum, mean} over every engine process's manifest (each TP rank
    records its own): counts and sums add up; a time of the measurement's end is the latest."""
    merged: dict[str, dict[str, dict[str, float]]] = {}
    for manifest in manifests:
        for name, adapter in manifest.get("adapters", {}).items():
            for stat, value in (adapter.get("stats") or {}).items():
                if not isinstance(value, dict) or not isinstance(value.get("mean"), (int, float)):
                    continue
                into = merged.setdefault(name, {}).setdefault(stat, {"count": 0, "sum": 0.0, "mean": float(value["mean"])})
                into["count"] += int(value.get("count", 1))
                into["sum"] += float(value.get("sum", value["mean"]))
                if stat in _LATEST or stat in _EARLIEST:
                    pick = max if stat in _LATEST else min
                    into["mean"] = pick(into["mean"], float(value["mean"]))
                else:
                    into["mean"] = into["sum"] / into["count"]
    return merged  # type: ignore[return-value]


def _stat(stats: object, name: str) -> float | None:
    value = stats.get(name) if isinstance(stats, dict) else None
    mean = value.get("mean") if isinstance(value, dict) else None
    return float(mean) if isinstance(mean, (int, float)) else None


def leave_out_rounds_measured_during(entry: BootEntry) -> None:
    """An adapter that measures its own effect in place (gpu_delay alternates with and without its
    spin over its first steps) records when it began (`measuring_from`) and until when
    (`measured_until`); a round whose window began before the end saw the alternation, not the arm,
    and is left out with the reason; every round, when the measurement never ended."""
    for name, stats in entry.adapter_stats.items():
        if _stat(stats, "measuring_from") is None and _stat(stats, "measured_until") is None:
            continue
        until_s = _stat(stats, "measured_until")
        for round_results in entry.rounds:
            for result in round_results.values():
                if until_s is None:
                    result.problems.append(f"{name} was still measuring its effect (with and without it, alternately) "
                                           "when the boot ended: too few engine steps for its measurement")
                elif result.window is not None and result.window[0] < until_s:
                    result.problems.append(f"{name} was still measuring its effect (with and without it, alternately) "
                                           f"until {until_s - result.window[0]:.1f} s into this round's window")


def _attempt_dir(out: Path, index: int, arm: Arm) -> tuple[int, Path]:
    root = out / "runs" / f"{index:02d}-{arm.name}"
    attempt = 1 + sum(1 for p in root.glob("attempt-*") if p.is_dir()) if root.exists() else 1
    return attempt, root / f"attempt-{attempt}"


IN_PROGRESS = ".in-progress.json"  # a boot's marker while it runs (what a resume stops first)


def _in_progress(out: Path, index: int, arm: Arm) -> Path:
    return out / "boots" / f"{index:02d}-{arm.name}{IN_PROGRESS}"


def finished_boots(out: Path) -> int:
    """Boot entries the comparison in `out` has written (a running boot's marker is not one)."""
    return sum(1 for path in (out / "boots").glob("*.json") if not path.name.endswith(IN_PROGRESS)) if (out / "boots").is_dir() else 0


def stop_leftover(out: Path, index: int, arm: Arm, recipe: str) -> str | None:
    """A killed attempt can leave its server running: stop it, and only it (its boot id, or, when
    the kill came before the boot had one, this recipe's boot that started after the attempt)."""
    marker = _in_progress(out, index, arm)
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


class ResolvedArms:
    """Each arm's recipe, resolved once per comparison: the variant it boots and the recipe as the arm
    runs it (rig.compare.arms.Arm.base / resolve)."""

    def __init__(self, plan: ComparePlan) -> None:
        arms = plan.arms + ([plan.control] if plan.control else [])
        self.by_name = {arm.name: (arm.base(plan.recipe), arm.resolve(plan.recipe)) for arm in arms}

    def __getitem__(self, arm: Arm) -> tuple[Resolved, Resolved]:
        return self.by_name[arm.name]


def run_boot(plan: ComparePlan, index: int, block: int, arm: Arm, out: Path, progress: bool,
             burn_in: bool = False, arms: ResolvedArms | None = None, redo_if_compiled: bool = False,
             port: int | None = None) -> BootEntry:
    """One boot: up, checks, warmup and rounds, then (a measured boot) greedy identity and quality
    probes, down. A burn-in boot runs the rounds only: its figures show the boot-state effect. With
    `redo_if_compiled`, a boot whose engine log says it compiled becomes a burn-in as soon as it is
    healthy (it defines no quality reference, enters no identity check), and the caller boots again."""
    base, resolved = (arms or ResolvedArms(plan))[arm]
    driver = driver_named(plan.driver) if plan.driver else driver_for(base)  # --driver, else the recipe's own
    attempt, runs_dir = _attempt_dir(out, index, arm)
    runs_dir.mkdir(parents=True)  # an attempt killed while booting still counts as one
    entry = BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=arm is plan.control and not burn_in,
                      attempt=attempt, started=time.time(), burn_in=burn_in)
    marker = _in_progress(out, index, arm)
    since = time.time()
    write_text_atomic(marker, BootMarker(attempt=attempt, boot_id=None, since=since).json_text())
    clock = _PhaseClock(entry)
    try:
        # what another arm sets, this one does not inherit from rig's environment (the arms differ by their overlays only)
        others = {key for other in [*plan.arms, *([plan.control] if plan.control else [])] for key in other.overlay()}
        record = driver.up(base, overlay=arm.overlay(), port=port, progress=progress, cold_caches=plan.cold_caches,
                           unset=others - set(arm.overlay()))
    except BootPreempted:
        marker.unlink(missing_ok=True)  # its job is gone: nothing to stop on resume, and no entry, so it is booted again
        raise
    except BootFailed as error:
        entry.voided, entry.problems = True, [str(error)]
        marker.unlink(missing_ok=True)
        return entry
    except RigError:
        # Refused before anything started (the recipe already up, its port taken): no server to
        # stop, so no marker either (a later resume would stop whatever of the recipe started since).
        marker.unlink(missing_ok=True)
        raise
    clock.lap("up")
    if redo_if_compiled and record.compile_cache.log == "compiled":
        burn_in = entry.burn_in = True
    write_text_atomic(marker, BootMarker(attempt=attempt, boot_id=record.boot_id, since=since).json_text())
    entry.boot_id, entry.healthy_after_s, entry.log_path = record.boot_id, record.healthy_after_s, record.log_path
    entry.fingerprint = record.fingerprint
    try:
        check = check_boot(record, resolved, arm.overlay())
        entry.check = check
        clock.lap("checks")
        if not check.ok:
            entry.voided, entry.problems = True, check.problems
            return entry
        target = LoadTarget(resolved, record, model_dir_for(resolved))
        for round_index in range(0 if entry.control else plan.rounds):
            shift = round_index % len(plan.scenarios)
            names = plan.scenarios[shift:] + plan.scenarios[:shift]  # interleaved: the order rotates per round
            root = runs_dir / f"round-{round_index}"
            summaries = run_scenarios(target, names, plan.small, plan.workers, root, progress=progress,
                                      duration_s=plan.duration_s)
            entry.rounds.append({s.name: run_result(s, read_records(root / s.name), root / s.name, plan.slos)
                                 for s in summaries if not s.warmup})
        clock.lap("load")
        if not burn_in:
            entry.greedy = greedy_identity(record.base_url, record.served_model or "", plan.small)
            clock.lap("greedy")
            entry.quality = boot_quality(plan, out, resolved, record, baseline=arm is plan.arms[0] and not entry.control)
            entry.coherence = boot_coherence_of(plan, entry)
            clock.lap("quality")
        # Evidence that the adapters ran on their targets exists only once the model has served.
        after = check_boot(record, resolved, arm.overlay(), after_load=True)
        entry.check = after
        if not after.ok:
            entry.voided, entry.problems = True, after.problems
        entry.adapter_stats = merged_adapter_stats(read_manifests(record.manifest_dir))
        leave_out_rounds_measured_during(entry)
    except Exception as error:  # noqa: BLE001 - whatever broke after the boot voids this boot, not the comparison
        entry.voided, entry.problems = True, [str(error) if isinstance(error, RigError) else f"{type(error).__name__}: {error}"]
    finally:
        clock.lap("checks" if "load" in entry.phases_s else "other")
        driver.down(record)
        clock.lap("down")
        marker.unlink(missing_ok=True)
        entry.compile_cache = record.compile_cache
    preempted = getattr(driver, "preempted", None)  # a scheduler's driver: was the job ended under the load?
    ended = preempted(record) if preempted is not None and entry.voided else None
    if ended is not None:
        raise BootPreempted(f"{record.ref}: the scheduler ended boot {record.boot_id} while it was measured: {ended}")
    return entry


class _PhaseClock:
    """Adds the seconds since the last lap to entry.phases_s[name] (a name may take several laps)."""

    def __init__(self, entry: BootEntry) -> None:
        self.entry, self.last = entry, time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.entry.phases_s[name] = round(self.entry.phases_s.get(name, 0.0) + now - self.last, 2)
        self.last = now


def run_compare(plan: ComparePlan, out: Path, progress: bool = True, port: int | None = None,
                until: UntilDecided | None = None, steps: bool = True) -> tuple[ComparePlan, list[BootEntry]]:
    """Every boot of the plan, finished ones read back; `--target` extends the plan by whole ABBA
    blocks until the widest headline interval is narrow enough or max_boots is reached, and `until`
    (rig.compare.sequential) one block at a time until every headline interval excludes 0 or its
    most pairs ran (its looks are written to until-decided.json). Returns the plan it ran (a resumed
    comparison's saved one, with the pairs added) and every entry. `port` (default: the recipe's) is
    where every boot listens: a fact of this host, not of the plan, so a resumed comparison may pass
    another. `steps`: with `progress`, each boot's and each run's own progress lines too (without,
    one line per boot and per look)."""
    for name in plan.scenarios:  # a bad scenario is refused before the comparison writes anything
        load_scenario(name)
    saved = _saved_plan_of_the_same_comparison(plan, out)  # a resume with another recipe hears that first
    arms = ResolvedArms(plan)  # a resumed plan has these recipe, arms and control too (checked above)
    for arm in plan.arms + ([plan.control] if plan.control else []):  # a variant may serve another tokenizer
        base = arms[arm][0]
        check_scoring_tokenizer(base.recipe.engine.name, lambda base=base: model_dir_for(base))  # no boot could score it
    out.mkdir(parents=True, exist_ok=True)
    if saved is not None:
        # The same arms by their recorded specs; a secret's value is never stored, so the arms
        # (with the values the server needs) are this command line's.
        saved.arms, saved.control = plan.arms, plan.control
        kept = kept_design(saved, plan)
        if kept and progress:
            print(f"compare: resuming with the saved plan's {kept} (a plan does not change on resume; "
                  "start a new comparison for another design)")
        plan = saved
    else:
        plan.write(out)
    boot_seconds: list[float] = []  # wall time of each boot this process ran (for the time left)
    looks: list[Look] = []
    while True:
        entries = _run_order(plan, out, progress, arms, port, boot_seconds, steps) + imported_entries(out, plan)
        if until is not None:
            look = until.look(plan, entries)
            looks.append(look)
            Decision(rule=until, looks=looks).write(out)
            if progress:
                print(look_line(until, look))
            if look.decided or plan.boots >= until.most:
                return plan, entries
            plan.boots += 1
            plan.write(out)
            continue
        if plan.target_pct is None:
            return plan, entries
        if plan.planned_pairs is None:
            # Stein's first stage is complete: its sd alone fixes how many pairs to run.
            from rig.compare.report import planned_pairs

            plan.planned_pairs = planned_pairs(plan, entries)
            plan.write(out)
            if progress:
                print(f"compare: the first {plan.first_stage} pair(s) ask for {plan.planned_pairs} pair(s) to resolve "
                      f"+-{plan.target_pct:g}% (at most --max-boots {plan.max_boots})")
        if plan.boots >= plan.planned_pairs:
            return plan, entries
        plan.boots += 1
        plan.write(out)


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


def _saved_plan_of_the_same_comparison(plan: ComparePlan, out: Path) -> ComparePlan | None:
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


def _check_position(entry: BootEntry, path: Path, index: int, block: int, arm: Arm) -> None:
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


def _read_entry(path: Path, index: int | None = None, block: int | None = None, arm: Arm | None = None) -> BootEntry | None:
    """read_entry, held to the plan's position (index, block, arm) where given."""
    if index is None or block is None or arm is None:
        return read_entry(path)
    return read_entry(path, lambda entry: _check_position(entry, path, index, block, arm))


def supersede_burn_in(out: Path, earlier: BootEntry) -> None:
    """A position's burn-in replaced by a later one (its boot compiled again on a fresh host) moves to
    boots/superseded/: kept for reference, no longer read as the position's burn-in (its runs stay
    under runs/)."""
    path = BootEntry.path(out, earlier.index, earlier.arm, burn_in=True)
    aside = out / "boots" / "superseded" / f"{path.stem}.{earlier.boot_id or earlier.attempt}.json"
    aside.parent.mkdir(exist_ok=True)
    path.replace(aside)


def time_left(boot_seconds: list[float], boots_left: int, burn_in_seconds: tuple[float, ...] = (),
              arms_not_booted: int = 0) -> str:
    """What is left of the planned order, from the boots this process has measured so far: their
    median wall time times the boots not yet run. A compiled boot kept as a burn-in is timed apart (it
    is a one-off: the boot after it reused the caches), and comes back only as what it could add if an
    arm not booted yet compiles too (counted inside its boot's time, a compile would inflate the
    median every later estimate is made from). Printed with every boot's progress line, never stored."""
    if not boot_seconds or boots_left <= 0:
        return ""
    median = statistics.median(boot_seconds)
    text = f"; about {max(1, round(median * boots_left / 60))} min left ({boots_left} boot(s) at the median {median:.0f} s so far"
    if burn_in_seconds and arms_not_booted:
        more = statistics.median(burn_in_seconds) * arms_not_booted
        text += f"; up to {max(1, round(more / 60))} min more if the {arms_not_booted} arm(s) not booted yet compile"
    return text + ")"


def _run_order(plan: ComparePlan, out: Path, progress: bool, arms: ResolvedArms, port: int | None,
               boot_seconds: list[float], steps: bool = True) -> list[BootEntry]:
    entries = []
    order = plan.order()
    # --target's later blocks: the pairs its first stage planned (or, before that, the first stage only)
    later = max(0, (plan.planned_pairs or plan.boots) - plan.boots) * len(plan.arms)
    keeps_compiling = False  # a boot compiled again right after its burn-in: the caches do not persist
    burn_in_seconds: list[float] = []  # compiled boots kept as burn-ins, timed apart from the boot after them
    # a compiled boot can be booted again (not where the engine's log cannot say: a burn-in opens instead)
    redoes = plan.boot_state_control and not plan.cold_caches and not plan.burn_in_first
    # Arms this process has booted: any other may still compile (a resumed comparison on a fresh host
    # compiles again), which is what a further burn-in could add to the time left.
    booted: set[str] = set()
    for index, (block, arm) in enumerate(order):
        burn_in = block == BURN_IN_BLOCK
        compiled_first = None if burn_in else _read_entry(BootEntry.path(out, index, arm.name, burn_in=True), index, block, arm)
        entries += [compiled_first] if compiled_first else []
        done = _read_entry(BootEntry.path(out, index, arm.name), index, block, arm)
        if done is not None:
            keeps_compiling = keeps_compiling or (compiled_first is not None and done.compiled)
            entries.append(done)
            continue
        leftover = stop_leftover(out, index, arm, plan.recipe)
        if progress:
            role = "burn-in, paired with nothing" if burn_in else f"block {block}"
            # arms that may still compile and be booted again (never the control: its compile is kept)
            may_compile = {a.name for _, a in order[index:] if a is not plan.control} - booted if redoes and not keeps_compiling else set()
            print(f"compare: boot {index + 1}/{len(order)}: {arm.name} ({arm.spec}), {role}"
                  + (f" ({leftover})" if leftover else "")
                  + time_left(boot_seconds, len(order) - index + later, tuple(burn_in_seconds), len(may_compile)))
        started = time.monotonic()
        # The control is measured for its outputs only (no rounds): a compile changes its speed, not the
        # code it runs, so a control boot that compiled is kept, not booted again.
        # An arm's first boot in this process may compile whatever its position saw before: a resumed
        # comparison can run on a fresh host, whose caches hold nothing of the earlier burn-ins.
        redo = (plan.boot_state_control and not plan.cold_caches and not burn_in and arm is not plan.control
                and not keeps_compiling and (compiled_first is None or arm.name not in booted))
        try:
            entry = run_boot(plan, index, block, arm, out, progress and steps, burn_in=burn_in, arms=arms,
                             redo_if_compiled=redo, port=port)
            if entry.burn_in and not burn_in and not entry.voided:
                # Its caches did not hold this arm's configuration: kept as a burn-in, booted again.
                if compiled_first is not None:
                    entries.remove(compiled_first)
                    supersede_burn_in(out, compiled_first)
                entry.write(out, as_burn_in=True)
                entries.append(entry)
                if progress:
                    print(f"compare: boot {index + 1} compiled (its caches did not hold {arm.name}'s configuration): "
                          "kept as a burn-in, booting it again")
                burn_in_seconds.append(time.monotonic() - started)
                started = time.monotonic()
                entry = run_boot(plan, index, block, arm, out, progress and steps, arms=arms, port=port)
                keeps_compiling = entry.compiled
        except Interrupted:
            raise KeyboardInterrupt from None  # nothing written for this boot: a resume redoes it
        booted.add(arm.name)
        entry.write(out)
        entries.append(entry)
        # a burn-in boot of its own (an engine whose log cannot say it compiled): a one-off like a redo's
        (burn_in_seconds if burn_in else boot_seconds).append(time.monotonic() - started)
        if entry.check is not None and entry.check.unknown_settings:
            # A setting the engine does not know voids every boot of this arm alike: stop here (the
            # entry is kept) rather than spend the rest of the order on it.
            raise RigError(f"--arm {arm.spec}", "env", f"boot {index + 1} ({entry.boot_id}): {entry.check.unknown_settings[0]}",
                           "correct the variable's name in the arm (or the recipe's env) and start a new comparison")
    return entries


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
                _check_position(entry, path, index, block, arm)
                entries.append(entry)
            except (NotFound, Damaged):  # not run yet, or damaged (or not this position's): a resume redoes it
                continue
    return entries + imported_entries(out, plan)


def compare_root() -> Path:
    return paths.results_dir() / "compare" / time.strftime("%Y%m%d-%H%M%S")

