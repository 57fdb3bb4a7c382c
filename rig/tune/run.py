"""Running a race: each round boots every survivor once (rig.compare.run.run_boot: up, checks,
warmup, rounds, greedy identity and quality probes, down) in the round's position-balanced order,
then one look decides which candidates leave (rig.tune.rule).

The race is a plan on disk. Its boots are written as they finish (boots/NN-name.json, the boot's
position in the race), and which boot comes next is a function of the boots already finished: a
resumed race replays its looks from them and goes on at the first position with no entry, after
stopping a server a killed attempt left running (rig.compare.run.stop_leftover).

The boot-state control is `rig compare`'s: a boot whose engine log says it compiled is kept as a
burn-in (boots/NN-name.burn-in.json) and booted again; where the log cannot say, a burn-in boot of
the baseline opens the race. So are the host conditions: once two measured boots differ in one
(rig/observe/fingerprint_fields.yaml: the driver, the GPU model, its power limit...), as when a
resumed race lands on another kind of host, the race stops void at that boot, since no look can
tell a candidate from the host it ran on.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field

from rig.atomic import write_text_atomic
from rig.compare.model import BURN_IN_BLOCK, BootEntry, BootQuality
from rig.compare.report import figure_boots, percentile_boots
from rig.compare.run import ResolvedArms, read_entry, stop_leftover
from rig.compare.run import run_boot_at as run_boot
from rig.errors import Damaged
from rig.loadrun.session import Interrupted
from rig.tune.plan import RacePlan, round_order
from rig.tune.rule import Look, look, violates_bound
from rig.tune.space import LATENCY_BOUNDS, resolve
from rig.typed import Versioned

LOOKS_FILE = "looks.json"
FAILED_BOOTS = 2  # a candidate whose boots failed this often leaves the race (it cannot be measured)


class Looks(Versioned):
    """looks.json: every look the race made so far (derived from the boots; written for readers)."""

    schema_version: int = Field(1, alias="schema")
    looks: list[Look]


class CandidateArms(ResolvedArms):
    """Each candidate's (base, resolved) recipe, server arguments included (rig.tune.space.resolve)."""

    def __init__(self, plan: RacePlan) -> None:
        self.by_name = {c.name: resolve(plan.recipe, c) for c in plan.candidates}


@dataclass
class RaceState:
    """Where a race stands: its boots, its looks, who is left, and why it stopped (None: running)."""

    entries: list[BootEntry] = field(default_factory=list)
    looks: list[Look] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)
    eliminated: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (round, why)
    stop: str | None = None  # "one", "equivalent", "rounds", "boots", "minutes", "conditions"
    void: list[str] = field(default_factory=list)  # the differing conditions, each with its values (stop "conditions")
    positions: int = 0  # measured boot positions run (what --max-boots counts)
    seconds: float = 0.0  # the boots' own wall time (what --max-minutes counts)


def _read(path: Path, index: int, block: int, name: str) -> BootEntry | None:
    """A finished boot's entry (rig.compare.run.read_entry: its runs inside the race's folder); a
    damaged one, or one of another position (moved or edited), is renamed aside and its boot redone."""
    def this_position(entry: BootEntry) -> None:
        if (entry.index, entry.block, entry.arm) != (index, block, name):
            raise Damaged(str(path), "index/block/arm", f"holds boot {entry.index} (round {entry.block}) of {entry.arm!r}, "
                          f"not this position's boot {index} (round {block}) of {name!r}", "the boot is redone")
    return read_entry(path, this_position, who="tune")


def _seconds(entry: BootEntry) -> float:
    return sum(entry.phases_s.values())


def condition_differences(entries: list[BootEntry]) -> list[str]:
    """Each host condition that differs between the measured boots, with its values."""
    from rig.compare.conditions import fingerprint_report

    return [f"{d.field}: {' vs '.join(sorted({str(v) for v in d.values.values()}))}"
            for d in fingerprint_report([e for e in entries if e.measured], []).voiding]


