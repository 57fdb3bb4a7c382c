"""compare.md: the analysis as Markdown, one function per section (SECTIONS, in order)."""

from __future__ import annotations

from rig.boot.record import CacheState
from rig.compare.effects import KnownEffect
from rig.compare.model import ComparePlan
from rig.compare.percentiles import min_count
from rig.compare.quality import quality_line
from rig.compare.report import Analysis
from rig.compare.sequential import interval_text
from rig.compare.stats import CONFIDENCE, RATIO, Comparison, pairs_needed
from rig.load.client_error import share_text


def _num(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.2f}" if abs(value) >= 1 else f"{value:.4f}"


# An interval whose ends lie further than a factor 2 from its estimate (or that reaches -100%) bounds
# nothing: it is printed as the pairs it would need, never as numbers like +1994021%.
MEANINGFUL_PRECISION_PCT = 100.0


def _delta(c: Comparison, value: float) -> str:
    if c.scale != RATIO:
        return f"{value:+.4f}"
    return f"x{1 + value / 100:.1f}" if value >= 1000 else f"{value:+.2f}%"  # +1500% reads as x16.0


def bounds_nothing(c: Comparison) -> bool:
    """A ratio interval too wide to say how large the change is (compare.json keeps its raw bounds)."""
    return (c.scale == RATIO and c.ci is not None
            and (c.ci[0] <= -99.0 or c.precision_pct is None or c.precision_pct > MEANINGFUL_PRECISION_PCT))


def _interval(c: Comparison) -> str:
    if c.ci is None:
        return "[no interval]"
    bounds = f"[{_delta(c, c.ci[0])}, {_delta(c, c.ci[1])}]"
    if bounds_nothing(c):  # printed as it is (the verdict reads it), and said to bound nothing
        needed = pairs_needed(c.pair_sd / 100, MEANINGFUL_PRECISION_PCT, c.confidence) if c.pair_sd else None
        if needed and needed > c.pairs:  # a decided direction stands; only its size is not yet bounded
            return f"{bounds} (" + ("direction resolved; its size " if c.decided else "bounds nothing yet: ") + f"needs >= {needed} pairs)"
        return f"{bounds} (bounds nothing: its pairs disagree too much)"
    return bounds


def _details(c: Comparison) -> str:
    parts = [f"{c.pairs} pair(s), " + (f"{100 * c.confidence:.4g}% interval" if c.ci is not None else "too few for an interval")]
    unit = c.noise.unit if c.noise.unit == "%" else f" {c.noise.unit}"
    if c.noise.boot_sd == 0:  # the estimate clamped at zero: not boots that were identical
        parts.append("boot sd ~0 (the boots differed no more than their rounds' noise explains)")
    elif c.noise.boot_sd is not None:
        parts.append(f"boot sd {c.noise.boot_sd:.3g}{unit}")
    if c.noise.round_sd is not None:
        parts.append(f"round sd {c.noise.round_sd:.3g}{unit}")
    if c.pairs_for_target is not None and c.confidence == CONFIDENCE:
        parts.append(f"{c.pairs_for_target} pairs resolve {c.target_pct:g}%")
    if c.support is not None and (counts := c.support.count_range()):
        parts.append(f"{c.support.percentile} of {counts[0]}-{counts[1]} samples per boot")
        if refused := c.support.refused():
            parts.append(f"{len(refused)} boot(s) refused, fewer than {c.support.needed}: "
                         + ", ".join(f"{arm} block {block} ({n})" for arm, block, n in refused))
    return "; ".join(parts)


def comparison_line(scenario: str, label: str, c: Comparison) -> str:
    """One comparison as the report prints it: paired means, delta, interval, verdict, details."""
    head = f"{scenario:14} {label:24}"
    if c.delta is None or c.baseline_mean is None or c.arm_mean is None:
        return f"{head} {c.verdict}"  # no pair: the verdict says why (a refusal names the counts)
    means = f"{_num(c.baseline_mean):>10} -> {_num(c.arm_mean):>10} {c.unit:15}"
    interval = _interval(c)
    lines = [f"{head} {means} {_delta(c, c.delta):>8} {interval:20} {c.verdict}   ({_details(c)})"]
    lines += [f"{'':14} {'':24} left out: {reason}" for reason in c.excluded]
    return "\n".join(lines)


def _ms(value: float) -> str:
    """A time per token: in microseconds below a millisecond (a 44 us effect must not read +0.05)."""
    return f"{1000 * value:+.1f} us" if abs(value) < 1 else f"{value:+.2f} ms"


