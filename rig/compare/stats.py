"""Statistics of a comparison across boots.

The boot is the unit of replication. Every boot of a serving engine is a different draw
(autotuning, memory layout, KV budget, page cache), and the rounds measured inside one boot
share that draw: they are nested in the boot, not independent replicates. Following Kalibera &
Jones ("Rigorous Benchmarking in Reasonable Time", ISMM 2013), the inference is made at the
highest level of the design that varies, here the boot:

- each boot's figure is the mean of its usable rounds (rounds only sharpen that mean);
- boots are paired by ABBA block (block k holds one boot of each arm, adjacent in time), so
  drift over time (thermal, page cache) cancels within a pair;
- the effect is the paired log ratio d_k = ln(arm_k / baseline_k); its mean gets a Student t
  interval on (pairs - 1) degrees of freedom, reported back as a percentage, asymmetric as the
  ratio scale makes it. With equal rounds per boot, boot means are independent with variance
  sigma_boot^2 + sigma_round^2 / R, so the t interval is exact under normality; calibration by
  simulation (tests/compare/test_compare_calibration.py) checks the error rates it states;
- the means printed beside it are those of the paired boots only (geometric, so their ratio is
  the delta), never of a boot whose partner was voided;
- a figure that can be zero (goodput) is compared as a paired difference in its own unit, zeros
  kept; a ratio figure's non-positive values have no log and are listed as excluded, never dropped
  silently.

Multiplicity: the headline of each comparison keeps its own CONFIDENCE. The secondary figures of
a report (latency percentiles, goodput: every other verdict it prints) form one family whose
intervals are Bonferroni-simultaneous (`family_confidence`): with nothing changed, the chance that
any of them prints a verdict is at most FAMILY_ALPHA (tests/compare/test_compare_report_calibration.py).
Bonferroni rather than Holm because each printed interval must agree with its verdict, and Holm's
step-down verdicts have no such intervals.

No verdict where the design cannot support one: one pair has no variance estimate, so it
reports "not enough boots" and how many more pairs would be needed. The noise reported beside
the delta estimates (not maximises) the boot-level and round-level standard deviations, so more
boots shrink the uncertainty instead of raising a floor.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
from pydantic import Field

from rig.typed import Typed

CONFIDENCE = 0.95
SEQUENTIAL_ALPHA = round(1 - CONFIDENCE, 10)  # a stopping rule's false-verdict rate over all its looks


def per_look_confidence(looks: int, alpha: float = SEQUENTIAL_ALPHA) -> float:
    """Each look's interval level of a stopping rule with `looks` looks fixed in advance: Bonferroni."""
    return 1 - alpha / looks
FAMILY_ALPHA = 0.05  # family-wise false-verdict rate of a report's secondary figures
MIN_PAIRS = 2  # below this there is no variance estimate: no interval, no verdict
DEFAULT_TARGET_PCT = 1.0  # the precision the planning line resolves by default
# `--target` is Stein's two-stage procedure (Stein 1945): a first stage of at least this many pairs
# estimates the sd of a pair's difference; that estimate alone fixes how many pairs to run, and the
# final interval uses it with its own degrees of freedom. Adding pairs until the half-width first
# dips below the target instead favours draws whose sd came out small: simulated at boot sd 1%, it
# covered 91.5% from 2 pairs and 94.2% from 4, with 5.8% false verdicts; Stein's holds 95%.
MIN_PAIRS_FOR_TARGET = 4
RATIO, DIFFERENCE = "ratio", "difference"


def family_confidence(size: int, alpha: float = FAMILY_ALPHA) -> float:
    """Bonferroni: `size` intervals, each at 1 - alpha / size, all cover together with probability
    at least 1 - alpha, so with nothing changed any of them prints a verdict at most that often."""
    return 1 - alpha / max(size, 1)


def precision_pct(half_log: float) -> float:
    """A ratio interval's precision: its ends lie within a factor (1 + precision) of the estimate
    (ln-scale half-width h -> 100 (e^h - 1)). What `--target` plans for and is judged against."""
    return 100.0 * math.expm1(half_log)