def boots_left(plan: RacePlan, state: RaceState, round_index: int, position: int) -> int:
    """The most boots the race can still run from this round's `position` on, if no candidate
    leaves: the rest of this round, then whole rounds while the rounds and boots budgets allow."""
    size = len(state.survivors)
    after = plan.max_boots - state.positions - size  # what the boots budget leaves after this round
    later = min(plan.max_rounds - round_index - 1, max(0, after) // size)
    return size - position + size * later


def time_left(measured_s: list[float], boots_left: int) -> str:
    """The most the race can still take, from the measured boots this process ran: their median wall
    time times the boots left if no candidate leaves (a burn-in is a one-off and is not counted).
    Printed with every boot's progress line, never stored."""
    if not measured_s or boots_left <= 0:
        return ""
    median = statistics.median(measured_s)
    return (f"; at most about {max(1, round(median * boots_left / 60))} min left ({boots_left} boot(s) if no candidate "
            f"leaves, at the median {median:.0f} s so far)")


class Racer:
    """Boots positions of one race in order, reading back those already finished."""

    def __init__(self, plan: RacePlan, out: Path, progress: bool, steps: bool, port: int | None) -> None:
        self.plan, self.out, self.progress, self.steps, self.port = plan, out, progress, steps, port
        self.compare_plan = plan.compare_plan()
        self.arms = CandidateArms(plan)
        self.arm_of = {arm.name: arm for arm in self.compare_plan.arms}
        self.keeps_compiling = False  # a boot compiled again right after its burn-in: the caches do not persist
        self.state = RaceState(survivors=[c.name for c in plan.candidates])
        self.measured_s: list[float] = []  # wall time of each measured boot this process ran (time_left)
        self.left = ""  # time_left's text for the next boot's progress line

    def boot(self, index: int, block: int, name: str, label: str) -> BootEntry:
        arm, state = self.arm_of[name], self.state
        burn_in = block == BURN_IN_BLOCK
        first = None if burn_in else _read(BootEntry.path(self.out, index, name, burn_in=True), index, block, name)
        done = _read(BootEntry.path(self.out, index, name), index, block, name)
        if done is not None:
            self.keeps_compiling = self.keeps_compiling or (first is not None and done.compiled)
            state.entries += [e for e in (first, done) if e is not None]
            state.seconds += sum(_seconds(e) for e in (first, done) if e is not None)
            return done
        leftover = stop_leftover(self.out, index, arm, self.plan.recipe)
        if self.progress:
            print(f"tune: boot {index + 1} ({label}): {name} ({self.plan.by_name()[name].describe()})"
                  + (f" ({leftover})" if leftover else "") + self.left, flush=True)
        redo = self.plan.boot_state_control and not burn_in and first is None and not self.keeps_compiling
        try:
            entry = run_boot(self.compare_plan, index, block, arm, self.out, self.progress and self.steps, burn_in=burn_in,
                             arms=self.arms, redo_if_compiled=redo, port=self.port)
            if entry.burn_in and not burn_in and not entry.voided:
                entry.write(self.out, as_burn_in=True)  # its caches did not hold this configuration: boot it again
                state.entries.append(entry)
                state.seconds += _seconds(entry)
                if self.progress:
                    print(f"tune: boot {index + 1} compiled: kept as a burn-in, booting {name} again", flush=True)
                entry = run_boot(self.compare_plan, index, block, arm, self.out, self.progress and self.steps,
                                 arms=self.arms, port=self.port)
                self.keeps_compiling = entry.compiled
        except Interrupted:
            raise KeyboardInterrupt from None  # nothing written for this boot: a resume redoes it
        entry.write(self.out)
        state.entries.append(entry)
        state.seconds += _seconds(entry)
        if not burn_in:
            self.measured_s.append(_seconds(entry))
        return entry

    def budget_stop(self, round_index: int) -> str | None:
        plan, state = self.plan, self.state
        if round_index >= plan.max_rounds:
            return "rounds"
        if state.positions + len(state.survivors) > plan.max_boots:
            return "boots"
        if plan.max_minutes is not None and state.seconds >= 60 * plan.max_minutes:
            return "minutes"
        return None

    def run(self) -> RaceState:
        plan, state = self.plan, self.state
        index = 0
        if plan.burn_in_first:
            self.boot(0, BURN_IN_BLOCK, plan.candidates[0].name, "burn-in, paired with nothing")
            index = 1
        round_index = 0
        while (stop := self.budget_stop(round_index)) is None:
            order = round_order(state.survivors, round_index)
            for position, name in enumerate(order):
                left = boots_left(plan, state, round_index, position)
                self.left = time_left(self.measured_s, left)
                self.boot(index, round_index, name, f"round {round_index + 1}, {position + 1}/{len(order)}")
                index += 1
                if void := condition_differences(state.entries):
                    state.stop, state.void = "conditions", void
                    return state
            state.positions += len(order)
            made = judge(plan, state, round_index)
            state.looks.append(made)
            write_text_atomic(self.out / LOOKS_FILE, Looks(looks=state.looks).json_text())
            for name, why in made.eliminated.items():
                state.survivors.remove(name)
                state.eliminated[name] = (round_index, why)
            if self.progress:
                print(look_line(plan, made, state), flush=True)
            round_index += 1
            if len(state.survivors) == 1:
                stop = "one"
                break
            if made.equivalent:
                stop = "equivalent"
                break
        state.stop = stop
        return state


HOST_SLOTS = 1000  # round r's boots on the h-th GPU set the race met are block r * HOST_SLOTS + h


def by_gpu(figures: dict[str, dict[int, list[float]]], entries: list[BootEntry]) -> dict[str, dict[int, list[float]]]:
    """`figures` with each race round split by the GPUs its measured boots ran on (their uuids), in
    the order the race met them: the rule's blocks (rig.tune.rule). A race on one GPU keeps its rounds
    as they are; one resumed on another GPU mid-round compares no boot of one GPU with one of another."""
    seen: list[str] = []
    slot: dict[tuple[str, int], int] = {}
    for entry in entries:
        if entry.measured:
            gpus = entry.gpus
            seen += [gpus] * (gpus not in seen)
            slot[(entry.arm, entry.block)] = seen.index(gpus)
    return {name: {block * HOST_SLOTS + slot.get((name, block), 0): values for block, values in rounds.items()}
            for name, rounds in figures.items()}


def objective_figures(plan: RacePlan, entries: list[BootEntry]) -> dict[str, dict[int, list[float]]]:
    """candidate -> race round -> the usable round figures of its measured boot: rig compare's
    reading of the headline, or each round's goodput read again from its records (rig.tune.goodput)."""
    if plan.slos:
        from rig.tune.goodput import goodput_boots

        return goodput_boots(entries, plan.scenario, plan.slos)
    return figure_boots(entries, plan.scenario, plan.objective)


def constraint_exclusions(plan: RacePlan, state: RaceState, judged: bool) -> dict[str, str]:
    """Survivors ruled out by failed boots, greedy outputs or a latency bound shown to be exceeded."""
    out: dict[str, str] = {}
    measured = [e for e in state.entries if not e.burn_in]
    for name in state.survivors:
        failed = [e for e in measured if e.arm == name and e.voided]
        if any(e.check is not None and e.check.unknown_settings for e in failed):
            out[name] = f"the engine does not know a setting: {next(e for e in failed if e.check).check.unknown_settings[0]}"
        elif len(failed) >= FAILED_BOOTS:
            out[name] = f"{len(failed)} boots failed (the first: {(failed[0].problems or ['no reason recorded'])[0][:160]})"
    if plan.constraints.greedy_identical:
        out.update({k: v for k, v in greedy_exclusions(plan, state).items() if k not in out})
    if judged and plan.constraints.mean_abs_dlogprob is not None:
        out.update({k: v for k, v in drift_exclusions(plan, state, plan.constraints.mean_abs_dlogprob).items() if k not in out})
    if judged:
        for figure_name, bound in plan.constraints.latency.items():
            values = percentile_boots(state.entries, plan.scenario, LATENCY_BOUNDS[figure_name]).values
            for name in state.survivors:
                boots = [v for block_values in values.get(name, {}).values() for v in block_values]
                if name not in out and violates_bound(boots, bound, plan.rule):
                    out[name] = f"{figure_name} above {bound:g} ms ({len(boots)} boots)"
    return out


def drift_exclusions(plan: RacePlan, state: RaceState, bound: float) -> dict[str, str]:
    """Candidates whose logprobs, scored on the baseline's reference continuation, drift from the
    baseline's boot of the same round by more than `bound` (the interval's lower end above it)."""
    from rig.compare.quality import drift

    quality: dict[str, dict[int, BootQuality]] = {}
    for entry in state.entries:
        if entry.measured and entry.quality is not None:
            quality.setdefault(entry.arm, {})[entry.block] = entry.quality
    baseline = quality.get(plan.candidates[0].name, {})
    out = {}
    for name in state.survivors:
        if name == plan.candidates[0].name:
            continue
        values = [row.mean_abs_dlogprob for block, q in quality.get(name, {}).items() if block in baseline
                  and (row := drift(q, baseline[block])) is not None and row.mean_abs_dlogprob is not None]
        if violates_bound(values, bound, plan.rule):
            out[name] = f"mean |dlogprob| above {bound:g} ({len(values)} boots)"
    return out


def greedy_exclusions(plan: RacePlan, state: RaceState) -> dict[str, str]:
    """Candidates whose greedy outputs differ from the baseline's first measured boot. Nothing is
    ruled out while the baseline's own boots disagree: the check cannot tell a change from noise."""
    baseline = plan.candidates[0].name
    boots = [e for e in state.entries if e.measured and e.greedy]
    reference = [e.greedy for e in boots if e.arm == baseline]
    if not reference or any(g != reference[0] for g in reference[1:]):
        return {}
    return {e.arm: "greedy outputs differ from the baseline's" for e in boots
            if e.arm != baseline and e.arm in state.survivors and e.greedy != reference[0]}


def judge(plan: RacePlan, state: RaceState, round_index: int) -> Look:
    from rig.tune.rule import FIRST_LOOK

    judged = round_index + 1 >= FIRST_LOOK
    return look(plan.rule, by_gpu(objective_figures(plan, state.entries), state.entries), state.survivors, round_index,
                constraint_exclusions(plan, state, judged))


def look_line(plan: RacePlan, made: Look, state: RaceState) -> str:
    """One progress line per look: the best, each survivor's interval against it, who left."""
    parts = [f"{s.candidate} {s.delta_pct:+.2f}% [{s.ci_pct[0]:+.2f}%, {s.ci_pct[1]:+.2f}%]" if s.ci_pct and s.delta_pct is not None
             else f"{s.candidate} (no interval yet)" for s in made.standings if s.candidate not in made.eliminated]
    gone = "; ".join(f"{name} out: {why}" for name, why in made.eliminated.items())
    return (f"tune: round {made.round + 1}: best {made.best}" + (f"; {', '.join(parts)}" if parts else "")
            + (f"; {gone}" if gone else "") + f"; {len(state.survivors)} left, {state.positions} boot(s) run")