def per_token_line(scenario: str, arm: str, c: Comparison) -> str | None:
    """The headline's boots as time per token: printed under the headline, with no verdict of its
    own (the same measurements; the headline's verdict stands)."""
    if c.delta is None or c.ci is None or c.baseline_mean is None or c.arm_mean is None:
        return None
    return (f"{scenario:14} {'  per token ' + arm:24} {_num(c.baseline_mean):>10} -> {_num(c.arm_mean):>10} {'ms per token':15} "
            f"{_ms(c.delta)} [{_ms(c.ci[0])}, {_ms(c.ci[1])}]   (the headline as time per token: paired t on the "
            f"boot pairs' differences, {c.pairs} pair(s), {100 * c.confidence:.4g}%; no separate verdict)")


def known_effect_line(effect: KnownEffect) -> str:
    own = (f" [{_ms(effect.effect_interval_ms[0])}, {_ms(effect.effect_interval_ms[1])}]"
           if effect.effect_interval_ms else "")
    if effect.covered is None or effect.interval_ms is None:
        held = "no per-token interval to hold it against"
    else:
        agrees = "reaches it" if effect.at_least else "agrees with it"
        held = (f"the per-token interval [{_ms(effect.interval_ms[0])}, {_ms(effect.interval_ms[1])}] "
                + (agrees if effect.covered else f"does NOT {agrees.replace('reaches', 'reach').replace('agrees', 'agree')}")
                + (f" from {100 * effect.tolerance:g}% below to {100 * effect.tolerance_above:g}% above (the server's response "
                   "to a longer step; a loaded CPU wakes it late)" if effect.tolerance else ""))
    size = "at least " if effect.at_least else ""
    return (f"{'':14} {'  known effect ' + effect.arm:24} {effect.adapter} measured {size}{_ms(effect.per_token_ms)}{own} per "
            f"token ({effect.statistic}, {effect.boots} boot(s)); {held}")


def _headline_level(plan: ComparePlan, headlines: int) -> str:
    """At what confidence each headline interval is read, and what that holds."""
    if plan.stopping_rule is None:
        return (f"{100 * CONFIDENCE:.0f}% for each of the {headlines} headline comparison(s) (each, with nothing changed, "
                f"prints a verdict {100 - 100 * CONFIDENCE:.0f}% of the time)")
    return (f"{100 * plan.confidence:.4g}% for each of the {headlines} headline comparison(s): the level a stopping rule "
            "spent on each of its looks (until-decided.json), so the interval at the stop still covers the change at least "
            f"{100 * CONFIDENCE:.0f}% of the time")


def _header(analysis: Analysis) -> list[str]:
    """The title, then the answer: each headline's verdict in one line (what `rig compare` prints)."""
    plan = analysis.plan
    arms = [a.name for a in plan.arms]
    lines = [f"# rig compare {plan.recipe}: {' vs '.join(arms)}", ""]
    if analysis.void:
        lines += [f"**VOID: {analysis.void}**", ""]
    if analysis.no_data:
        lines += ["**NO DATA: the boots ran, but no boot pair had a usable headline round in both arms** (each left-out "
                  "round is named below with its reason); exit code 4.", ""]
    if not analysis.void:
        lines += [f"- {line}" for line in headline_verdicts(analysis)] + [""]
    return lines


def headline_verdicts(analysis: Analysis) -> list[str]:
    """Each headline's verdict in one line, as `rig compare` prints it and compare.md opens with it."""
    baseline = analysis.plan.arms[0].name
    lines = []
    for scenario, result in analysis.scenarios.items():
        for arm, c in result.vs.items():
            interval = f"{100 * c.confidence:.4g}% interval" if c.ci is not None else "no interval"
            lines.append(f"{scenario} {arm} vs {baseline}: {c.verdict}: {interval_text(c)} {result.unit} "
                         f"({c.pairs} boot pair(s), {interval})")
    return lines


