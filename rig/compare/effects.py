"""Known effects: a test instrument's own measurement of what it adds per token (token_delay's
host sleep, gpu_delay's in-place step-period difference: its registry row's `effect`), held against
the per-token interval a comparison found. That a comparison recovers an effect it was told the
size of, on the engine it ran, is the check behind its other verdicts."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as scipy_stats

from rig.compare.model import BootEntry, ComparePlan
from rig.compare.stats import Comparison
from rig.typed import Typed

# A host sleep in each step (token_delay) changes the time per token by what it took, give or take the
# server's response to a longer step, measured on transformers serve: its other threads stream during
# the sleep (a 4 ms sleep measured at 4.12 ms moved the time per token +3.88 ms [3.86, 3.90] on a busy
# 2-core box: -6%), and a longer sleep's wake-up costs a little more (20 ms: +0.5-1.5 ms).
# Above the sleep it reaches further on a loaded CPU: a sleeping server wakes late when other work holds
# the cores, and the wake-up adds to every step (a 3 ms sleep measured at 3.11 ms moved the time per token
# +3.94 ms [3.49, 4.38] on a 2-core box with one core busy-looping: +27%). Its known effect is the sleep
# from this share below to WAKE_UP_ON_A_LOADED_CPU above: not a bound either way. Measured on transformers serve
# only: under vLLM's asynchronous scheduling a host sleep can be hidden altogether (0.165 ms a step changed
# nothing on an H200), and the check then says the interval does NOT agree, as it should (gpu_delay's
# in-place measure is vLLM's known effect).
RESPONSE_OF_THE_SERVER = 0.10
WAKE_UP_ON_A_LOADED_CPU = 0.50
EFFECT_KINDS = ("exact", "at least", "about")  # a registry row's effect kind (tests hold every row to them)


class KnownEffect(Typed):
    """A test instrument's own measurement of what it adds per token (its registry row's `effect`),
    held against the per-token interval the comparison found: the check that rig recovers a known
    effect on this engine. The instrument's figure is itself measured, so it has an interval too (a
    t interval over the boots' own figures); the two agree when their intervals overlap."""

    scenario: str
    arm: str
    adapter: str
    statistic: str
    per_token_ms: float  # the arm's boots' mean minus the baseline's (0 where the baseline has none)
    boots: int  # measured boots of the arm whose manifest holds the statistic
    effect_interval_ms: tuple[float, float] | None  # 95% over the boots' own figures (None: one boot, or no spread)
    interval_ms: tuple[float, float] | None  # the comparison's per-token interval
    covered: bool | None  # the intervals overlap (the point itself, without a spread); None without a per-token interval
    at_least: bool = False  # the statistic is a lower bound of what the instrument adds: covered = reaches it
    tolerance: float = 0.0  # the instrument's effect is its statistic down to this share below it (RESPONSE_OF_THE_SERVER)
    tolerance_above: float = 0.0  # ... and up to this share above it (WAKE_UP_ON_A_LOADED_CPU)


def _effect_ms(entries: list[BootEntry], arm: str, adapter: str, statistic: str, factor: float) -> list[float]:
    values = []
    for entry in entries:
        if not entry.measured:
            continue
        stats = entry.adapter_stats.get(adapter)
        value = stats.get(statistic) if isinstance(stats, dict) else None
        if entry.arm == arm and isinstance(value, dict) and isinstance(value.get("mean"), (int, float)):
            values.append(factor * float(value["mean"]))
    return values


def _mean_interval(values: list[float], baseline: list[float]) -> tuple[float, float] | None:
    """95% t interval of mean(values) - mean(baseline) (Welch), from the boots' own spread."""
    groups = [g for g in (values, baseline) if g]
    if any(len(g) < 2 for g in groups):
        return None
    if all(max(g) - min(g) <= 1e-9 * max(1.0, abs(max(g))) for g in groups):
        return None  # no spread: nothing to say how exact the instrument's figure is
    variances = [float(np.var(g, ddof=1)) / len(g) for g in groups]
    se = math.sqrt(sum(variances))
    df = sum(variances) ** 2 / sum(v * v / (len(g) - 1) for v, g in zip(variances, groups))
    half = float(scipy_stats.t.ppf(0.975, df)) * se
    middle = float(np.mean(values)) - (float(np.mean(baseline)) if baseline else 0.0)
    return middle - half, middle + half


def known_effects(plan: ComparePlan, entries: list[BootEntry], per_token: dict[str, dict[str, Comparison]]) -> list[KnownEffect]:
    """`per_token`: scenario -> arm -> its per-token comparison."""
    from rig_adapters.registry import REGISTRY

    arms = [a.name for a in plan.arms]
    out = []
    for name, by_arm in per_token.items():
        for arm, comparison in by_arm.items():
            for spec in REGISTRY:
                if spec.effect is None:
                    continue
                statistic, factor, kind = spec.effect
                values = _effect_ms(entries, arm, spec.name, statistic, factor)
                if not values:
                    continue
                baseline = _effect_ms(entries, arms[0], spec.name, statistic, factor)
                effect = sum(values) / len(values) - (sum(baseline) / len(baseline) if baseline else 0.0)
                own = _mean_interval(values, baseline)
                interval = comparison.ci
                low, high = own if own else (effect, effect)
                at_least = kind == "at least"
                tolerance = RESPONSE_OF_THE_SERVER if kind == "about" else 0.0
                above = WAKE_UP_ON_A_LOADED_CPU if kind == "about" else 0.0
                low, high = low - tolerance * abs(low), high + above * abs(high)
                covered = None if interval is None else (interval[1] >= low if at_least else low <= interval[1] and interval[0] <= high)
                out.append(KnownEffect(scenario=name, arm=arm, adapter=spec.name, statistic=statistic, per_token_ms=effect,
                                       boots=len(values), effect_interval_ms=own, interval_ms=interval, covered=covered,
                                       at_least=at_least, tolerance=tolerance, tolerance_above=above))
    return out