def half_log(target_pct: float) -> float:
    """The ln-scale half-width whose precision_pct is target_pct (its inverse)."""
    return math.log1p(target_pct / 100.0)


def stein_pairs(sd_first: float, first: int, target_pct: float, confidence: float = CONFIDENCE) -> int:
    """Pairs whose Stein interval (first-stage sd and df) has a precision at most the target."""
    return max(first, math.ceil((t_quantile(first - 1, confidence) * sd_first / half_log(target_pct)) ** 2))


def target_met(widest_precision_pct: float | None, target_pct: float) -> bool:
    return widest_precision_pct is not None and widest_precision_pct <= target_pct


@lru_cache(maxsize=4096)
def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    from scipy import stats as scipy_stats  # here, not at import: the CLI's parser imports this module (~0.5 s)

    return float(scipy_stats.t.ppf(0.5 + confidence / 2, df))


def pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio)


def pairs_needed(sd_diff: float, target_pct: float, confidence: float = CONFIDENCE, limit: int = 1000,
                 resolution: float = 0.0) -> int | None:
    """Smallest number of boot pairs whose interval precision is at most the target, given the sd
    of one pair's ln-ratio difference; None when more than `limit`. With a `resolution` (values read
    in bins), the interval is compare_boots' widened one, and a target at or below the resolution is
    never reached."""
    def resolves(n: int) -> bool:
        spread = sd_diff + resolution * math.sqrt(n / (n - 1))
        return precision_pct(t_quantile(n - 1, confidence) * spread / math.sqrt(n) + resolution) <= target_pct

    if sd_diff <= 0 and not resolution:
        return MIN_PAIRS
    if not resolves(limit):
        return None
    low, high = MIN_PAIRS, limit  # the half-width shrinks as n grows: bisect for the first n that resolves
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if resolves(middle) else (middle + 1, high)
    return low


class NoiseComponents(Typed):
    """Standard deviations estimated from every usable boot, in `unit`: percent (of the log figure)
    for a ratio comparison, the figure's own unit for a difference."""

    boot_sd: float | None  # between boots of one arm, round noise removed
    round_sd: float | None  # between rounds inside one boot
    rounds_per_boot: float | None
    unit: str = "%"


def noise_components(boots: dict[str, list[list[float]]], scale: str = RATIO, unit: str = "%") -> NoiseComponents:
    """One-way random-effects estimate per arm, pooled across arms: round variance from the
    within-boot spread, boot variance from the spread of boot means minus round variance / R."""
    within_ss = within_df = 0.0
    between_ss = between_df = 0.0
    sizes = []
    factor = 100.0 if scale == RATIO else 1.0
    for arm_boots in boots.values():
        values_per_boot = [np.asarray(rounds, dtype=float) for rounds in arm_boots if rounds]
        if scale == RATIO:
            values_per_boot = [np.log(values) for values in values_per_boot]
        for values in values_per_boot:
            sizes.append(len(values))
            if len(values) > 1:
                within_ss += float(((values - values.mean()) ** 2).sum())
                within_df += len(values) - 1
        means = np.asarray([values.mean() for values in values_per_boot])
        if len(means) > 1:
            between_ss += float(((means - means.mean()) ** 2).sum())
            between_df += len(means) - 1
    round_var = within_ss / within_df if within_df else None
    rounds = float(np.mean(sizes)) if sizes else None
    boot_var = None
    if between_df:
        boot_var = max(0.0, between_ss / between_df - (round_var or 0.0) / (rounds or 1.0))
    return NoiseComponents(
        boot_sd=None if boot_var is None else factor * math.sqrt(boot_var),
        round_sd=None if round_var is None else factor * math.sqrt(round_var),
        rounds_per_boot=rounds, unit="%" if scale == RATIO else unit,
    )


