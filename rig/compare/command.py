"""`rig compare`, `make compare` and the comparison `rig demo` runs."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from rig.boot.base import BootPreempted
from rig.boot.state import refuse_if_port_taken, refuse_if_up
from rig.cli_args import LoadOptions
from rig.compare.arms import check_arms, parse_arm
from rig.compare.conditions import accept_fingerprint_problem
from rig.compare.design import DEFAULT_BOOTS, DEFAULT_ROUND_S, DEFAULT_ROUNDS, MAX_ARMS, MAX_PAIRS
from rig.compare.entries import finished_boots
from rig.compare.model import ComparePlan
from rig.compare.output import write_report
from rig.compare.report import Analysis, analyze
from rig.compare.run import compare_root, run_compare
from rig.compare.sequential import Decision, UntilDecided
from rig.compare.stats import MIN_PAIRS, MIN_PAIRS_FOR_TARGET
from rig.deploy.recipe import load, split_ref
from rig.engines import ENGINES, Engine
from rig.errors import Invalid, NotFound, RigError
from rig.exits import Exit
from rig.load.goodput import parse_slos
from rig.load.scenarios import load_scenario, scenario_fix, scenario_names
from rig.loadrun.session import default_small
from rig.typed import first_problem


def _state_unknowable(engine: Engine) -> bool:
    """An engine that keeps compile caches but whose log does not say whether a boot compiled: its
    comparisons open with a burn-in boot. One with no caches (transformers serve) has no such state."""
    return bool(engine.compile_caches) and engine.compile_log is None


def _saved_rule(out: Path, given: UntilDecided | None) -> UntilDecided | None:
    """A resumed comparison's stopping rule: its plan's, which a resume carries on (a plan does not
    change on resume, so a different --until-decided is refused)."""
    rule = ComparePlan.read(out).stopping_rule
    if rule is None:
        if given is not None:
            raise RigError("command line", "--until-decided", f"{out} was planned without a stopping rule, and a plan does "
                           "not change on resume", "drop --until-decided, or start a new comparison")
        return None
    saved = UntilDecided(first=rule[0], most=rule[1])
    if given is not None and (given.first, given.most) != rule:
        raise RigError("command line", "--until-decided", f"{out} was planned with --boots {rule[0]} --until-decided "
                       f"{rule[1]}, and a plan does not change on resume", "drop --until-decided: the resume carries the rule on")
    return saved


def _arm_example(recipe: str) -> str:
    """Two arms this recipe takes: one of its adapters' gates off and on, else two of its variants."""
    try:
        found = load(recipe).recipe
    except RigError:
        found = None
    uses = [use for v in (found.variants.values() if found else []) for use in v.adapters or []]
    gate = next((key for use in (found.adapters if found else []) + uses for key in use.gates), None)
    if gate:
        return f"e.g. --arm before:{gate}=0 --arm after:{gate}=1"
    variants = sorted(found.variants) if found else []
    if len(variants) >= 2:
        return f"e.g. --arm before:@{variants[0]} --arm after:@{variants[1]}"
    return "e.g. --arm before:KEY=0 --arm after:KEY=1 (KEY: an adapter's gate; `rig adapters list` names them)"


def exit_status(analysis: Analysis, decision: Decision | None = None) -> Exit:
    """What a comparison's answer exits with (rig compare, rig demo); `decision`: the stopping rule's
    looks, when the comparison ran under one (undecided after its most pairs: UNDECIDED)."""
    if analysis.void:
        return Exit.VOID
    if analysis.no_data:
        return Exit.UNUSABLE
    if decision is not None and decision.exhausted:
        return Exit.UNDECIDED
    blind = analysis.greedy.control is not None and analysis.greedy.control.discriminates is False
    return Exit.BLIND_CONTROL if blind else Exit.OK


