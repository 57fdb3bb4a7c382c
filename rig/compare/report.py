"""The comparison's analysis (compare.json): its records are analysis.py, each boot's figures by arm
and block figures.py. Its text is markdown.py (one function per section), its plot plot.py; output
identity lives in identity.py, boot conditions in conditions.py.

Which figures a report judges, and at what confidence: each comparison's headline at its own 95%
(a stopping rule's per-look level where one decided when to stop: ComparePlan.stopping_rule);
every other verdict the report prints (latency percentiles, goodput) in one family, Bonferroni-
simultaneous at 95% (rig.compare.stats). Latency percentiles come from each boot's requests pooled
over its usable rounds, with the count behind each, and are refused where the count cannot support
them (rig.compare.percentiles).
"""

from __future__ import annotations

from rig.compare.analysis import (
    GOODPUT,
    GOODPUT_WORDS,
    PER_USER_RATE,
    STEP_FIGURE,
    STEP_UNIT,
    Analysis,
    AnalysisInputs,
    BootTally,
    ExcludedRounds,
    ImportedBoot,
    ScenarioFigures,
    ScenarioResult,
    SecondaryFamily,
    TargetReport,
    TimelineBoot,
    VoidedBoot,
)
from rig.compare.conditions import (
    boot_log_diff,
    boot_state,
    fingerprint_report,
    gpu_conditions,
    log_lines,
)
from rig.compare.effects import known_effects
from rig.compare.figures import figure_boots, measured, per_token_boots, percentile_boots, scenario_figures
from rig.compare.identity import batching_identity, greedy_report, load_test_outputs
from rig.compare.model import BootEntry, ComparePlan
from rig.compare.percentiles import DIFFERENCE_RESOLUTION
from rig.compare.quality import Encode, analyze_quality
from rig.compare.stats import (
    DEFAULT_TARGET_PCT,
    DIFFERENCE,
    FAMILY_ALPHA,
    MIN_PAIRS,
    RATIO,
    Comparison,
    compare_boots,
    family_confidence,
    paired_blocks,
    target_met,
)
from rig.load.client_error import share_text
from rig.load.figures import HEADLINE
from rig.load.scenarios import load_scenario

# A race (rig.tune.run) reads a boot's figures through here.
__all__ = ["Analysis", "analyze", "figure_boots", "percentile_boots", "planned_pairs", "read_inputs"]


def read_inputs(plan: ComparePlan, entries: list[BootEntry]) -> AnalysisInputs:
    scenarios = {name: load_scenario(name) for name in plan.scenarios}
    greedy = {name: scenario.temperature == 0 for name, scenario in scenarios.items()}
    outputs, unreadable = load_test_outputs(entries, greedy)
    # the tokenizer locates divergence only in outputs an engine returned as text, without token ids
    text_only = any(g.output_ids is None for e in entries if e.quality for g in e.quality.generations.values())
    return AnalysisInputs(kinds={name: s.kind for name, s in scenarios.items()}, greedy=greedy,
                          encode=_encoder(plan) if text_only else None,
                          log_lines={f"{e.index:02d}-{e.arm}": log_lines(e.log_path) for e in entries},
                          outputs=outputs, unreadable_outputs=unreadable)


def _encoder(plan: ComparePlan) -> Encode | None:
    """The served tokenizer, to locate divergence in engines that return text only (None if unavailable)."""
    try:
        from rig.deploy.recipe import load
        from rig.load.prompts import TokenCounter
        from rig.loadrun.session import model_dir_for

        counter = TokenCounter(model_dir_for(plan.arms[0].base(plan.recipe) if plan.arms else load(plan.recipe)))  # the baseline's
    except Exception:  # noqa: BLE001 - the divergence is then reported for engines with token ids only
        return None
    return counter.encode if counter.tokenizer is not None else None


def secondary_family(plan: ComparePlan, figures: dict[str, ScenarioFigures]) -> SecondaryFamily:
    """The family's size counts the secondary comparisons that get an interval (two pairs or more).
    Which those are depends on boot counts and voiding, never on which arm is which, so with
    nothing changed it does not favour a verdict."""
    arms = [a.name for a in plan.arms]
    size = 0
    for scenario in figures.values():
        candidates = [(p.values, RATIO) for p in scenario.latency]
        candidates += [(scenario.goodput, DIFFERENCE)] if scenario.goodput is not None else []
        for boots, scale in candidates:
            size += sum(len(paired_blocks(boots.get(arms[0], {}), boots.get(arm, {}), scale)) >= MIN_PAIRS for arm in arms[1:])
    confidence = family_confidence(size)
    return SecondaryFamily(size=size, confidence=confidence, alpha=FAMILY_ALPHA,
                           method=f"Bonferroni over the report's {size} secondary intervals, each at {100 * confidence:.4g}%")


