"""A race's answer: the winner, the candidates not told apart from it, a ranked table, the race's
picture and a recipe variant written for the winner (tune.json, tune.md, tune.png, winner.yaml)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml
from pydantic import Field

from rig import grammar
from rig.atomic import write_text_atomic
from rig.compare.model import BootEntry
from rig.compare.quality import QualityReport, analyze_quality, quality_short
from rig.tune.plan import RacePlan
from rig.tune.rule import Standing, intervals
from rig.tune.run import RaceState, by_gpu, objective_figures
from rig.tune.space import resolve
from rig.typed import Typed, Versioned

STOPS = {
    "one": "one candidate remains",
    "equivalent": "every survivor is within the margin of the best: no difference resolved above {margin:g}%",
    "rounds": "the most rounds ({rounds}) ran with {left} candidates not told apart",
    "boots": "the boot budget ({boots} boots) could not pay for another round of {left} candidates",
    "minutes": "the time budget ({minutes:g} min of boots) ran out with {left} candidates not told apart",
    "conditions": "the boots ran under different conditions ({void}); resume it on hosts like its first ones, "
                  "or start a new race on these",
}


class Row(Typed):
    """One candidate in the ranked table."""

    rank: int
    candidate: str
    setting: str
    figure: float | None  # geometric mean of its boots' figures, in the objective's unit
    boots: int
    vs_winner: tuple[float, float] | None  # interval against the winner (eliminated: against the best it lost to)
    delta_pct: float | None
    against: str  # whom vs_winner is against: the winner, or the best of the look that eliminated it
    status: str  # winner, not told apart, or when and why it was eliminated
    quality: str


class RaceResult(Versioned):
    """tune.json."""

    schema_version: int = Field(1, alias="schema")
    recipe: str
    scenario: str
    objective: str
    winner: str
    tied: list[str]  # survivors not told apart from the winner
    stop: str  # the key of STOPS
    stop_text: str
    void: list[str] = Field(default_factory=list)  # the host conditions that differed (stop "conditions"): no winner
    rule: str
    boots: int  # measured boots
    burn_ins: int
    rows: list[Row]
    notes: list[str]


def _geometric(values: dict[int, list[float]]) -> float | None:
    means = [float(np.mean(v)) for v in values.values() if v and all(x > 0 for x in v)]
    return float(math.exp(np.mean(np.log(means)))) if means else None


def quality_text(plan: RacePlan, state: RaceState, quality: QualityReport, name: str) -> str:
    """Greedy identity against the baseline's first measured boot, boot by boot, and rig compare's
    short quality line (logprob drift, divergence) where the engine lets it measure one."""
    boots = [e for e in state.entries if e.measured and e.greedy]
    reference = next((e.greedy for e in boots if e.arm == plan.candidates[0].name), None)
    own = [e for e in boots if e.arm == name]
    parts = []
    if reference is not None and own:
        same = sum(e.greedy == reference for e in own)
        parts.append("reference" if name == plan.candidates[0].name and same == len(own) else
                     f"greedy identical to {plan.candidates[0].name}'s in {same}/{len(own)} boots")
    short = quality_short(quality, name)
    if name != plan.candidates[0].name and short != "quality not measured":
        parts.append(short)
    return "; ".join(parts) or "not measured"


def analyze(plan: RacePlan, state: RaceState) -> RaceResult:
    rule = plan.rule
    figures = objective_figures(plan, state.entries)
    winner, final = intervals(rule, by_gpu(figures, state.entries), state.survivors)
    if state.void:  # no look stands: every candidate is listed by its figure, none judged
        winner, final = "", []
    tied = [name for name in state.survivors if name != winner]
    quality = analyze_quality(plan.compare_plan(), state.entries)
    measured = [e for e in state.entries if e.measured]
    standing: dict[str, tuple[str, Standing]] = {s.candidate: (winner, s) for s in final}
    for made in state.looks:  # an eliminated candidate: its interval at the look that eliminated it
        standing.update({s.candidate: (made.best, s) for s in made.standings if s.candidate in made.eliminated})
    sign = 1 if plan.higher_is_better else -1
    ranked = [winner] * bool(winner) + sorted(tied, key=lambda n: -sign * (_geometric(figures.get(n, {})) or 0))
    ranked += sorted(state.eliminated, key=lambda n: (-state.eliminated[n][0], -sign * (_geometric(figures.get(n, {})) or 0)))
    rows = []
    for rank, name in enumerate(ranked, 1):
        against_name, interval = standing.get(name, (winner, None))
        if state.void:
            status = "not judged: the race is void"
        elif name == winner:
            status = "winner"
        elif name in state.eliminated:
            status = f"eliminated: {state.eliminated[name][1]}"
        else:
            status = "not told apart from the winner"
        rows.append(Row(rank=rank, candidate=name, setting=plan.by_name()[name].describe(), figure=_geometric(figures.get(name, {})),
                        boots=sum(1 for e in measured if e.arm == name), vs_winner=interval.ci_pct if interval else None,
                        delta_pct=interval.delta_pct if interval else None, against=against_name,
                        status=status, quality=quality_text(plan, state, quality, name)))
    notes = []
    if plan.constraints.greedy_identical and not any(e.measured and e.greedy for e in state.entries if e.arm == plan.candidates[0].name):
        notes.append("greedy identity: the baseline has no measured boot with greedy outputs; nothing was ruled out by it")
    if plan.slos:
        notes.append(goodput_note(plan, state, winner))
    if (note := missing_cells_note(figures, measured)) is not None:
        notes.append(note)
    if (note := gpus_note(measured)) is not None:
        notes.append(note)
    stop = state.stop or "rounds"
    return RaceResult(recipe=plan.recipe, scenario=plan.scenario, objective=plan.objective, winner=winner, tied=tied, stop=stop,
                      stop_text=STOPS[stop].format(margin=plan.margin_pct, rounds=plan.max_rounds, left=len(state.survivors),
                                                   boots=plan.max_boots, minutes=plan.max_minutes or 0,
                                                   void="; ".join(state.void)), void=state.void,
                      rule=rule.statement(), boots=len(measured), burn_ins=sum(1 for e in state.entries if e.burn_in),
                      rows=rows, notes=notes)


def gpus_note(measured: list[BootEntry]) -> str | None:
    """Name the GPUs a race's measured boots ran on when there were several (a race resumed on
    another host of the same kind): the rule splits a round by GPU (by_gpu), so a boot
    is compared only with boots of its own GPU, and a candidate alone on its GPU in a round adds
    nothing to its interval."""
    counts: dict[str, int] = {}
    for entry in measured:
        key = entry.gpus or "?"
        counts[key] = counts.get(key, 0) + 1
    if len(counts) < 2:
        return None
    which = ", ".join(f"{key[:12]} {count}" for key, count in counts.items())
    return (f"the measured boots ran on {len(counts)} GPUs of the same kind ({which} boots): each round is split by GPU, "
            "so a boot is compared only with boots of its own GPU, and one alone on its GPU in a round adds nothing to "
            "its interval")


def missing_cells_note(figures: dict[str, dict[int, list[float]]], measured: list[BootEntry]) -> str | None:
    """Say which measured boots gave no usable figure: the figure column averages a candidate's usable
    boots only, while its interval comes from the candidate x round fit, which allows for the rounds
    its boots ran in; with cells missing, the two may rank candidates differently."""
    missing: dict[str, int] = {}
    for entry in measured:
        values = figures.get(entry.arm, {}).get(entry.block)
        if not values or not all(v > 0 for v in values):
            missing[entry.arm] = missing.get(entry.arm, 0) + 1
    if not missing:
        return None
    which = ", ".join(f"{name} {count}" for name, count in sorted(missing.items()))
    return (f"{sum(missing.values())} of {len(measured)} measured boots gave no usable figure ({which}): the figure column is "
            "the geometric mean of each candidate's usable boots, while the intervals come from the candidate x round fit, "
            "which allows for the round each boot ran in, so the two may rank candidates differently")


def goodput_note(plan: RacePlan, state: RaceState, winner: str) -> str:
    """How goodput was read (rig.tune.goodput, R17), and the winner's goodput both ways."""
    from rig.tune.goodput import boot_goodput

    rounds = [r for e in state.entries if e.measured and e.arm == winner for r in boot_goodput(e, plan.scenario, plan.slos or {})]
    low = float(np.mean([r.lower_req_s for r in rounds])) if rounds else 0.0
    high = float(np.mean([r.upper_req_s for r in rounds])) if rounds else 0.0
    ambiguous = sum(r.ambiguous for r in rounds)
    return (f"goodput: {plan.objective_text()}; a request within the client's bound of a limit counts as missing it "
            f"(a lower bound): {winner} {low:.4g} req/s, {high:.4g} with its {ambiguous} ambiguous request(s) counted as met")