def _method(analysis: Analysis) -> list[str]:
    """How the figures above were made: the design, the intervals, the multiplicity, the notation."""
    plan = analysis.plan
    arms = [a.name for a in plan.arms]
    planned = analysis.boots.planned - (1 if plan.control else 0) - (1 if plan.burn_in_first else 0)
    headlines = len(analysis.scenarios) * (len(arms) - 1)
    family = analysis.family
    return ["\n## Method",
            f"{plan.boots} boot pair(s) (ABBA), {plan.rounds} rounds per boot, each scenario's first run after every boot "
            f"discarded; {analysis.boots.used} of {planned} boots measured (a boot whose rounds were all left out pairs "
            "with none: each line above names its pairs). Headline: paired t interval on the boot-pair log "
            f"ratios (the boot is the unit of replication), {_headline_level(plan, headlines)}. "
            "Secondary figures (latency percentiles"
            + (", goodput as a paired difference in req/s" if plan.slos else "")
            + f"): {family.size} interval(s), each at {100 * family.confidence:.4g}% (Bonferroni: with nothing changed, any "
            f"of them prints a verdict at most {100 * family.alpha:.0f}% of the time). Percentiles: each boot's requests "
            f"pooled over its usable rounds; a boot with fewer samples than bracket the percentile with 95% confidence is "
            f"refused (p50: {min_count(0.5)}, p99: {min_count(0.99)}). Means: of the paired boots only (geometric for "
            "ratios, so their ratio is the delta). An interval end past +1000% is written as a factor of the baseline "
            "(x16.0: 16 times it)."]


def _figures(analysis: Analysis) -> list[str]:
    arms = [a.name for a in analysis.plan.arms]
    lines = ["```"]
    for name, result in analysis.scenarios.items():
        for arm, c in result.vs.items():
            lines.append(comparison_line(name, f"{arms[0]} -> {arm}", c))
            per_token = per_token_line(name, arm, result.per_token[arm]) if arm in result.per_token else None
            lines += [per_token] if per_token else []
            lines += [known_effect_line(e) for e in analysis.known_effects if e.scenario == name and e.arm == arm]
        for figure, per_arm in result.latency.items():
            lines += [comparison_line(name, f"  {figure} {arm}", c) for arm, c in per_arm.items()
                      if c.pairs or (c.support and c.support.count_range()) or c.verdict.startswith("refused")]
        if result.goodput:
            lines += [comparison_line(name, f"  goodput {arm}", c) for arm, c in result.goodput.items()]
    lines.append("```")
    if analysis.plan.slos:
        lines.append(f"Goodput: requests per second meeting every SLO {analysis.plan.slos} (seconds).")
    lines += [client_line(name, result.client_bounds) for name, result in analysis.scenarios.items() if result.client_bounds]
    return lines


def client_line(scenario: str, bounds: dict[str, float]) -> str:
    """How far the client's own timing could have moved each figure, at worst over the rounds it was read from."""
    return (f"Client timing, {scenario} (the most it could move a figure, over the rounds read for it): "
            + ", ".join(f"{name} +/- {share_text(bound)}" for name, bound in bounds.items()) + ".")


def _target_section(analysis: Analysis) -> list[str]:
    return [f"\n{analysis.target.status}."] if analysis.target else []


def _greedy(analysis: Analysis) -> list[str]:
    greedy = analysis.greedy
    if not greedy.prompts:
        return []
    n = len(greedy.prompts)
    across = sum(greedy.identical_across_arms.values())
    lines = [f"\nGreedy identity (temperature 0, c=1, {n} prompts): {greedy.status}; across arms {across}/{n}; "
             + "; ".join(f"within {arm} {sum(v.values())}/{n} over {greedy.boots_per_arm[arm]} boots"
                         for arm, v in greedy.identical_within_arm.items())]
    control = greedy.control
    if control:
        if control.discriminates is None:
            lines.append(f"Control {control.arm}: not measured ({control.note}).")
        elif control.discriminates:
            lines.append(f"Control {control.arm}: {len(control.differing_prompts)}/{n} prompts differ from every "
                         f"baseline boot: the check discriminates.")
        else:
            lines.append(f"Control {control.arm}: the check does NOT discriminate "
                         f"({len(control.differing_prompts)}/{n} differ; {control.note or 'same outputs'}).")
    return lines


def _batching(analysis: Analysis) -> list[str]:
    batching = analysis.batching
    lines = [f"Identity under batching: left out {where}" for where in batching.unreadable]
    if not batching.compared_prompts:
        return lines
    return [f"Identity under batching (load-test outputs, same prompt and nonce across arms): "
            f"{batching.identical}/{batching.compared_prompts} identical (batch composition may change them).", *lines]


def _boots(analysis: Analysis) -> list[str]:
    lines = [f"\nImported boot {i.index} ({i.arm}, block {i.block}): {i.spec} ({i.boot_id}): measured by "
             "another tool; rig did not check its client, boot or warmup." for i in analysis.boots.imported]
    lines += [f"\nVoided boot {v.index} ({v.arm}, attempt {v.attempt}): " + "; ".join(v.problems)[:500]
              for v in analysis.boots.voided]
    lines += [f"\nRounds left out of boot {e.index} ({e.arm}): " + "; ".join(e.rounds)[:500]
              for e in analysis.boots.exclusions]
    return lines