def _target(plan: ComparePlan) -> tuple[float, int | None]:
    return plan.target_pct or DEFAULT_TARGET_PCT, plan.first_stage if plan.target_pct is not None else None


STEP_TIME_VERDICT = "no verdict of its own: the headline's verdict stands (same boots, in ms per token)"


def _no_verdict(comparison: Comparison) -> Comparison:
    """The per-token view of a headline: its interval, never a second verdict that could disagree."""
    return comparison.model_copy(update={"decided": False, "verdict": STEP_TIME_VERDICT})


def scenario_result(plan: ComparePlan, figures: ScenarioFigures, family: SecondaryFamily) -> ScenarioResult:
    arms = [a.name for a in plan.arms]
    baseline = arms[0]
    target, first = _target(plan)
    headline = figures.headline
    vs = {arm: compare_boots(figures.headline_boots.get(baseline, {}), figures.headline_boots.get(arm, {}), headline.name,
                             headline.higher_is_better, target, plan.confidence, first, unit=headline.unit, names=(baseline, arm))
          for arm in arms[1:]}
    latency: dict[str, dict[str, Comparison]] = {}
    for percentile in figures.latency:
        latency[percentile.figure.name] = {}
        for arm in arms[1:]:
            c = compare_boots(percentile.values.get(baseline, {}), percentile.values.get(arm, {}), percentile.figure.name,
                              False, target, family.confidence, first, unit=percentile.figure.unit, names=(baseline, arm),
                              resolution=DIFFERENCE_RESOLUTION)
            c.support = percentile.support((baseline, arm))
            refused, counts = c.support.refused(), c.support.count_range()
            if refused and c.pairs < MIN_PAIRS and counts:
                c.verdict = (f"refused, not part of the family: a {c.support.percentile} needs >= {c.support.needed} samples "
                             f"per boot, these boots had {counts[0]}-{counts[1]} (more rounds or a longer duration_s)")
            elif c.pairs < MIN_PAIRS and vs[arm].pairs >= MIN_PAIRS and (
                    left := [*percentile.client_left_out.get(baseline, []), *percentile.client_left_out.get(arm, [])]):
                # the client is why: the headline has the pairs this figure lacks (an arm with no
                # usable boot lacks them for the headline too, and says so there)
                c.verdict = (f"refused, not part of the family: the client's timing could move it by up to {share_text(max(left))} "
                             f"in {len(left)} round(s) of {baseline} and {arm} left out for it (the scenario's "
                             "client_error_limit; a quieter client)")
            latency[percentile.figure.name][arm] = c
    goodput = {}
    if figures.goodput is not None:
        goodput = {arm: compare_boots(figures.goodput.get(baseline, {}), figures.goodput.get(arm, {}), GOODPUT, True, target,
                                      family.confidence, first, scale=DIFFERENCE, unit="req/s", words=GOODPUT_WORDS,
                                      names=(baseline, arm))
                   for arm in arms[1:]}
    per_token = {}
    if headline.unit == PER_USER_RATE:
        per_token_ms = per_token_boots(figures.headline_boots)
        per_token = {arm: _no_verdict(compare_boots(per_token_ms.get(baseline, {}), per_token_ms.get(arm, {}), STEP_FIGURE,
                                                    False, target, plan.confidence, first, scale=DIFFERENCE, unit=STEP_UNIT,
                                                    names=(baseline, arm)))
                     for arm in arms[1:]}
    return ScenarioResult(kind=figures.kind, unit=headline.unit, headline=headline.name, vs=vs,
                          latency=latency, goodput=goodput, boots=figures.headline_boots, per_token=per_token,
                          client_bounds=figures.client_bounds)


def headline_comparisons(plan: ComparePlan, entries: list[BootEntry], kinds: dict[str, str] | None = None) -> list[Comparison]:
    """Every scenario's headline comparisons: what `--target` plans on and is judged against."""
    arms = [a.name for a in plan.arms]
    target, first = _target(plan)
    out = []
    for name in plan.scenarios:
        headline = HEADLINE[(kinds or {}).get(name) or load_scenario(name).kind]
        boots = figure_boots(entries, name, headline.name)
        out += [compare_boots(boots.get(arms[0], {}), boots.get(arm, {}), headline.name, headline.higher_is_better, target,
                              plan.confidence, first)
                for arm in arms[1:]]
    return out


def planned_pairs(plan: ComparePlan, entries: list[BootEntry]) -> int:
    """Stein's second stage: the pairs every headline comparison's first-stage sd asks for, capped
    at max_boots (a comparison with no first-stage sd asks for the cap)."""
    cap = plan.max_boots or plan.boots
    comparisons = headline_comparisons(plan, entries)
    if any(c.ci is None and c.pairs >= MIN_PAIRS for c in comparisons):
        return plan.boots  # voided boots left Stein's first stage without an sd: more pairs cannot give it one
    wanted = [c.pairs_for_target for c in comparisons]
    return min(cap, max([plan.boots] + [cap if w is None else w for w in wanted]))