def _interval(row: Row, winner: str) -> str:
    if row.vs_winner is None or row.delta_pct is None:
        return "-" if row.status == "winner" else "no interval"
    against = "" if row.against == winner else f" vs {row.against}"
    return f"{row.delta_pct:+.2f}% [{row.vs_winner[0]:+.2f}%, {row.vs_winner[1]:+.2f}%]{against}"


def headline(result: RaceResult) -> str:
    """The answer, first: the winner, and who could not be told apart from it, and why the race stopped."""
    if result.void:
        return f"tune: VOID: the boots ran under different conditions ({'; '.join(result.void)}); no winner stands"
    tied = f"; not told apart from it: {', '.join(result.tied)}" if result.tied else ""
    return f"tune: {result.winner} wins ({result.stop_text}){tied}"


def table(result: RaceResult) -> str:
    lines = [f"| rank | candidate | {result.objective} | vs {result.winner or 'winner'} | boots | status | quality |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    shown = [abs(row.figure) for row in result.rows if row.figure]
    decimals = max(0, 3 - math.floor(math.log10(min(shown)))) if shown else 0  # one column, one precision: 4 digits of the least
    for row in result.rows:
        figure = "-" if row.figure is None else f"{row.figure:.{decimals}f}"
        lines.append(f"| {row.rank} | {row.candidate} | {figure} | {_interval(row, result.winner)} | {row.boots} | {row.status} | {row.quality} |")
    return "\n".join(lines)


def winner_variant(plan: RacePlan, winner: str, why: str) -> tuple[str, str]:
    """(variant name, YAML text) of the winner as a recipe variant, with the `rig compare` line that
    checks it against the baseline (what the user runs today). What the candidate's own variant does
    not set (topology, audit, host_env, boot_log) is left to the recipe, as in that variant."""
    candidate = plan.by_name()[winner]
    _, resolved = resolve(plan.recipe, candidate)
    recipe = resolved.recipe
    variant = recipe.variants[resolved.variant or ""]
    original = recipe.variants.get(candidate.variant or recipe.default_variant or "")
    body = variant.model_dump(mode="json", exclude_defaults=True, by_alias=True)
    for key in ("topology", "audit", "host_env", "boot_log"):
        if original is None or key not in original.model_fields_set:
            body.pop(key, None)
    body["description"] = f"rig tune's winner on {plan.scenario}: {candidate.describe()}"
    name = f"tuned-{winner}"[: grammar.NAME_MAX]
    baseline = plan.candidates[0]
    today = f"today:{baseline.arm().spec.partition(':')[2]}" if not baseline.server_args and (baseline.variant or baseline.env) else (
        f"today:@{recipe.default_variant}" if recipe.default_variant else "today:(the recipe)")
    command = f"rig compare {plan.recipe} --arm {today} --arm tuned:@{name} --scenario {plan.scenario}"
    if winner == baseline.name:  # comparing today's settings with themselves would be an A/A check, not a test
        then = ("# It is the baseline, what you run today: keep today's settings. The variant below is them, written out.\n")
    else:
        then = (f"# Add it under variants: in recipes/{plan.recipe}.yaml, then check it against today's settings:\n"
                f"#   {command}\n")
    text = (f"# {winner}, the winner of `rig tune` on {plan.scenario} ({why}).\n" + then
            + yaml.safe_dump({name: body}, sort_keys=False, width=1000))
    return name, text


def write(out: Path, plan: RacePlan, state: RaceState) -> tuple[RaceResult, str]:
    """Every result file; returns the result and its text (the answer first)."""
    from rig.tune.plot import plot

    result = analyze(plan, state)
    write_text_atomic(out / "tune.json", result.json_text())
    variant = ""
    if result.winner:
        _, variant_text = winner_variant(plan, result.winner, result.stop_text)
        write_text_atomic(out / "winner.yaml", variant_text)
        variant = f"; recipe variant for the winner: {out}/winner.yaml"
    text = "\n".join([headline(result), "", table(result), "", f"rule: {result.rule}",
                      f"{result.boots} measured boot(s), {result.burn_ins} burn-in(s){variant}", *result.notes])
    write_text_atomic(out / "tune.md", f"# rig tune: {plan.recipe} on {plan.scenario}\n\n{text}\n")
    plot(plan, state, out / "tune.png")
    return result, text