class SampleSupport(Typed):
    """A percentile figure: the samples behind each boot's figure and the boots refused for too few."""

    percentile: str  # "p99"
    needed: int  # rig.compare.percentiles.min_count
    counts: dict[str, dict[int, int]]  # arm -> block -> samples pooled over the boot's usable rounds

    def refused(self) -> list[tuple[str, int, int]]:
        """(arm, block, samples) of the boots with too few samples for the percentile."""
        return [(arm, block, n) for arm, blocks in self.counts.items() for block, n in sorted(blocks.items()) if n < self.needed]

    def count_range(self) -> tuple[int, int] | None:
        counts = [n for blocks in self.counts.values() for n in blocks.values()]
        return (min(counts), max(counts)) if counts else None


class Comparison(Typed):
    """One figure, baseline arm vs one other arm."""

    figure: str
    unit: str
    higher_is_better: bool
    scale: str  # RATIO: delta and interval in percent of the baseline; DIFFERENCE: in `unit`
    confidence: float  # of this interval: CONFIDENCE for a headline, family_confidence() for the rest
    pairs: int  # complete boot pairs (both arms have a usable figure in the block)
    baseline_mean: float | None  # over the paired boots only: geometric (RATIO) or arithmetic (DIFFERENCE)
    arm_mean: float | None
    delta: float | None  # RATIO: 100 (arm_mean / baseline_mean - 1); DIFFERENCE: arm_mean - baseline_mean
    ci: tuple[float, float] | None  # the interval of delta, asymmetric on the RATIO scale
    precision_pct: float | None  # RATIO: the interval's ends lie within a factor (1 + this %) of the estimate
    pair_deltas: list[float]  # each pair's own delta, in block order, in the units of delta
    noise: NoiseComponents
    pair_sd: float | None  # sd of one pair's difference (percent of the log ratio, or `unit`): what planning uses
    pairs_for_target: int | None  # boot pairs that would resolve the target precision (RATIO only)
    target_pct: float
    decided: bool  # the interval excludes zero: the verdict names a direction
    verdict: str  # the direction in the figure's words, or why there is none
    method: str
    excluded: list[str] = Field(default_factory=list)  # values that could not enter, with the reason
    support: SampleSupport | None = None  # percentile figures only


def paired_blocks(baseline: dict[int, list[float]], arm: dict[int, list[float]], scale: str = RATIO) -> list[int]:
    """The ABBA blocks where both arms have a figure that can enter the comparison."""
    def usable(values: list[float]) -> bool:
        return any(v > 0 for v in values) if scale == RATIO else bool(values)

    return sorted(b for b in set(baseline) & set(arm) if usable(baseline[b]) and usable(arm[b]))


def _words(higher_is_better: bool, positive: bool) -> str:
    if higher_is_better:
        return "faster" if positive else "slower"
    return "higher (worse)" if positive else "lower (better)"


def _confidence_label(confidence: float) -> str:
    return f"{100 * confidence:.4g}%"


