"""The comparison's analysis (typed; compare.json). Its text is markdown.py (one function per
section), its plot plot.py; output identity lives in identity.py, boot conditions in conditions.py.

Which figures a report judges, and at what confidence: each comparison's headline at its own 95%;
every other verdict the report prints (latency percentiles, goodput) in one family, Bonferroni-
simultaneous at 95% (rig.compare.stats). Latency percentiles come from each boot's requests pooled
over its usable rounds, with the count behind each, and are refused where the count cannot support
them (rig.compare.percentiles).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import Field

from rig.boot.record import CacheState
from rig.compare.conditions import (
    BootState,
    FingerprintReport,
    GpuConditions,
    boot_log_diff,
    boot_state,
    fingerprint_report,
    gpu_conditions,
    log_lines,
)
from rig.compare.effects import KnownEffect, known_effects
from rig.compare.identity import BatchingIdentity, GreedyIdentity, OutputKey, batching_identity, greedy_report, load_test_outputs
from rig.compare.model import COMPARE_SCHEMA, BootEntry, ComparePlan
from rig.compare.percentiles import DIFFERENCE_RESOLUTION, min_count, percentile_label, pooled_percentile
from rig.compare.quality import Encode, QualityReport, analyze_quality
from rig.compare.stats import (
    CONFIDENCE,
    DEFAULT_TARGET_PCT,
    DIFFERENCE,
    FAMILY_ALPHA,
    MIN_PAIRS,
    RATIO,
    Comparison,
    SampleSupport,
    compare_boots,
    family_confidence,
    paired_blocks,
    target_met,
)
from rig.load.client_error import UNBOUNDED, share_text
from rig.load.figures import HEADLINE, LATENCY, Figure, LatencyFigure
from rig.load.scenarios import load_scenario
from rig.typed import Typed, Versioned

ArmBoots = dict[str, dict[int, list[float]]]  # arm -> ABBA block -> the boot's usable figures
GOODPUT = "goodput_req_s"
GOODPUT_WORDS = ("higher (better)", "lower (worse)")
STEP_FIGURE = "ms_per_token"
STEP_UNIT = "ms per token"
PER_USER_RATE = HEADLINE["decode"].unit  # a headline in this unit also reads as time per token: 1000 / rate


@dataclass
class PercentileBoots:
    """One latency percentile of one scenario: each boot's figure from its pooled rounds."""

    figure: LatencyFigure
    values: ArmBoots  # supported boots only, one value each
    counts: dict[str, dict[int, int]]  # arm -> block -> samples pooled over the boot's usable rounds
    # arm -> the client bounds of its rounds usable for the headline but left out of this figure (its
    # own client bound failed)
    client_left_out: dict[str, list[float]] = field(default_factory=dict)

    def support(self, arms: tuple[str, str]) -> SampleSupport:
        """The counts of the blocks where both arms' boots were measured (a voided boot's partner
        enters no pair, so its count stands behind nothing printed)."""
        blocks = set(self.counts.get(arms[0], {})) & set(self.counts.get(arms[1], {}))
        return SampleSupport(percentile=percentile_label(self.figure.quantile), needed=min_count(self.figure.quantile),
                             counts={arm: {b: n for b, n in self.counts[arm].items() if b in blocks} for arm in arms
                                     if arm in self.counts})


@dataclass
class ScenarioFigures:
    """What a scenario's comparisons are computed from."""

    kind: str
    headline: Figure
    headline_boots: ArmBoots
    latency: list[PercentileBoots]
    goodput: ArmBoots | None  # None: no SLOs were given
    client_bounds: dict[str, float] = field(default_factory=dict)  # figure -> largest client bound over the rounds used for it


