"""Comparisons as evidence: recomputed with rig.compare's own analysis.

- `comparison`: plan.json and boots/*.json, as `rig compare` wrote them. The analysis is
  rig.compare.report.analyze, the function that wrote compare.json, given what it reads besides the
  entries: the scenarios' kinds from loadtests/, no boot logs and no tokenizer (neither moves a figure
  a claim quotes: the boot-log diff and where greedy text diverges are reported, never judged).
- `comparison cut short`: the same, where the host's end stopped a boot before its last step. rig
  compare gave no verdict; the headline's rounds are read back (each measured boot's usable rounds,
  and the rounds the cut boot finished, from their run summaries) and put through the same statistics.
- `comparison report`: a compare.json alone. Its headline is recomputed from the boots' round
  figures the report lists, with the same statistics; the rest of the report is not evidence.
"""

from __future__ import annotations

from pathlib import Path

from rig.compare.analysis import STEP_FIGURE, STEP_UNIT, Analysis, AnalysisInputs, ArmBoots
from rig.compare.entries import RUNS
from rig.compare.figures import figure_boots, per_token_boots
from rig.compare.model import ENTRY_MAX_BYTES, BootEntry, ComparePlan
from rig.compare.report import analyze
from rig.compare.stats import DEFAULT_TARGET_PCT, DIFFERENCE, compare_boots
from rig.errors import Damaged
from rig.load.figures import HEADLINE
from rig.load.scenarios import load_scenario
from rig.load.summary import RunSummary
from rig.load.wire import BootMarker
from rig.validation.figures import (
    Kind,
    comparison_figures,
    delta_text,
    micro_or_milli,
    named,
    step_text,
)

IN_PROGRESS = ".in-progress.json"


def read_comparison(directory: Path) -> tuple[ComparePlan, list[BootEntry]]:
    """The plan and every finished boot entry (a boot's in-progress marker is no entry)."""
    plan = ComparePlan.read(directory)
    entries = [BootEntry.read(path) for path in sorted((directory / "boots").glob("*.json")) if not path.name.endswith(IN_PROGRESS)]
    return plan, entries


def analysis_of(directory: Path) -> Analysis:
    plan, entries = read_comparison(directory)
    scenarios = {name: load_scenario(name) for name in plan.scenarios}
    inputs = AnalysisInputs(kinds={name: s.kind for name, s in scenarios.items()},
                            greedy={name: s.temperature == 0 for name, s in scenarios.items()}, encode=None,
                            log_lines={f"{e.index:02d}-{e.arm}": set() for e in entries}, outputs={})
    return analyze(plan, entries, inputs)


class ComparisonKind(Kind):
    name = "comparison"
    method = ("rig.compare.report.analyze on the comparison's plan.json and boot entries (boots/*.json), as rig compare "
              "wrote compare.json")

    def compute(self, directory: Path) -> dict[str, str]:
        return analysis_figures(analysis_of(directory))


def analysis_figures(analysis: Analysis) -> dict[str, str]:
    plan = analysis.plan
    arms = [a.name for a in plan.arms]
    single = len(arms) == 2
    out: dict[str, str] = {}
    for scenario, result in analysis.scenarios.items():
        for arm, c in result.vs.items():
            out |= comparison_figures(named("", scenario, arm, single).strip(), c)
            if arm in result.per_token and (text := step_text(result.per_token[arm])):
                out[named("per token", scenario, arm, single)] = text
        for figure, per_arm in result.latency.items():
            for arm, c in per_arm.items():
                if text := delta_text(c):
                    out[named(figure, scenario, arm, single)] = text
    for effect in analysis.known_effects:
        if effect.covered is None:
            continue
        own = effect.effect_interval_ms
        interval = f" [{micro_or_milli(own[0])}, {micro_or_milli(own[1])}]" if own else ""
        held = ("reaches it" if effect.covered else "does NOT reach it") if effect.at_least else \
            ("agrees" if effect.covered else "does NOT agree")
        held += f" from {100 * effect.tolerance:g}% below to {100 * effect.tolerance_above:g}% above" if effect.tolerance else ""
        out[named("known effect", effect.scenario, effect.arm, single)] = f"{micro_or_milli(effect.per_token_ms)}{interval}, {held}"
    if analysis.boot_state is not None:
        for boot in analysis.boot_state.burn_in:
            for scenario, versus in boot.vs_measured_pct.items():
                if versus is not None:
                    out[f"burn-in {scenario}"] = f"{versus:+.2f}%"
    control = plan.control.name if plan.control else None
    if analysis.quality is not None:
        for arm, drift in analysis.quality.drift.items():
            label = f"control {arm}" if arm == control else ("" if single else arm)
            out[f"outputs {label}".strip()] = drift.verdict
            if drift.arm.top1_agreement is not None:
                out[f"top-1 agreement {label}".strip()] = f"{100 * drift.arm.top1_agreement:.1f}%"
            if drift.arm.mean_abs_dlogprob is not None:
                out[f"prefill mean |dlogprob| {label}".strip()] = f"{drift.arm.mean_abs_dlogprob:.3g}"
    if analysis.greedy.prompts:
        out["greedy identity"] = analysis.greedy.status
    planned = analysis.boots.planned - (1 if plan.control else 0) - (1 if plan.burn_in_first else 0)
    out["boots used"] = f"{analysis.boots.used} of {planned}"
    if analysis.void:
        out["void"] = analysis.void
    return out