def compare_boots(baseline: dict[int, list[float]], arm: dict[int, list[float]], figure: str = "figure",
                  higher_is_better: bool = True, target_pct: float = DEFAULT_TARGET_PCT,
                  confidence: float = CONFIDENCE, first_stage: int | None = None, scale: str = RATIO,
                  unit: str = "", words: tuple[str, str] | None = None,
                  names: tuple[str, str] = ("baseline", "arm"), resolution: float = 0.0) -> Comparison:
    """`baseline[block]` / `arm[block]`: the usable round figures of that arm's boot in that ABBA
    block (a voided boot or one without usable rounds is absent or empty). `first_stage`: the
    comparison ran under `--target` (Stein's procedure): the sd comes from the pairs of the first
    `first_stage` blocks only, with their degrees of freedom, and the mean from every pair.
    `words`: what a positive and a negative resolved delta are called. `resolution`: the most the
    difference of the two arms' means can be off because each boot's value is read at a finite
    resolution (in the units of the differences: ln for RATIO). It is a bound, not noise, so it widens
    the interval as it is: boot values that agree to within their resolution (every pair the same
    difference, sd 0) would otherwise give an interval of zero width."""
    excluded: list[str] = []
    if scale == RATIO:
        for name, boots in zip(names, (baseline, arm)):
            for block, values in sorted(boots.items()):
                bad = [v for v in values if not v > 0]
                if bad:
                    excluded.append(f"{name} block {block}: {len(bad)} value(s) <= 0 have no log ratio")
        baseline = {b: [v for v in values if v > 0] for b, values in baseline.items()}
        arm = {b: [v for v in values if v > 0] for b, values in arm.items()}
    blocks = paired_blocks(baseline, arm, scale)
    base_boots = np.asarray([np.mean(baseline[b]) for b in blocks], dtype=float)
    arm_boots = np.asarray([np.mean(arm[b]) for b in blocks], dtype=float)
    if scale == RATIO:
        diffs = np.log(arm_boots) - np.log(base_boots)
        base_mean = float(np.exp(np.log(base_boots).mean())) if blocks else None
        arm_mean = float(np.exp(np.log(arm_boots).mean())) if blocks else None
        shown = [pct(d) for d in diffs]
        factor = 100.0
        what = "ln(arm/baseline)"
    else:
        diffs = arm_boots - base_boots
        base_mean = float(base_boots.mean()) if blocks else None
        arm_mean = float(arm_boots.mean()) if blocks else None
        shown = [float(d) for d in diffs]
        factor = 1.0
        what = "arm - baseline"
    noise = noise_components({"baseline": [v for v in baseline.values() if v], "arm": [v for v in arm.values() if v]},
                             scale, unit)
    positive, negative = words or (_words(higher_is_better, True), _words(higher_is_better, False))
    method = (f"paired t interval on {what} of ABBA boot-pair means, {len(blocks)} pair(s), "
              f"{len(blocks) - 1} df, {_confidence_label(confidence)}")
    common: dict[str, Any] = dict(
        figure=figure, unit=unit, higher_is_better=higher_is_better, scale=scale, confidence=confidence, pairs=len(blocks),
        baseline_mean=base_mean, arm_mean=arm_mean, pair_deltas=shown, noise=noise, target_pct=target_pct, method=method,
        excluded=excluded,
    )
    if len(blocks) == 0:
        return Comparison(**common, delta=None, ci=None, precision_pct=None, pair_sd=None, pairs_for_target=None,
                          decided=False, verdict="no data: no boot pair with a usable figure in both arms")
    mean = float(diffs.mean())
    delta = pct(mean) if scale == RATIO else mean
    if len(blocks) < MIN_PAIRS:
        # Planning from the components when both are known: a pair's difference has variance
        # 2 (boot var + round var / R). One boot per arm says nothing of the boot variance: unknown.
        needed = None
        if scale == RATIO and noise.round_sd is not None and noise.boot_sd is not None:
            sd = math.sqrt(2 * ((noise.boot_sd / 100) ** 2 + (noise.round_sd / 100) ** 2 / (noise.rounds_per_boot or 1)))
            needed = pairs_needed(sd, target_pct, confidence)
        return Comparison(**common, delta=delta, ci=None, precision_pct=None, pair_sd=None, pairs_for_target=needed,
                          decided=False, verdict=f"not enough boots: {MIN_PAIRS - len(blocks)} more pair(s) needed for an interval")
    sd = float(diffs.std(ddof=1))
    df = len(blocks) - 1
    first = [d for block, d in zip(blocks, diffs) if block < first_stage] if first_stage else []
    if first_stage and len(first) < MIN_PAIRS:
        # Stein's interval takes its sd from the first stage alone; with voided boots leaving fewer
        # than two first-stage pairs there is none, and the sd of every pair is not Stein's procedure.
        return Comparison(**common, delta=delta, ci=None, precision_pct=None, pair_sd=None, pairs_for_target=None,
                          decided=False, verdict=f"no verdict: only {len(first)} of Stein's {first_stage} first-stage pair(s) "
                          "are usable (voided boots), so the first stage has no sd; start a new comparison")
    if first_stage:
        sd, df = float(np.std(first, ddof=1)), len(first) - 1
        common["method"] = (f"Stein two-stage: t interval on {what} of ABBA boot-pair means, {len(blocks)} pair(s), "
                            f"sd from the {len(first)} first-stage pair(s), {df} df, {_confidence_label(confidence)}")
    # Values read at a resolution also shrink the sample sd (pairs whose values fall in the same bins
    # differ by exactly as much): each difference is off by at most `resolution`, so the true sd is at
    # most the observed one plus resolution * sqrt(n / (n - 1)) (n: the pairs the sd comes from).
    spread = sd + resolution * math.sqrt((df + 1) / df)
    half = t_quantile(df, confidence) * spread / math.sqrt(len(blocks)) + resolution
    low, high = mean - half, mean + half
    if resolution:
        common["method"] += f", widened by the values' resolution (+/-{factor * resolution:.3g}{'%' if scale == RATIO else ''})"
    decided = low > 0 or high < 0
    verdict = (positive if mean > 0 else negative) if decided else "no difference resolved (the interval spans 0)"
    if scale == RATIO:
        ci = (pct(low), pct(high))
        if resolution:
            planned = pairs_needed(sd, target_pct, confidence, resolution=resolution)
        else:
            planned = stein_pairs(sd, df + 1, target_pct, confidence) if first_stage else pairs_needed(sd, target_pct, confidence)
        precision: float | None = precision_pct(half)
    else:
        ci, planned, precision = (low, high), None, None
    return Comparison(**common, delta=delta, ci=ci, precision_pct=precision, pair_sd=factor * sd, pairs_for_target=planned,
                      decided=decided, verdict=verdict)