class ScenarioResult(Typed):
    kind: str
    unit: str
    headline: str
    vs: dict[str, Comparison]  # arm -> headline comparison against the baseline
    latency: dict[str, dict[str, Comparison]]  # figure -> arm -> comparison
    goodput: dict[str, Comparison]  # arm -> goodput (requests/s meeting the SLOs) against the baseline; {} without SLOs
    boots: ArmBoots  # usable headline figures
    # arm -> the headline's own boots as time per token (1000 / tok/s per user), a paired difference
    # in ms: what a per-token change (an injected delay, a slower kernel) is in its own unit. The
    # same measurements as the headline, so it is no further verdict; {} for other headlines.
    per_token: dict[str, Comparison] = Field(default_factory=dict)
    # figure -> the largest client bound (a share, rig.load.client_error) over the rounds used for it
    client_bounds: dict[str, float] = Field(default_factory=dict)


class SecondaryFamily(Typed):
    """Every secondary verdict the report prints, judged together."""

    size: int  # secondary comparisons with an interval, over every scenario and arm
    confidence: float  # of each of their intervals
    alpha: float  # the family-wise false-verdict rate with nothing changed
    method: str


class VoidedBoot(Typed):
    index: int
    arm: str
    attempt: int
    problems: list[str]


class ExcludedRounds(Typed):
    index: int
    arm: str
    rounds: list[str]  # "round N scenario: why"


class ImportedBoot(Typed):
    index: int
    arm: str
    block: int
    spec: str
    boot_id: str | None


class BootTally(Typed):
    """Boots planned and used, the voided ones and the rounds left out (with reasons), the imported ones."""

    planned: int
    used: int
    voided: list[VoidedBoot]
    exclusions: list[ExcludedRounds]
    imported: list[ImportedBoot]


class TargetReport(Typed):
    """--target: whether the widest headline precision reached the target, and after how many pairs."""

    target_pct: float
    widest_precision_pct: float | None
    pairs: int
    first_stage: int | None
    planned_pairs: int | None
    max_boots: int | None
    met: bool
    status: str


class TimelineBoot(Typed):
    """A boot in time order, for the plot: its rounds' headline figures (None: not usable)."""

    index: int
    arm: str
    block: int
    voided: bool
    control: bool
    rounds: dict[str, list[float | None]]  # scenario -> each round's headline


class Analysis(Versioned):
    """compare.json."""

    schema_version: int = Field(COMPARE_SCHEMA, alias="schema")
    plan: ComparePlan
    boots: BootTally
    boot_to_healthy_s: dict[str, float | None]
    boot_caches: dict[str, CacheState] = Field(default_factory=dict)  # boot -> its compile caches, where recorded
    scenarios: dict[str, ScenarioResult]
    family: SecondaryFamily
    greedy: GreedyIdentity
    batching: BatchingIdentity
    fingerprints: FingerprintReport
    boot_log_diff: dict[str, list[str]]
    target: TargetReport | None
    gpu: GpuConditions | None = None  # the GPUs during every measured window
    boot_state: BootState | None = None  # the boot-state control applied, its burn-in boots
    known_effects: list[KnownEffect] = Field(default_factory=list)
    void: str | None = None  # why no verdict stands (an unaccepted condition difference)

    @property
    def no_data(self) -> bool:
        """No headline of any scenario had a boot pair usable in both arms: the comparison measured nothing."""
        return all(c.pairs == 0 for result in self.scenarios.values() for c in result.vs.values())
    quality: QualityReport | None = None  # outputs moved or not
    timeline: list[TimelineBoot] = Field(default_factory=list)  # boots in time order, for the plot


@dataclass(frozen=True)
class AnalysisInputs:
    """Everything the analysis needs beyond the plan and the boot entries, read in one place
    (read_inputs): the analysis itself reads no file and starts nothing."""

    kinds: dict[str, str]  # scenario -> its kind (which headline it has)
    greedy: dict[str, bool]  # scenario -> it runs at temperature 0
    encode: Encode | None  # the served tokenizer, where this host has it
    log_lines: dict[str, set[str]]  # boot "NN-arm" -> its normalised boot-log lines
    outputs: dict[str, dict[OutputKey, set[str]]]  # boot -> its temperature-0 load-test output digests
    unreadable_outputs: list[str] = field(default_factory=list)  # rounds whose records are damaged (left out)


