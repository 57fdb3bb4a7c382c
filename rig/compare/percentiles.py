"""Latency percentiles of a boot: requests pooled over the boot's usable rounds, a count behind
every percentile, and a refusal where the count cannot support one.

Why pool: a per-round "p99" of prose-c1 (about 11 requests in a 60 s round) is the round's
largest request, whose median sits near the 94th percentile; averaging three of them does not
make a p99. Pooling the boot's rounds first gives one sample per boot (the boot stays the unit of
replication) from which the tail is read once.

The rule (`min_count`): a boot's q-percentile is reported only when its pooled count n gives a
distribution-free CONFIDENCE interval for the q-quantile from the sample's own order statistics,
i.e. when P(X(1) < x_q < X(n)) = 1 - q^n - (1 - q)^n >= CONFIDENCE. With fewer samples even the
largest one is not above the p99 with 95% confidence: the sample cannot tell the p99 from a lower
percentile. p99 needs 299 samples, p50 needs 6.

The estimate (`LatencyHistogram.quantile`) is Hyndman & Fan's type 8, which is median-unbiased
for any continuous distribution: the order statistic it interpolates lies below the true quantile
half the time. Medians survive the log the comparison takes, and a change of scale moves every
boot's estimate by exactly that factor, so a paired log ratio of these estimates is unbiased for
a scale change whatever the estimator's own bias in milliseconds. tests/compare/test_compare_percentiles.py
measures both by simulation.

Samples are kept as a log-binned histogram (bins 0.1% wide) so that rounds merge exactly and a
run of millions of inter-token gaps stays small on disk; a bin's representative is its geometric
centre, within 0.05% of every sample in it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from pydantic import Field

from rig.typed import Typed

CONFIDENCE = 0.95
BIN_RATIO = 1.001
_LOG_BIN = math.log(BIN_RATIO)
# A boot's percentile is a bin's geometric centre, or lies between two: within half a bin (in ln) of
# its samples' own type-8 quantile. A difference of two arms' mean ln-percentiles is therefore within
# one bin of the samples' own, and the pairs' sd within one bin * sqrt(n / (n - 1)) of theirs: the
# comparison widens its interval by both (rig.compare.stats.compare_boots). Without it, boots whose
# percentiles fall in the same bins (H200 TPOT p50 at c=1: boot sd 0.07%, bins of 0.1%) give identical
# pair differences and an interval of zero width. The price: 2 pairs cannot
# resolve a percentile change much under 1.4% (95%), 4 pairs under 0.3%.
DIFFERENCE_RESOLUTION = _LOG_BIN


def min_count(quantile: float, confidence: float = CONFIDENCE) -> int:
    """Fewest samples whose extreme order statistics bracket the quantile with this confidence."""
    n = 1
    while 1 - quantile**n - (1 - quantile) ** n < confidence:
        n += 1
    return n


def percentile_label(quantile: float) -> str:
    return f"p{100 * quantile:g}"


class LatencyHistogram(Typed):
    """Counts of samples (milliseconds) in log bins: bin i holds [BIN_RATIO^i, BIN_RATIO^(i+1)).
    Samples at or below zero (two chunks read at the same instant) are counted in `zeros`."""

    bins: list[int] = Field(default_factory=list)  # bin indices, ascending
    counts: list[int] = Field(default_factory=list)
    zeros: int = 0

    @classmethod
    def of(cls, values: Iterable[float]) -> LatencyHistogram:
        array = np.asarray(list(values), dtype=float)
        positive = array[array > 0]
        indices, counts = np.unique(np.floor(np.log(positive) / _LOG_BIN).astype(np.int64), return_counts=True)
        return cls(bins=indices.tolist(), counts=counts.tolist(), zeros=int(len(array) - len(positive)))

    @classmethod
    def merged(cls, histograms: Iterable[LatencyHistogram]) -> LatencyHistogram:
        total: dict[int, int] = {}
        zeros = 0
        for histogram in histograms:
            zeros += histogram.zeros
            for index, count in zip(histogram.bins, histogram.counts):
                total[index] = total.get(index, 0) + count
        ordered = sorted(total)
        return cls(bins=ordered, counts=[total[i] for i in ordered], zeros=zeros)

    @property
    def count(self) -> int:
        return self.zeros + sum(self.counts)

    def _value_at(self, rank: int, cumulative: np.ndarray) -> float:
        """The rank-th smallest sample (1-based), as its bin's geometric centre."""
        if rank <= self.zeros:
            return 0.0
        position = int(np.searchsorted(cumulative, rank - self.zeros))
        return math.exp((self.bins[position] + 0.5) * _LOG_BIN)

    def quantile(self, q: float) -> float | None:
        """Hyndman & Fan type 8 (numpy's method='median_unbiased'); None when empty."""
        n = self.count
        if n == 0:
            return None
        cumulative = np.cumsum(self.counts)
        h = min(max((n + 1 / 3) * q + 1 / 3, 1.0), float(n))
        low = math.floor(h)
        value = self._value_at(low, cumulative)
        if h > low:
            value += (h - low) * (self._value_at(low + 1, cumulative) - value)
        return value


class PooledPercentile(Typed):
    """One boot's percentile of a latency, from its usable rounds pooled."""

    quantile: float
    count: int  # samples behind it
    needed: int  # min_count(quantile)
    value: float | None  # None when refused (count < needed) or no samples

    @property
    def refused(self) -> bool:
        return self.value is None


def pooled_percentile(rounds: Iterable[LatencyHistogram], quantile: float) -> PooledPercentile:
    pooled = LatencyHistogram.merged(rounds)
    needed = min_count(quantile)
    value = pooled.quantile(quantile) if pooled.count >= needed else None
    return PooledPercentile(quantile=quantile, count=pooled.count, needed=needed, value=value)
