"""Bounds of the figures computed from per-request samples (docs/client-error.md): rates over summed
durations (R4) and percentiles (R5). A sample is the difference of two recorded times, each late by
a short delay (R1), a long stretch that reached it (R2) and its wait in its loop pass (R3)."""

from __future__ import annotations

import bisect
import math

import numpy as np
from scipy.stats import binom

from rig.load.client_error.delays import DelayLevel, LagProfile
from rig.load.client_error.terms import NO_BOUND, UNBOUNDED, Bound, Term

SAMPLE_EVENTS = 2  # a sample is the difference of two recorded times: either may be late
LATE_SAMPLES_QUANTILE = 0.999  # the binomial quantile of the samples a short stretch beyond L reached
SPREAD_Z = 3.09  # the normal 99.9th percentile: a sum of many independent delays stays within Z sd of its mean


def duration_sum_bound(spans: list[tuple[float, float, float]], profile: LagProfile) -> Bound:
    """R4: a rate over N durations (tokens / their sum), each span (first time, second time, the
    larger loop-pass wait of its two reads). The sum moves by at most
    moved_s = N*mu + Z*sigma*sqrt(2N) + largest short delay + the long stretches that reached either
    end (R2) + each span's wait (R3); the rate by moved_s / (sum_s - moved_s) of the reported rate."""
    total_s = sum(b - a for a, b, _ in spans)
    if not spans or total_s <= 0 or not profile.samples_s:
        return NO_BOUND
    short = profile.short()
    n = len(spans)
    terms = (Term("R4", "bias_s", n * short.mean_s),
             Term("R4", "spread_s", SPREAD_Z * short.sd_s * math.sqrt(SAMPLE_EVENTS * n)),
             Term("R4", "largest_short_s", short.largest_s),
             Term("R2", "long_stretches_s", sum(_lates_at_both_ends(spans, profile))),
             Term("R3", "loop_pass_waits_s", sum(wait for _, _, wait in spans)))
    moved_s = sum(term.value for term in terms)
    return Bound(moved_s / (total_s - moved_s) if moved_s < total_s else UNBOUNDED, (*terms, Term("R4", "durations_s", total_s)))


def _lates_at_both_ends(spans: list[tuple[float, float, float]], profile: LagProfile) -> list[float]:
    """R2 for each span: the late of its first time plus the late of its second."""
    if not profile.stretches:
        return [0.0] * len(spans)
    first, second, _ = np.array(spans).T
    return (profile.lates_s(first) + profile.lates_s(second)).tolist()


def sample_lates_s(times: list[tuple[float, float]], profile: LagProfile) -> list[float]:
    """R5: how late a long stretch may have made each sample (the later of its two times), sorted;
    the same at every level L, so it is read once per figure."""
    if not profile.stretches or not times:
        return []
    first, second = np.array(times).T
    return np.sort(np.maximum(profile.lates_s(first), profile.lates_s(second))).tolist()


def late_sample_count(n: int, lates_s: list[float], level: DelayLevel) -> int:
    """R5: how many of n samples may be later than L: the short stretches' share beyond L at its
    binomial 99.9th percentile (a sample is two times), plus every sample a long stretch later than L
    reached (`lates_s`: sample_lates_s)."""
    share = min(1.0, SAMPLE_EVENTS * level.beyond_share)
    short = int(binom.ppf(LATE_SAMPLES_QUANTILE, n, share)) if share > 0 else 0
    reached = len(lates_s) - bisect.bisect_right(lates_s, level.level_s)
    return min(n, short + reached)


def quantile_bound(samples: np.ndarray, lates_s: list[float], waits_s: np.ndarray, quantile: float,
                   per_sample: float, profile: LagProfile, value: float) -> Bound:
    """R5: a p-quantile of samples each moved by at most e = per_sample * (L + its loop-pass wait),
    save a share q that may move anywhere: the truth lies between the (p-q)-quantile of (sample - e)
    and the (p+q)-quantile of (sample + e). The bound is the farther of the two from the reported
    value, over the value, at the best L. per_sample is 1, or 1/tokens for TPOT. `lates_s`:
    sample_lates_s of the samples' times, sorted."""
    if not samples.size or value <= 0:
        return NO_BOUND
    mid = float(np.percentile(samples, 100 * quantile))
    best: Bound | None = None
    for level in profile.levels():
        late_share = late_sample_count(samples.size, lates_s, level) / samples.size
        if late_share > 0 and (quantile - late_share < 0 or quantile + late_share > 1):
            continue  # as many samples may be late as lie on one side of the quantile
        moved = per_sample * (level.level_s + waits_s)
        low = float(np.percentile(samples - moved, 100 * max(quantile - late_share, 0.0)))
        high = float(np.percentile(samples + moved, 100 * min(quantile + late_share, 1.0)))
        total = max(high - mid, mid - low) / value
        if best is None or total < best.total:  # type: ignore[operator]
            best = Bound(total, (Term("R1", "level_s", level.level_s), Term("R5", "late_share", late_share),
                                 Term("R5", "below", (mid - low) / value), Term("R5", "above", (high - mid) / value)))
    return best or Bound(UNBOUNDED)  # the top level (no sample late beyond it) is a candidate whenever nothing outlasts it