def _headline_figures(plan: ComparePlan, boots: ArmBoots, scenario: str, kind: str) -> dict[str, str]:
    """The headline and its time per token from each boot's round figures, as the report computes them."""
    arms = [a.name for a in plan.arms]
    baseline, single = arms[0], len(arms) == 2
    headline = HEADLINE[kind]
    target = plan.target_pct or DEFAULT_TARGET_PCT
    first = plan.first_stage if plan.target_pct is not None else None
    steps = per_token_boots(boots)
    out: dict[str, str] = {}
    for arm in arms[1:]:
        c = compare_boots(boots.get(baseline, {}), boots.get(arm, {}), headline.name, headline.higher_is_better, target,
                          plan.confidence, first, unit=headline.unit, names=(baseline, arm))
        out |= comparison_figures(named("", scenario, arm, single).strip(), c)
        step = compare_boots(steps.get(baseline, {}), steps.get(arm, {}), STEP_FIGURE, False, target, plan.confidence, first,
                             scale=DIFFERENCE, unit=STEP_UNIT, names=(baseline, arm))
        if text := step_text(step):
            out[named("per token", scenario, arm, single)] = text
    return out


class CutComparisonKind(Kind):
    name = "comparison cut short"
    method = ("rig.compare.stats.compare_boots on the headline's usable rounds of every measured boot entry, and of the boot "
              "the host's end cut short (its run summaries, at its place in the plan's ABBA order): not a verdict of rig "
              "compare, which never finished")

    def compute(self, directory: Path) -> dict[str, str]:
        plan, entries = read_comparison(directory)
        out: dict[str, str] = {}
        for scenario in plan.scenarios:
            kind = load_scenario(scenario).kind
            boots = figure_boots(entries, scenario, HEADLINE[kind].name)
            for marker_path in sorted((directory / "boots").glob(f"*{IN_PROGRESS}")):
                marker = BootMarker.read_file(marker_path, ENTRY_MAX_BYTES)
                stem = marker_path.name.removesuffix(IN_PROGRESS)
                index = int(stem.split("-", 1)[0])
                block, arm = plan.boot_sequence[index]
                rounds = directory / RUNS / stem / f"attempt-{marker.attempt}"
                summaries = [RunSummary.read(d) for d in sorted(rounds.glob(f"round-*/{scenario}"))]
                figures = [value for s in summaries if not s.problems() and (value := s.headline()) is not None]
                if figures:
                    boots.setdefault(arm, {})[block] = figures
            out |= _headline_figures(plan, boots, scenario, kind)
        return out


class ReportKind(Kind):
    name = "comparison report"
    method = ("rig.compare.stats.compare_boots on the boots' usable headline figures that compare.json lists, with the "
              "plan it names")

    def compute(self, directory: Path) -> dict[str, str]:
        path = directory / "compare.json"
        analysis = Analysis.read_file(path, ENTRY_MAX_BYTES)
        out: dict[str, str] = {}
        for scenario, result in analysis.scenarios.items():
            if result.kind not in HEADLINE:
                raise Damaged(str(path), f"scenarios.{scenario}.kind", f"{result.kind!r} is no scenario kind", "use a compare.json rig wrote")
            out |= _headline_figures(analysis.plan, result.boots, scenario, result.kind)
        out["boots used"] = f"{analysis.boots.used} of {analysis.boots.planned}"
        return out

