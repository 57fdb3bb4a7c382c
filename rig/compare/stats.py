"""Statistics of a comparison: paired per-round deltas, a bootstrap confidence interval over
boots and rounds, the noise floor from same-arm repeats, and a verdict. Never a bare mean."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_SAMPLES = 10000

# The figure each kind of scenario is judged by (higher is better for all three).
METRIC_BY_KIND = {"decode": ("user_decode_tok_s", "mean"), "prefill": ("prefill_tok_s", "mean"), "concurrency": ("output_tok_s", None)}


def figure(summary: dict[str, Any]) -> float | None:
    key, stat = METRIC_BY_KIND[summary["scenario"]["kind"]]
    value = summary["metrics"][key]
    return value.get(stat) if stat else value


def bootstrap_ci(groups: list[list[float]], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> tuple[float, float]:
    """Two-stage bootstrap: resample boot pairs, then rounds within each, so the interval carries
    the boot-to-boot variance (the autotuner makes every boot a different draw), not only round noise."""
    rng = np.random.default_rng(seed)
    groups = [np.asarray(g, dtype=float) for g in groups if len(g)]
    means = np.empty(samples)
    for index in range(samples):
        picked = rng.integers(0, len(groups), len(groups))
        values = np.concatenate([rng.choice(groups[p], len(groups[p])) for p in picked])
        means[index] = values.mean()
    alpha = (1 - CONFIDENCE) / 2
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def noise_floor(boot_means: dict[str, list[float]]) -> float | None:
    """Largest relative difference (%) between boots of the same arm: what a non-change looks like."""
    spreads = [abs(b - a) / a * 100 for means in boot_means.values() for a, b in combinations(means, 2) if a]
    return max(spreads) if spreads else None


def verdict(delta: float, ci: tuple[float, float], floor: float | None) -> str:
    excludes_zero = ci[0] > 0 or ci[1] < 0
    above_floor = floor is None or abs(delta) > floor
    if excludes_zero and above_floor:
        return "faster" if delta > 0 else "slower"
    return "within noise"


def compare_scenario(baseline: str, arm: str, rounds: dict[tuple[str, int], list[float]]) -> dict[str, Any]:
    """rounds[(arm, block)] = per-round figures of that arm's boot in that block (voided boots absent)."""
    blocks = sorted({block for (name, block) in rounds if name == arm} & {block for (name, block) in rounds if name == baseline})
    groups = []
    for block in blocks:
        base, other = rounds[(baseline, block)], rounds[(arm, block)]
        groups.append([(o - b) / b * 100 for b, o in zip(base, other) if b])
    boot_means = {}
    for name in (baseline, arm):
        boot_means[name] = [float(np.mean(v)) for (n, _), v in sorted(rounds.items()) if n == name and v]
    floor = noise_floor(boot_means)
    pooled = [d for g in groups for d in g]
    if not pooled:
        return {"pairs": 0, "verdict": "no data", "noise_floor_pct": floor}
    delta = float(np.mean(pooled))
    if len(pooled) < 2:
        return {"pairs": 1, "boot_pairs": len(groups), "delta_pct": delta, "ci_pct": None, "noise_floor_pct": floor,
                "baseline_mean": float(np.mean(rounds[(baseline, blocks[0])])), "arm_mean": float(np.mean(rounds[(arm, blocks[0])])),
                "verdict": "one paired round: no interval, no verdict (run more rounds or boots)"}
    ci = bootstrap_ci(groups)
    return {
        "baseline_mean": float(np.mean([v for (n, _), vs in rounds.items() if n == baseline for v in vs])),
        "arm_mean": float(np.mean([v for (n, _), vs in rounds.items() if n == arm for v in vs])),
        "delta_pct": delta, "ci_pct": list(ci), "confidence": CONFIDENCE,
        "method": f"two-stage bootstrap over {len(groups)} boot pair(s) x rounds, {BOOTSTRAP_SAMPLES} resamples",
        "pairs": len(pooled), "boot_pairs": len(groups), "noise_floor_pct": floor,
        "verdict": verdict(delta, ci, floor),
    }