@dataclass(frozen=True)
class CompareRequest:
    """The comparison a command line asks for, as typed: compare() checks it and makes it a ComparePlan."""

    recipe: str  # a recipe name (variants are arms)
    arms: list[str]  # --arm specs; the first is the baseline
    control: str | None = None  # an arm known to change greedy output, booted once
    boots: int = DEFAULT_BOOTS  # boot pairs (until: its first look's)
    rounds: int = DEFAULT_ROUNDS
    scenarios: list[str] | None = None  # None: prose-c1
    load: LoadOptions = LoadOptions()  # --small/--full and --workers
    resume: str | None = None  # a comparison directory to continue
    duration_s: float | None = None  # every round's window (None: the design's default)
    target_pct: float | None = None  # add pairs until every headline interval is this narrow
    max_boots: int | None = None  # with target_pct: the most pairs
    goodput: str | None = None  # SLOs, e.g. ttft<=2s,tpot<=50ms
    accept_fingerprint: list[str] = field(default_factory=list)  # fingerprint fields allowed to differ
    cold_caches: bool = False
    burn_in: bool = True  # the boot-state control
    port: int | None = None  # where every boot listens (None: the recipe's)
    driver: str | None = None  # the boot driver (None: the recipe's own)


def compare(request: CompareRequest, progress: bool = True, until: UntilDecided | None = None,
            show_report: bool = True, steps: bool = True) -> tuple[Path, Analysis]:
    """Run (or resume) a comparison and write its report. `until`: add pairs one at a time until
    every headline interval excludes 0, from until.first pairs up to until.most (its looks are in
    until-decided.json; `boots` is then until.first). `show_report`: print the report's text;
    `steps`: print each boot's and each run's own progress (see run_compare)."""
    arm_specs, control, boots, rounds, scenarios = request.arms, request.control, request.boots, request.rounds, request.scenarios
    target_pct, max_boots, resume, port = request.target_pct, request.max_boots, request.resume, request.port
    accept_fingerprint, duration_s = request.accept_fingerprint, request.duration_s
    recipe = request.recipe
    if len(arm_specs) > MAX_ARMS:
        raise RigError("command line", "--arm", f"{len(arm_specs)} arms; a comparison has at most {MAX_ARMS}", "compare fewer arms")
    name, variant = split_ref(recipe)
    if variant:
        raise RigError("command line", "recipe", "compare takes a recipe name; variants are arms", f"use --arm NAME:@{variant}")
    for ref in scenarios or []:
        if ref.endswith((".yaml", ".yml")):
            raise RigError("command line", "--scenario", f"{ref!r} is a file: a comparison names its scenarios, so its "
                           "report can be re-read and resumed later", "copy the file into loadtests/scenarios/ and pass its name")
        if ref not in scenario_names():  # load_scenario's fix would offer a file, which a comparison refuses above
            raise RigError("command line", "--scenario", f"no scenario {ref[:60]!r}",
                           scenario_fix(ref, "or a file of yours copied into loadtests/scenarios/"))
        load_scenario(ref)  # refused in one line before anything is written
    arms = [parse_arm(spec) for spec in arm_specs]
    if len(arms) < 2 or len({a.name for a in arms}) != len(arms):
        raise RigError("command line", "--arm", "a comparison needs at least two arms with distinct names", _arm_example(name))
    if boots < 1 or rounds < 1:
        raise RigError("command line", "--boots/--rounds", "need at least one boot per arm and one round per boot",
                       f"e.g. --boots {DEFAULT_BOOTS} --rounds {DEFAULT_ROUNDS}")
    if target_pct is not None and target_pct <= 0:
        raise RigError("command line", "--target", f"{target_pct}% is not a positive precision", "e.g. --target 1")
    for pattern in accept_fingerprint:
        problem = accept_fingerprint_problem(pattern)
        if problem:
            raise RigError("command line", "--accept-fingerprint", problem,
                           "name a field from the report's void line (e.g. gpus.*.power_limit_w)")
    if until is not None and target_pct is not None:
        raise RigError("command line", "--until-decided", "a comparison stops either at a precision (--target) or at a "
                       "decision (--until-decided), not both", "drop one of them")
    if until is not None:
        boots = until.first
    if max_boots is not None and target_pct is None:
        raise RigError("command line", "--max-boots", "bounds the pairs --target adds, and no --target is given",
                       "add --target PCT, or drop --max-boots (--boots sets a fixed design; --until-decided MOST bounds "
                       "a stopping rule's pairs)")
    if max_boots is not None and max_boots < max(boots, MIN_PAIRS_FOR_TARGET):  # with --target (refused above without)
        raise RigError("command line", "--max-boots", f"{max_boots} is fewer than --boots or the {MIN_PAIRS_FOR_TARGET} pairs "
                       "the target is judged from", f"pass --max-boots {max(2 * boots, MIN_PAIRS_FOR_TARGET)} or more")
    controls = [parse_arm(control)] if control else []
    check_arms(name, arms + controls)
    for i, arm in enumerate(arms):  # legitimate (an A/A check of the noise), and worth a word when unintended
        for other in arms[i + 1:]:
            if arm.overlay() == other.overlay() and arm.variant == other.variant:
                print(f"compare: arms {arm.name} and {other.name} boot the same server (an A/A check: there is no "
                      "change for it to find; its verdicts are false ones)", file=sys.stderr)
    if boots < MIN_PAIRS and target_pct is None and resume is None:  # legitimate as a quick look, never as a verdict
        print(f"compare: --boots {boots} gives no interval ({MIN_PAIRS} pairs are the fewest that do; {DEFAULT_BOOTS} is "
              "the default): this run shows what each boot reads, not whether the change is real", file=sys.stderr)
    resolved = load(name)
    if target_pct is not None:
        boots = max(boots, MIN_PAIRS_FOR_TARGET)  # Stein's first stage
    small = request.load.sized(default_small(resolved))
    if duration_s is None and not small:
        duration_s = DEFAULT_ROUND_S  # a round is one of several: shorter than a scenario's lone run
    try:
        plan = ComparePlan(recipe=name, arms=arms, control=controls[0] if controls else None, boots=boots, rounds=rounds,
                           scenarios=scenarios or ["prose-c1"], small=small,
                           workers=request.load.workers, duration_s=duration_s, target_pct=target_pct,
                           boot_state_control=request.burn_in,
                           burn_in_first=request.burn_in and _state_unknowable(ENGINES[resolved.recipe.engine.name]),
                           max_boots=min(MAX_PAIRS, max_boots or 2 * boots) if target_pct is not None else None,
                           first_stage=boots if target_pct is not None else None,
                           stopping_rule=(until.first, until.most) if until is not None else None,
                           slos=parse_slos(request.goodput), accept_fingerprint=list(accept_fingerprint), cold_caches=request.cold_caches,
                           driver=request.driver)
    except ValidationError as error:
        field, problem = first_problem(error)
        raise Invalid("command line", field, problem, "see `rig compare --help` for what each option takes") from None
    if resume is not None and not resume.strip():
        raise RigError("command line", "--resume", "names no directory", "name a results/compare/<timestamp> directory")
    out = Path(resume) if resume else compare_root()
    if resume and not out.is_dir():
        raise NotFound(str(out), "--resume", "no such directory", "name a results/compare/<timestamp> directory (`ls results/compare`)")
    if resume and not (out / "plan.json").exists():
        raise NotFound(str(out), "--resume", "no comparison (plan.json) in this directory", "name a results/compare/<timestamp> directory")
    if resume:
        until = _saved_rule(out, until)
    if port is not None and not 1 <= port <= 65535:
        raise RigError("command line", "--port", f"{port} is not a TCP port", "pass a port from 1 to 65535")
    if not resume:  # a resumed one's interrupted boot may hold both: run_compare stops it first
        refuse_if_up(name)  # the recipe's own server: no boot of the comparison could claim the recipe
        refuse_if_port_taken(resolved, port)
    try:
        plan, entries = run_compare(plan, out, progress, port, until=until, steps=steps)
    except (KeyboardInterrupt, BootPreempted) as error:  # Ctrl-C, SIGTERM, a job the scheduler ended: how to go on
        if isinstance(error, BootPreempted):
            print(f"compare: {error}", file=sys.stderr)
        finished = finished_boots(out)
        kept = f"; {finished} finished boot(s) kept in {out}" if finished else f" before any boot finished; its plan is kept in {out}"
        print(f"compare: stopped{kept}: run the same command with --resume {out} to go on from "
              f"{'them' if finished else 'it'}", file=sys.stderr)
        raise
    analysis = analyze(plan, entries)
    text = write_report(out, analysis)
    if show_report:
        print(text)
        print(f"report: {out}/compare.md, compare.json, compare.png, boot-log-diff.txt")
    return out, analysis