def widest_precision(plan: ComparePlan, entries: list[BootEntry]) -> float | None:
    """The widest headline precision (percent) over scenarios and arms; None while any has none."""
    widths = [c.precision_pct for c in headline_comparisons(plan, entries)]
    return None if not widths or any(w is None for w in widths) else max(widths)  # type: ignore[type-var]


def target_report(plan: ComparePlan, entries: list[BootEntry]) -> TargetReport | None:
    if plan.target_pct is None:
        return None
    widest = widest_precision(plan, entries)
    met = target_met(widest, plan.target_pct)
    shown = "unknown" if widest is None else f"{widest:.2f}%"
    return TargetReport(
        target_pct=plan.target_pct, widest_precision_pct=widest, pairs=plan.boots, first_stage=plan.first_stage,
        planned_pairs=plan.planned_pairs, max_boots=plan.max_boots, met=met,
        status=(f"target met: the widest headline precision is {shown} <= {plan.target_pct:g}% after {plan.boots} pair(s)"
                       if met else
                       f"limit reached: the widest headline precision is {shown} > {plan.target_pct:g}% after {plan.boots} "
                       f"pair(s) (--max-boots {plan.max_boots}; Stein's first stage of {plan.first_stage} pairs asked for "
                       f"{plan.planned_pairs})")
            + " (precision: each interval's ends lie within a factor 1 + precision of its estimate)")


def analyze(plan: ComparePlan, entries: list[BootEntry], inputs: AnalysisInputs | None = None) -> Analysis:
    """compare.json from the plan, the entries and the inputs read_inputs() reads (read here when not given)."""
    inputs = inputs or read_inputs(plan, entries)
    arms = [a.name for a in plan.arms]
    figures = {name: scenario_figures(plan, entries, name, inputs.kinds[name]) for name in plan.scenarios}
    family = secondary_family(plan, figures)
    scenarios = {name: scenario_result(plan, figures[name], family) for name in plan.scenarios}
    fingerprints = fingerprint_report(entries, plan.accept_fingerprint)
    gpus = gpu_conditions(entries, plan.accept_fingerprint)
    state = boot_state(plan, entries, {name: HEADLINE[inputs.kinds[name]].name for name in plan.scenarios})
    fields = sorted({d.field for d in fingerprints.voiding})
    if gpus.voiding:
        fields.append(f"gpu.clock_events: {', '.join(gpus.by_arm_events)} in the windows of some arm's boots and of no boot "
                      "of another")
    if state.voiding:
        fields.append(f"compile_cache.log: {', '.join(state.compiled)} compiled, {', '.join(state.reused)} reused")
    void = None
    if fields:
        void = (f"the boots ran under different conditions ({'; '.join(fields)}); accept with --accept-fingerprint FIELD "
                "if intended")
    return Analysis(
        plan=plan,
        boots=BootTally(planned=len(plan.order()), used=len(measured(entries)),
                        voided=[VoidedBoot(index=e.index, arm=e.arm, attempt=e.attempt, problems=e.problems)
                                for e in entries if e.voided],
                        exclusions=[ExcludedRounds(index=e.index, arm=e.arm, rounds=e.exclusions()) for e in entries if e.exclusions()],
                        imported=[ImportedBoot(index=e.index, arm=e.arm, block=e.block, spec=e.spec, boot_id=e.boot_id)
                                  for e in entries if e.spec.startswith("imported:")]),
        boot_to_healthy_s={f"{e.index:02d}-{e.arm}": e.healthy_after_s for e in entries},
        boot_caches={f"{e.index:02d}-{e.arm}": e.compile_cache for e in entries
                     if e.compile_cache is not None and e.compile_cache.state is not None},
        scenarios=scenarios,
        family=family,
        greedy=greedy_report(entries, arms, plan.control.name if plan.control else None),
        batching=batching_identity(entries, arms, inputs.outputs, inputs.unreadable_outputs),
        fingerprints=fingerprints,
        boot_log_diff=boot_log_diff(entries, arms, inputs.log_lines),
        target=target_report(plan, entries),
        gpu=gpus,
        boot_state=state,
        known_effects=known_effects(plan, entries, {name: result.per_token for name, result in scenarios.items()}),
        void=void,
        quality=analyze_quality(plan, entries, inputs.encode),
        timeline=[TimelineBoot(index=e.index, arm=e.arm, block=e.block, voided=e.voided, control=e.control or e.burn_in,
                               rounds={name: [r[name].figures.get(scenarios[name].headline) if r[name].usable else None
                                              for r in e.rounds if name in r] for name in plan.scenarios})
                  for e in sorted(entries, key=lambda e: (e.started or 0, e.index))],
    )