def _boot_state(analysis: Analysis) -> list[str]:
    """The boot-state control, and what each burn-in boot read against its arm's measured boots."""
    state = analysis.boot_state
    if state is None:
        return []
    lines = [f"\nBoot-state control: {state.control}."]
    for boot in state.burn_in:
        figures = ", ".join(f"{scenario} {_num(value)}" + (f" ({versus:+.2f}% vs the arm's measured boots)"
                                                           if (versus := boot.vs_measured_pct.get(scenario)) is not None else "")
                            for scenario, value in boot.headline.items() if value is not None)
        cache = boot.compile_cache
        caches = (f"; caches {cache.state or 'not recorded'} at start, engine log: {cache.log or 'no compile lines'}"
                  if cache is not None else "")
        lines.append(f"- burn-in {boot.boot} ({boot.why}{caches}): " + (figures or "no usable round"))
    if state.compiled:
        lines.append(f"- measured boots that compiled: {', '.join(state.compiled)}"
                     + (" (with others that reused their caches: the boot states differ)" if state.voiding else ""))
    return lines


def _gpus(analysis: Analysis) -> list[str]:
    gpu = analysis.gpu
    if gpu is None or not gpu.boots:
        return []
    sm = [b.sm_mhz_mean for b in gpu.boots if b.sm_mhz_mean is not None]
    power = [b.power_w_mean for b in gpu.boots if b.power_w_mean is not None]
    events = sorted({name for b in gpu.boots for name in b.clock_events})
    line = (f"\nGPUs during the measured windows ({len(gpu.boots)} boots): SM clock "
            + (f"{min(sm):.0f}-{max(sm):.0f} MHz (boot means)" if sm else "not read")
            + (f", power {min(power):.0f}-{max(power):.0f} W" if power else "")
            + (f"; clock-event reasons: {', '.join(events)}" if events else "; no clock-event reason (no power cap, "
               "thermal or hardware slowdown) in any window"))
    if gpu.differing_events:
        line += f"; in some boots only: {', '.join(gpu.differing_events)}"
        line += (f" ({', '.join(gpu.by_arm_events)} in one arm's boots only: voids the verdict)" if gpu.voiding else
                 " (accepted)" if gpu.by_arm_events else " (seen in every arm's boots: reported only)")
    return [line]


def _caches(caches: CacheState | None) -> str:
    if caches is None:
        return ""
    grew = ", ".join(f"{name} +{files}" for name, files in sorted(caches.grew.items()))
    return f" ({caches.state}" + (f"; filled: {grew})" if grew else "; nothing added)")


def _conditions(analysis: Analysis) -> list[str]:
    lines = []
    differences = analysis.fingerprints.differences
    if differences:
        lines.append("\nFingerprint differences between boots: " + "; ".join(
            f"{d.field} ({d.kind})" for d in differences[:20]))
    healthy = [f"{k} {v:.1f}s" + _caches(analysis.boot_caches.get(k)) for k, v in analysis.boot_to_healthy_s.items() if v]
    if healthy:
        lines.append("\nBoot to healthy (compile caches at start; what the boot added to them): " + ", ".join(healthy))
    for arm, only in analysis.boot_log_diff.items():
        if only:
            lines.append(f"\nBoot-log lines only in {arm}:\n" + "\n".join(f"    {line[:200]}" for line in only[:20]))
    return lines


def _quality(analysis: Analysis) -> list[str]:
    """One line per arm beside the throughput verdict: did the outputs move, and by more than noise."""
    quality = analysis.quality
    if not quality:
        return []
    arms = [a.name for a in analysis.plan.arms]
    lines = ["\nQuality beside speed (teacher-forced scores of the baseline's greedy continuations; the noise floor "
             "is the drift between baseline boots; coherence differences under Holm across the arm's figures):"]
    lines += [f"- {arm}: {quality_line(quality, arm)}" for arm in arms[1:]]
    control = analysis.plan.control
    if control and (control.name in quality.drift or control.name in quality.divergence):
        lines.append(f"- control {control.name} (one boot, a known numerics change): {quality_line(quality, control.name)}")
    lines += [f"- note: {note}" for note in quality.notes]
    return lines


SECTIONS = (_header, _figures, _quality, _target_section, _greedy, _batching, _boots, _boot_state, _gpus, _conditions,
            _method)


def markdown(analysis: Analysis) -> str:
    return "\n".join(line for section in SECTIONS for line in section(analysis)) + "\n"
