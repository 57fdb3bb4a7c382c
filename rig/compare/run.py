"""`rig compare`: boots each arm in ABBA order through the boot drivers, discards each scenario's
first run after every boot, runs R interleaved rounds, checks greedy identity, shuts every boot
down (also when it fails), and writes each finished boot at once. Each attempt at a boot has its
own directory, so a resumed comparison redoes exactly the boots that did not finish, and a
server left behind by a killed attempt is stopped before its redo.

Which boot comes next is rig.compare.schedule's BootScheduler, a state machine with no I/O: the
order, the boot-state control (a measured boot that compiled becomes a burn-in and is booted again,
since a boot that compiled can decode 1-2% slower for its whole life; on a fresh host after a
resume each arm's first boot is redone when it compiles), resume, and the pairs --target or a
stopping rule add. This module executes its jobs (`run_boot`) and files each entry it says where.
Where the engine's log cannot say whether a boot compiled (transformers serve), the comparison
opens with a burn-in boot of the baseline arm instead."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from rig import paths
from rig.atomic import write_text_atomic
from rig.boot import BootFailed, BootPreempted, driver_for, driver_named
from rig.boot.checks import check_boot, read_manifests
from rig.boot.state import boots_owned_by
from rig.compare.arms import Arm
from rig.compare.entries import (
    attempt_dir,
    finished_boots,
    imported_entries,
    in_progress,
    kept_design,
    read_entry,
    read_position_entry,
    saved_plan_of_the_same_comparison,
    stop_leftover,
    supersede,
)
from rig.compare.measure import (
    ResolvedArms,
    boot_coherence_of,
    boot_quality,
    greedy_identity,
    leave_out_rounds_measured_during,
    merged_adapter_stats,
    run_result,
)
from rig.compare.model import BURN_IN_BLOCK, BootEntry, ComparePlan
from rig.compare.schedule import BootJob, BootScheduler, Done, Extended, Filing, FinishedBoot, LookDue, PairsDue
from rig.compare.scoring import check_scoring_tokenizer
from rig.compare.sequential import DECISION_FILE, Decision, Look, UntilDecided, look_line
from rig.errors import Damaged, RigError
from rig.load.records import read_records
from rig.load.scenarios import load_scenario
from rig.load.wire import BootMarker
from rig.loadrun.runner import LoadTarget
from rig.loadrun.session import Interrupted, model_dir_for, run_scenarios

# Names a race (rig.tune.run) and `rig import --compare` (rig.compare.imported) read from here.
__all__ = ["ResolvedArms", "finished_boots", "read_entry", "run_boot", "run_boot_at", "stop_leftover"]


@dataclass(frozen=True)
class BootSetup:
    """What every boot of one comparison shares."""

    plan: ComparePlan
    out: Path  # the comparison's directory
    arms: ResolvedArms  # each arm's recipes, resolved once
    port: int | None = None  # where every boot listens (None: the recipe's port)
    progress: bool = True  # each boot's and each run's own progress lines


def run_boot(job: BootJob, setup: BootSetup) -> BootEntry:
    """One boot: up, checks, warmup and rounds, then (a measured boot) greedy identity and quality
    probes, down. A burn-in boot runs the rounds only: its figures show the boot-state effect. With
    `job.redo_if_compiled`, a boot whose engine log says it compiled becomes a burn-in as soon as it
    is healthy (it defines no quality reference, enters no identity check), and the scheduler boots
    its position again."""
    plan, out, arm, index, burn_in = setup.plan, setup.out, job.arm, job.index, job.burn_in
    base, resolved = setup.arms[arm]
    driver = driver_named(plan.driver) if plan.driver else driver_for(base)  # --driver, else the recipe's own
    attempt, runs_dir = attempt_dir(out, index, arm)
    runs_dir.mkdir(parents=True)  # an attempt killed while booting still counts as one
    entry = BootEntry(index=index, block=job.block, arm=arm.name, spec=arm.spec, control=arm is plan.control and not burn_in,
                      attempt=attempt, started=time.time(), burn_in=burn_in)
    marker = in_progress(out, index, arm)
    since = time.time()
    write_text_atomic(marker, BootMarker(attempt=attempt, boot_id=None, since=since).json_text())
    clock = _PhaseClock(entry)
    try:
        # what another arm sets, this one does not inherit from rig's environment (the arms differ by their overlays only)
        others = {key for other in [*plan.arms, *([plan.control] if plan.control else [])] for key in other.overlay()}
        with boots_owned_by(f"the comparison or race writing {out} (rig, pid {os.getpid()})"):
            record = driver.up(base, overlay=arm.overlay(), port=setup.port, progress=setup.progress,
                               cold_caches=plan.cold_caches, unset=others - set(arm.overlay()))
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
    if job.redo_if_compiled and record.compile_cache.log == "compiled":
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
            summaries = run_scenarios(target, names, plan.small, plan.workers, root, progress=setup.progress,
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



def run_boot_at(plan: ComparePlan, index: int, block: int, arm: Arm, out: Path, progress: bool, burn_in: bool = False,
                arms: ResolvedArms | None = None, redo_if_compiled: bool = False, port: int | None = None) -> BootEntry:
    """run_boot of one position named field by field (a race boots its candidates outside a comparison's schedule)."""
    job = BootJob(index=index, block=block, arm=arm, burn_in=burn_in, redo_if_compiled=redo_if_compiled)
    return run_boot(job, BootSetup(plan=plan, out=out, arms=arms or ResolvedArms(plan), port=port, progress=progress))


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
    saved = saved_plan_of_the_same_comparison(plan, out)  # a resume with another recipe hears that first
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
    setup = BootSetup(plan=plan, out=out, arms=arms, port=port, progress=progress and steps)
    return plan, _execute(setup, progress, until)


def _read_back(plan: ComparePlan, out: Path) -> tuple[dict[int, list[BootEntry]], list[FinishedBoot]]:
    """Each position's finished boots on disk (a measured position's burn-in first), held to the
    plan's position, and the same as the scheduler reads them."""
    found: dict[int, list[BootEntry]] = {}
    finished: list[FinishedBoot] = []
    for index, (block, arm) in enumerate(plan.order()):
        for burn_in in (False,) if block == BURN_IN_BLOCK else (True, False):
            entry = read_position_entry(out, index, block, arm, burn_in=burn_in)
            if entry is not None:
                found.setdefault(index, []).append(entry)
                finished.append(FinishedBoot(index, arm.name, entry.compiled, entry.voided, burn_in=burn_in, gpus=entry.gpus))
    return found, finished


def _earlier_looks(out: Path, until: UntilDecided | None) -> list[Look]:
    """The looks a resumed comparison's rule already made (until-decided.json), to go on from."""
    if until is None or not (out / DECISION_FILE).exists():
        return []
    earlier = Decision.read(out)
    if earlier.rule != until:
        raise Damaged(str(out / DECISION_FILE), "rule", f"its rule ({earlier.rule.first} to {earlier.rule.most} pairs) is not "
                      f"the plan's ({until.first} to {until.most})", "start a new comparison")
    return list(earlier.looks)


def _execute(setup: BootSetup, progress: bool, until: UntilDecided | None) -> list[BootEntry]:
    """Runs the scheduler's jobs, files each entry where it says, and answers its judgements (the
    stopping rule's looks, Stein's second stage). Every entry, in the order's positions, then the
    imported ones."""
    plan, out = setup.plan, setup.out
    by_position, finished = _read_back(plan, out)
    scheduler = BootScheduler(plan, finished, until=until)
    _set_aside(scheduler, by_position, out, progress)
    boot_seconds: list[float] = []  # wall time of each boot this process ran (for the time left)
    burn_in_seconds: list[float] = []  # compiled boots kept as burn-ins, timed apart from the boot after them
    looks = _earlier_looks(out, until)

    def entries() -> list[BootEntry]:
        return [entry for index in sorted(by_position) for entry in by_position[index]] + imported_entries(out, plan)

    started = time.monotonic()
    while not isinstance(step := scheduler.next(), Done):
        if isinstance(step, LookDue):
            assert until is not None  # a Look comes only with a stopping rule
            if looks and looks[-1].pairs_run == plan.boots:  # made before an interrupt: a look is made once
                scheduler.looked(looks[-1].decided)
                continue
            look = until.look(plan, entries())
            looks.append(look)
            Decision(rule=until, looks=looks).write(out)
            if progress:
                print(look_line(until, look))
            scheduler.looked(look.decided)
            continue
        if isinstance(step, PairsDue):
            # Stein's first stage is complete: its sd alone fixes how many pairs to run.
            from rig.compare.report import planned_pairs

            scheduler.planned(planned_pairs(plan, entries()))
            plan.write(out)
            if progress:
                print(f"compare: the first {plan.first_stage} pair(s) ask for {plan.planned_pairs} pair(s) to resolve "
                      f"+-{plan.target_pct:g}% (at most --max-boots {plan.max_boots})")
            continue
        if isinstance(step, Extended):
            plan.write(out)
            continue
        job, arm = step, step.arm
        if not job.again:
            leftover = stop_leftover(out, job.index, arm, plan.recipe)
            if progress:
                role = "burn-in, paired with nothing" if job.burn_in else f"block {job.block}"
                print(f"compare: boot {job.index + 1}/{job.boots_in_order}: {arm.name} ({arm.spec}), {role}"
                      + (f" ({leftover})" if leftover else "")
                      + time_left(boot_seconds, job.boots_left, tuple(burn_in_seconds), job.arms_may_compile,
                                  job.boots_rule_may_add))
            started = time.monotonic()
        try:
            entry = run_boot(job, setup)
        except Interrupted:
            raise KeyboardInterrupt from None  # nothing written for this boot: a resume redoes it
        filing = scheduler.done(FinishedBoot(job.index, arm.name, entry.compiled, entry.voided, entry.burn_in, entry.gpus))
        position = by_position.setdefault(job.index, [])
        if filing is Filing.BURN_IN:
            # Its caches did not hold this arm's configuration: kept as a burn-in, booted again.
            if job.supersedes:
                earlier = position.pop(0)
                supersede(out, earlier)
            entry.write(out, as_burn_in=True)
            position.append(entry)
            if progress:
                print(f"compare: boot {job.index + 1} compiled (its caches did not hold {arm.name}'s configuration): "
                      "kept as a burn-in, booting it again")
            burn_in_seconds.append(time.monotonic() - started)
            started = time.monotonic()
            continue
        entry.write(out)
        position.append(entry)
        _set_aside(scheduler, by_position, out, progress)
        # a burn-in boot of its own (an engine whose log cannot say it compiled): a one-off like a redo's
        (burn_in_seconds if job.burn_in else boot_seconds).append(time.monotonic() - started)
        if entry.check is not None and entry.check.unknown_settings:
            # A setting the engine does not know voids every boot of this arm alike: stop here (the
            # entry is kept) rather than spend the rest of the order on it.
            raise RigError(f"--arm {arm.spec}", "env", f"boot {job.index + 1} ({entry.boot_id}): {entry.check.unknown_settings[0]}",
                           "correct the variable's name in the arm (or the recipe's env) and start a new comparison")
    return entries()


def _set_aside(scheduler: BootScheduler, by_position: dict[int, list[BootEntry]], out: Path, progress: bool) -> None:
    """Moves the boots of a pair split across GPUs that the scheduler set aside to boots/superseded/;
    their positions are booted again."""
    for boot in scheduler.set_aside:
        entry = by_position[boot.index].pop()  # the position's boot (a burn-in, if any, comes first)
        supersede(out, entry, burn_in=False)
        if progress:
            print(f"compare: boot {boot.index + 1} ({boot.arm}, {entry.boot_id}) ran on another GPU than its pair's "
                  "latest boot: moved to boots/superseded/, booting it again on this GPU")
    scheduler.set_aside.clear()


def time_left(boot_seconds: list[float], boots_left: int, burn_in_seconds: tuple[float, ...] = (),
              arms_not_booted: int = 0, rule_may_add: int = 0) -> str:
    """What is left of the planned order, from the boots this process has measured so far: their
    median wall time times the boots not yet run. A compiled boot kept as a burn-in is timed apart (it
    is a one-off: the boot after it reused the caches), and comes back only as what it could add if an
    arm not booted yet compiles too (counted inside its boot's time, a compile would inflate the
    median every later estimate is made from). `rule_may_add`: the boots of the pairs a stopping rule
    may still add, said apart (it adds them only while undecided). Printed with every boot's progress
    line, never stored."""
    if not boot_seconds or boots_left <= 0:
        return ""
    median = statistics.median(boot_seconds)
    text = f"; about {max(1, round(median * boots_left / 60))} min left ({boots_left} boot(s) at the median {median:.0f} s so far"
    if burn_in_seconds and arms_not_booted:
        more = statistics.median(burn_in_seconds) * arms_not_booted
        text += f"; up to {max(1, round(more / 60))} min more if the {arms_not_booted} arm(s) not booted yet compile"
    if rule_may_add:
        text += f"; up to {max(1, round(median * rule_may_add / 60))} min more if the stopping rule adds its {rule_may_add} boot(s)"
    return text + ")"



def compare_root() -> Path:
    return paths.results_dir() / "compare" / time.strftime("%Y%m%d-%H%M%S")