def read_inputs(plan: ComparePlan, entries: list[BootEntry]) -> AnalysisInputs:
    scenarios = {name: load_scenario(name) for name in plan.scenarios}
    greedy = {name: scenario.temperature == 0 for name, scenario in scenarios.items()}
    outputs, unreadable = load_test_outputs(entries, greedy)
    return AnalysisInputs(kinds={name: s.kind for name, s in scenarios.items()}, greedy=greedy, encode=_encoder(plan),
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


def _measured(entries: list[BootEntry]) -> list[BootEntry]:
    return [e for e in entries if e.measured]


def figure_boots(entries: list[BootEntry], scenario: str, figure: str) -> ArmBoots:
    boots: ArmBoots = {}
    for entry in _measured(entries):
        values = entry.usable_figures(scenario, figure)
        if values:
            boots.setdefault(entry.arm, {})[entry.block] = values
    return boots


def goodput_boots(entries: list[BootEntry], scenario: str) -> ArmBoots:
    """Each usable round's goodput, zeros kept: a round where no request met the SLOs measured 0."""
    boots: ArmBoots = {}
    for entry in _measured(entries):
        values = [float(r.goodput.requests_per_s) for r in entry.usable_results(scenario) if r.goodput]
        if values:
            boots.setdefault(entry.arm, {})[entry.block] = values
    return boots


def per_token_boots(headline_boots: ArmBoots) -> ArmBoots:
    """Each usable round's decode rate as milliseconds per token (a round without tokens has none)."""
    return {arm: {block: [1000.0 / v for v in values if v > 0] for block, values in blocks.items()}
            for arm, blocks in headline_boots.items()}


def percentile_boots(entries: list[BootEntry], scenario: str, figure: LatencyFigure) -> PercentileBoots:
    result = PercentileBoots(figure=figure, values={}, counts={})
    for entry in _measured(entries):
        rounds = [r.latency[figure.samples] for r in entry.usable_results(scenario, figure.name) if figure.samples in r.latency]
        result.client_left_out.setdefault(entry.arm, []).extend(
            r.client_bounds.get(figure.name) or UNBOUNDED for r in entry.usable_results(scenario) if not r.usable_for(figure.name))
        if not rounds:
            continue
        pooled = pooled_percentile(rounds, figure.quantile)
        result.counts.setdefault(entry.arm, {})[entry.block] = pooled.count
        if pooled.value is not None:
            result.values.setdefault(entry.arm, {})[entry.block] = [pooled.value]
    return result


def scenario_figures(plan: ComparePlan, entries: list[BootEntry], name: str, kind: str) -> ScenarioFigures:
    headline = HEADLINE[kind]
    return ScenarioFigures(kind=kind, headline=headline, headline_boots=figure_boots(entries, name, headline.name),
                           latency=[percentile_boots(entries, name, figure) for figure in LATENCY],
                           goodput=goodput_boots(entries, name) if plan.slos else None,
                           client_bounds=client_bounds_used(entries, name, [headline.name, *(f.name for f in LATENCY)]))


def client_bounds_used(entries: list[BootEntry], scenario: str, names: list[str]) -> dict[str, float]:
    """Per figure, the largest client bound over the rounds it was read from (rounds of rigs before
    the bound, or imported ones, carry none and add nothing)."""
    out = {}
    for name in names:
        figure = None if name not in {f.name for f in LATENCY} else name
        bounds = [b for e in _measured(entries) for r in e.usable_results(scenario, figure) if (b := r.client_bounds.get(name)) is not None]
        if bounds:
            out[name] = max(bounds)
    return out


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
                             headline.higher_is_better, target, CONFIDENCE, first, unit=headline.unit, names=(baseline, arm))
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
                                                    False, target, CONFIDENCE, first, scale=DIFFERENCE, unit=STEP_UNIT,
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
                              CONFIDENCE, first)
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
        boots=BootTally(planned=len(plan.order()), used=len(_measured(entries)),
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
