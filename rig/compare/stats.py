"""Statistics of a comparison across boots.

The boot is the unit of replication. Every boot of a serving engine is a different draw
(autotuning, memory layout, KV budget, page cache), and the rounds measured inside one boot
share that draw: they are nested in the boot, not independent replicates. Following Kalibera &
Jones ("Rigorous Benchmarking in Reasonable Time", ISMM 2013), the inference is made at the
highest level of the design that varies, here the boot:

- each boot's figure is the mean of its usable rounds (rounds only sharpen that mean);
- boots are paired by ABBA block (block k holds one boot of each arm, adjacent in time), so
  drift over the session (thermal, page cache) cancels within a pair;
- the effect is the paired log ratio d_k = ln(arm_k / baseline_k); its mean gets a Student t
  interval on (pairs - 1) degrees of freedom, reported back as a percentage. With equal rounds
  per boot, boot means are independent with variance sigma_boot^2 + sigma_round^2 / R, so the
  t interval is exact under normality; calibration by simulation (tests/test_compare_calibration.py)
  checks the error rates it states.

No verdict where the design cannot support one: one pair has no variance estimate, so it
reports "not enough boots" and how many more pairs would be needed. The noise reported beside
the delta estimates (not maximises) the boot-level and round-level standard deviations, so more
boots shrink the uncertainty instead of raising a floor.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
MIN_PAIRS = 2  # below this there is no variance estimate: no interval, no verdict
DEFAULT_TARGET_PCT = 1.0  # the effect size the planning line resolves by default
# `--target` is Stein's two-stage procedure (Stein 1945): a first stage of at least this many pairs
# estimates the sd of a pair's difference; that estimate alone fixes how many pairs to run, and the
# final interval uses it with its own degrees of freedom. Adding pairs until the half-width first
# dips below the target instead favours draws whose sd came out small: simulated at boot sd 1%, it
# covered 91.5% from 2 pairs and 94.2% from 4, with 5.8% false verdicts; Stein's holds 95%.
MIN_PAIRS_FOR_TARGET = 4


def stein_pairs(sd_first: float, first: int, target_pct: float, confidence: float = CONFIDENCE) -> int:
    """Pairs whose Stein interval (first-stage sd and df) has a half-width at most the target."""
    return max(first, math.ceil((t_quantile(first - 1, confidence) * sd_first / log_ratio(target_pct)) ** 2))


def target_met(widest_half_width_pct: float | None, target_pct: float) -> bool:
    return widest_half_width_pct is not None and widest_half_width_pct <= target_pct


@lru_cache(maxsize=256)
def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    return float(scipy_stats.t.ppf(0.5 + confidence / 2, df))


def pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio)


def log_ratio(target_pct: float) -> float:
    return math.log1p(target_pct / 100.0)


def pairs_needed(sd_diff: float, target_pct: float, confidence: float = CONFIDENCE, limit: int = 1000) -> int | None:
    """Smallest number of boot pairs whose interval half-width (in log ratio) is at most the
    target effect, given the sd of one pair's difference; None when more than `limit`."""
    target = log_ratio(target_pct)
    if sd_diff <= 0:
        return MIN_PAIRS
    for n in range(MIN_PAIRS, limit + 1):
        if t_quantile(n - 1, confidence) * sd_diff / math.sqrt(n) <= target:
            return n
    return None


@dataclass
class NoiseComponents:
    """Standard deviations in percent (of the log figure), estimated from every usable boot."""

    boot_sd_pct: float | None  # between boots of one arm, round noise removed
    round_sd_pct: float | None  # between rounds inside one boot
    rounds_per_boot: float | None


def noise_components(boots: dict[str, list[list[float]]]) -> NoiseComponents:
    """One-way random-effects estimate per arm, pooled across arms: round variance from the
    within-boot spread, boot variance from the spread of boot means minus round variance / R."""
    within_ss = within_df = 0.0
    between_ss = between_df = 0.0
    sizes = []
    for arm_boots in boots.values():
        logs = [np.log(np.asarray(rounds, dtype=float)) for rounds in arm_boots if rounds]
        for values in logs:
            sizes.append(len(values))
            if len(values) > 1:
                within_ss += float(((values - values.mean()) ** 2).sum())
                within_df += len(values) - 1
        means = np.asarray([values.mean() for values in logs])
        if len(means) > 1:
            between_ss += float(((means - means.mean()) ** 2).sum())
            between_df += len(means) - 1
    round_var = within_ss / within_df if within_df else None
    rounds = float(np.mean(sizes)) if sizes else None
    boot_var = None
    if between_df:
        boot_var = max(0.0, between_ss / between_df - (round_var or 0.0) / (rounds or 1.0))
    return NoiseComponents(
        boot_sd_pct=None if boot_var is None else 100 * math.sqrt(boot_var),
        round_sd_pct=None if round_var is None else 100 * math.sqrt(round_var),
        rounds_per_boot=rounds,
    )


