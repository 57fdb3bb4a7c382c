"""Calibration of every verdict a comparison report prints, by simulation from per-request records
(tests/simulated_runs.py: records -> summarize -> run_result -> BootEntry -> analyze, the path
`rig compare` takes) at the default design: 4 ABBA pairs, 3 rounds per boot, prose-c1 at c=1.

With nothing changed, a report prints the headline verdict (95% of its own) and the secondary
family (latency percentiles, goodput), whose Bonferroni-simultaneous intervals must print any
verdict at most 5% of the time. The same simulated runs judged naively (each round's own
percentiles averaged per boot, every figure at 95%) show what the family fixes.

Monte-Carlo error: 1000 comparisons put the standard error of a 5% rate at 0.69 points; the
assertions allow 2.5 of them, as tests/compare/test_compare_calibration.py does. A family that never
decides would pass trivially, so a real change (TTFT +30%) must still be found. For a sharper
table: RIG_CALIBRATION_SIMULATIONS=4000 pytest -s tests/compare/test_compare_report_calibration.py.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from simulated_runs import SCENARIO, Design, simulate_comparison

from rig.compare.design import DEFAULT_BOOTS, DEFAULT_ROUNDS
from rig.compare.report import analyze
from rig.compare.stats import CONFIDENCE, compare_boots
from rig.load.figures import LATENCY
from rig.load.summary import Metrics

pytestmark = pytest.mark.slow  # thousands of simulated comparisons: make test, not make test-fast

SIMULATIONS = int(os.environ.get("RIG_CALIBRATION_SIMULATIONS", "1000"))
POWER_SIMULATIONS = 100
ALPHA = 0.05
MC_SLACK = 2.5 * math.sqrt(ALPHA * (1 - ALPHA) / SIMULATIONS)


def per_round_verdicts(kept: list[tuple[str, int, Metrics]]) -> dict[str, bool]:
    """The old report: each round's own percentile, averaged over the boot's rounds, at 95% each."""
    verdicts = {}
    for figure in LATENCY:
        boots: dict[str, dict[int, list[float]]] = {}
        for arm, block, metrics in kept:
            value = getattr(getattr(metrics, f"{figure.samples}_s"), f"p{round(100 * figure.quantile)}")
            if value is not None:
                boots.setdefault(arm, {}).setdefault(block, []).append(1000 * value)
        verdicts[figure.name] = compare_boots(boots.get("a", {}), boots.get("b", {}), figure.name, False).decided
    return verdicts


def run(design: Design, simulations: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    tally = {"headline": 0, "secondary": 0, "any": 0, "old": 0, "family_size": set(), "confidence": set(), "counts": []}
    per_figure = dict.fromkeys([f.name for f in LATENCY] + ["goodput"], 0)
    for _ in range(simulations):
        kept: list = []
        plan, entries = simulate_comparison(rng, design, keep_summaries=kept)
        analysis = analyze(plan, entries)
        result = analysis.scenarios[SCENARIO]
        secondary = {name: per_arm["b"].decided for name, per_arm in result.latency.items()}
        secondary["goodput"] = result.goodput["b"].decided
        headline = result.vs["b"].decided
        tally["headline"] += headline
        tally["secondary"] += any(secondary.values())
        tally["any"] += headline or any(secondary.values())
        tally["old"] += any(per_round_verdicts(kept).values())
        tally["family_size"].add(analysis.family.size)
        tally["confidence"].add(round(analysis.family.confidence, 6))
        tally["counts"] += [c.support.count_range() for c in (result.latency["ttft_p99_ms"]["b"],)]
        for name, decided in secondary.items():
            per_figure[name] += decided
    tally["per_figure"] = per_figure
    return tally


def test_nothing_changed_any_secondary_verdict_at_most_5_percent():
    design = Design(pairs=DEFAULT_BOOTS, rounds=DEFAULT_ROUNDS)
    null = run(design, SIMULATIONS, seed=17)
    rate = {key: null[key] / SIMULATIONS for key in ("headline", "secondary", "any", "old")}
    counts = null["counts"]
    lines = [
        f"report calibration: {SIMULATIONS} simulated comparisons from per-request records ({SCENARIO} at c=1, ~11 "
        f"requests per 60 s round), {design.pairs} pairs, {design.rounds} rounds, boot sd {100 * design.boot_sd:.0f}%, "
        f"round sd {100 * design.round_sd:.0f}%, block drift {100 * design.drift_sd:.0f}%",
        f"secondary family: {sorted(null['family_size'])} interval(s) each at {sorted(100 * c for c in null['confidence'])}% "
        f"(ttft p99 refused: {min(c[0] for c in counts)}-{max(c[1] for c in counts)} requests per boot < 299)",
        f"{'with nothing changed':44} any verdict",
        f"{'headline (95%)':44} {100 * rate['headline']:5.1f}%",
        f"{'secondary family (Bonferroni)':44} {100 * rate['secondary']:5.1f}%   "
        + ", ".join(f"{name} {100 * n / SIMULATIONS:.1f}%" for name, n in null["per_figure"].items()),
        f"{'any verdict in the report':44} {100 * rate['any']:5.1f}%",
        f"{'before: per-round percentiles, 95% each':44} {100 * rate['old']:5.1f}%",
    ]
    print("\n" + "\n".join(lines))
    assert rate["secondary"] <= ALPHA + MC_SLACK, rate
    assert rate["headline"] <= 1 - CONFIDENCE + MC_SLACK, rate
    assert rate["old"] > ALPHA + 2 * MC_SLACK, rate  # the simulation does catch the defect the family fixes


def test_the_secondary_family_still_finds_a_real_change():
    """The same design with TTFT +30% and the decode step +5% (its own test, so the two simulations
    run on two workers side by side)."""
    power = run(Design(pairs=DEFAULT_BOOTS, rounds=DEFAULT_ROUNDS, ttft_change=math.log(1.3), step_change=math.log(1.05)),
                POWER_SIMULATIONS, seed=18)
    print(f"\npower ({POWER_SIMULATIONS} comparisons, TTFT +30%, decode step +5%): headline "
          f"{100 * power['headline'] / POWER_SIMULATIONS:.0f}%, "
          + ", ".join(f"{name} {100 * n / POWER_SIMULATIONS:.0f}%" for name, n in power["per_figure"].items()))
    assert power["per_figure"]["ttft_p50_ms"] / POWER_SIMULATIONS > 0.35, power  # ~58% expected