# ---- exact tests and paired summaries (the quality verdicts) ----------------------------------

class PairedInterval(Typed):
    """A paired estimate over ABBA blocks: mean, 95% t interval (pairs - 1 df), per-block values."""

    mean: float | None
    ci: tuple[float, float] | None
    pairs: int
    values: list[float]

    @classmethod
    def of(cls, values: list[float]) -> PairedInterval:
        if not values:
            return cls(mean=None, ci=None, pairs=0, values=[])
        mean = float(np.mean(values))
        if len(values) < 2:
            return cls(mean=mean, ci=None, pairs=len(values), values=values)
        half = t_quantile(len(values) - 1) * float(np.std(values, ddof=1)) / math.sqrt(len(values))
        return cls(mean=mean, ci=(mean - half, mean + half), pairs=len(values), values=values)


def sign_flip_p(values: list[float], one_sided: bool) -> float:
    """Exact sign-flip permutation p-value of mean(values) against 0 (values symmetric under the null);
    the smallest it can be is 1 / 2^n (one-sided) or 2 / 2^n (two-sided)."""
    import itertools

    if not values:
        return 1.0
    observed = float(np.mean(values))
    means = [float(np.mean([s * v for s, v in zip(signs, values)])) for signs in itertools.product((1, -1), repeat=len(values))]
    tolerance = 1e-12 * max(1.0, abs(observed))
    if one_sided:
        return sum(m >= observed - tolerance for m in means) / len(means)
    return sum(abs(m) >= abs(observed) - tolerance for m in means) / len(means)


def min_pairs_for(alpha: float, one_sided: bool) -> int:
    """The fewest values a sign-flip test needs before any result can reach `alpha`."""
    n = 1
    while (1 if one_sided else 2) / 2 ** n > alpha:
        n += 1
    return n


def holm(p_values: dict[str, float], alpha: float = 0.05) -> dict[str, bool]:
    """Holm's step-down: which hypotheses are rejected with the family-wise error held at alpha."""
    rejected = {}
    for rank, (name, p) in enumerate(sorted(p_values.items(), key=lambda item: item[1])):
        if p > alpha / (len(p_values) - rank):
            break
        rejected[name] = True
    return {name: rejected.get(name, False) for name in p_values}