@dataclass
class Comparison:
    """One figure, baseline arm vs one other arm."""

    figure: str
    higher_is_better: bool
    pairs: int  # complete boot pairs (both arms have usable rounds in the block)
    baseline_mean: float | None  # mean of the baseline's boot means (all its usable boots)
    arm_mean: float | None
    delta_pct: float | None  # geometric mean of the paired ratios, as a percentage
    ci_pct: tuple[float, float] | None  # CONFIDENCE interval of delta_pct
    half_width_pct: float | None  # half the interval's width, in percent (log scale, symmetric)
    pair_deltas_pct: list[float]  # each pair's own delta, in block order
    noise: NoiseComponents
    pair_sd_pct: float | None  # sd of one pair's difference (what planning uses)
    pairs_for_target: int | None  # boot pairs that would resolve the target effect
    target_pct: float
    verdict: str  # "better"/"worse" said in the figure's words, or why there is none
    method: str

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ci_pct"] = list(self.ci_pct) if self.ci_pct else None
        return data


def _words(higher_is_better: bool, positive: bool) -> str:
    if higher_is_better:
        return "faster" if positive else "slower"
    return "higher (worse)" if positive else "lower (better)"


def compare_boots(baseline: dict[int, list[float]], arm: dict[int, list[float]], figure: str = "figure",
                  higher_is_better: bool = True, target_pct: float = DEFAULT_TARGET_PCT,
                  confidence: float = CONFIDENCE, first_stage: int | None = None) -> Comparison:
    """`baseline[block]` / `arm[block]`: the usable round figures of that arm's boot in that ABBA
    block (a voided boot or one without usable rounds is absent or empty). `first_stage`: the
    comparison ran under `--target` (Stein's procedure): the sd comes from the pairs of the first
    `first_stage` blocks only, with their degrees of freedom, and the mean from every pair."""
    baseline = {b: [v for v in values if v and v > 0] for b, values in baseline.items()}
    arm = {b: [v for v in values if v and v > 0] for b, values in arm.items()}
    blocks = sorted(b for b in set(baseline) & set(arm) if baseline[b] and arm[b])
    diffs = np.asarray([math.log(np.mean(arm[b]) / np.mean(baseline[b])) for b in blocks])
    noise = noise_components({"baseline": [v for v in baseline.values() if v], "arm": [v for v in arm.values() if v]})
    base_means = [float(np.mean(v)) for v in baseline.values() if v]
    arm_means = [float(np.mean(v)) for v in arm.values() if v]
    method = (f"paired t interval on ln(arm/baseline) of ABBA boot-pair means, {len(blocks)} pair(s), "
              f"{len(blocks) - 1} df, {100 * confidence:.0f}%")
    common: dict[str, Any] = dict(
        figure=figure, higher_is_better=higher_is_better, pairs=len(blocks),
        baseline_mean=float(np.mean(base_means)) if base_means else None,
        arm_mean=float(np.mean(arm_means)) if arm_means else None,
        pair_deltas_pct=[pct(d) for d in diffs], noise=noise, target_pct=target_pct, method=method,
    )
    if len(blocks) == 0:
        return Comparison(**common, delta_pct=None, ci_pct=None, half_width_pct=None, pair_sd_pct=None,
                          pairs_for_target=None, verdict="no data: no boot pair with usable rounds in both arms")
    mean = float(diffs.mean())
    if len(blocks) < MIN_PAIRS:
        # Planning from the components when both are known: a pair's difference has variance
        # 2 (boot var + round var / R). One boot per arm says nothing of the boot variance: unknown.
        needed = None
        if noise.round_sd_pct is not None and noise.boot_sd_pct is not None:
            sd = math.sqrt(2 * ((noise.boot_sd_pct / 100) ** 2 + (noise.round_sd_pct / 100) ** 2 / (noise.rounds_per_boot or 1)))
            needed = pairs_needed(sd, target_pct, confidence)
        return Comparison(**common, delta_pct=pct(mean), ci_pct=None, half_width_pct=None, pair_sd_pct=None,
                          pairs_for_target=needed,
                          verdict=f"not enough boots: {MIN_PAIRS - len(blocks)} more pair(s) needed for an interval")
    sd = float(diffs.std(ddof=1))
    df = len(blocks) - 1
    first = [d for block, d in zip(blocks, diffs) if block < first_stage] if first_stage else []
    if first_stage and len(first) >= MIN_PAIRS:
        sd, df = float(np.std(first, ddof=1)), len(first) - 1
        common["method"] = (f"Stein two-stage: t interval on ln(arm/baseline) of ABBA boot-pair means, {len(blocks)} pair(s), "
                            f"sd from the {len(first)} first-stage pair(s), {df} df, {100 * confidence:.0f}%")
    half = t_quantile(df, confidence) * sd / math.sqrt(len(blocks))
    low, high = mean - half, mean + half
    if low > 0 or high < 0:
        verdict = _words(higher_is_better, mean > 0)
    else:
        verdict = f"no difference resolved (the interval spans 0; +-{100 * half:.2f}%)"
    planned = stein_pairs(sd, df + 1, target_pct, confidence) if first_stage else pairs_needed(sd, target_pct, confidence)
    return Comparison(**common, delta_pct=pct(mean), ci_pct=(pct(low), pct(high)), half_width_pct=100 * half,
                      pair_sd_pct=100 * sd, pairs_for_target=planned, verdict=verdict)
