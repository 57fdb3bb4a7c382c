"""Calibration by simulation: the error rates and the precision a comparison design gives at a
given noise, computed through the function `rig compare` uses (compare_boots). The calibration
tests assert them at the default design; `benchmarks/design_at_real_noise.py` prints them at the
noise measured on a real engine, so a design is chosen from measured noise, not from hope.

Model: figure = mu_arm * exp(drift_block + boot + round + artifact), with a block drift shared by
the two boots of an ABBA pair, boot effects N(0, boot_sd) and round effects N(0, round_sd), `rounds`
rounds per boot. True delta = mu_arm / mu_baseline - 1. `first_boot_pct` is a boot-state artifact:
the first boot of the sequence (the one that compiles the caches; under ABBA always the baseline's)
reads that much off, as a cold boot did on an H200 (-0.8% and -1.4%). With `burn_in` that boot enters
no pair: `rig compare` keeps a boot that compiled as a burn-in and boots it again (or opens with a
burn-in boot where the engine's log cannot tell), so the first measured boot is the next one. The
boot order is the comparison's own (ComparePlan.order()).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rig.compare.arms import Arm
from rig.compare.model import BURN_IN_BLOCK, ComparePlan
from rig.compare.stats import compare_boots

_ARMS = [Arm(name="baseline", spec="baseline:X=0", env={"X": "0"}), Arm(name="arm", spec="arm:X=1", env={"X": "1"})]


@dataclass(frozen=True)
class Noise:
    boot_sd: float  # of the log figure, between boots (0.03 = 3%)
    round_sd: float  # between rounds of one boot
    drift_sd: float = 0.02  # shared by the two boots of an ABBA block
    rounds: int = 3
    first_boot_pct: float = 0.0  # the first boot of the sequence reads this much off (a cold-cache boot)


@dataclass(frozen=True)
class Outcome:
    decided: bool
    covered: bool
    interval: bool
    wrong_sign: bool
    right_sign: bool
    precision_pct: float | None


@dataclass(frozen=True)
class Cell:
    """Rates over simulated comparisons of one design at one noise and one true change."""

    verdicts: float  # share with a verdict ("faster"/"slower")
    coverage: float  # share of intervals that hold the true change
    wrong: float  # share with the wrong sign
    power: float  # share with the right sign (a true change only)
    precision_pct: float  # median interval precision (its ends lie within a factor 1 + this of the estimate)


def simulate(pairs: int, noise: Noise, true_pct: float, rng: np.random.Generator, burn_in: bool = False) -> Outcome:
    plan = ComparePlan(recipe="simulated", arms=_ARMS, control=None, boots=pairs, rounds=noise.rounds, scenarios=["simulated"],
                       small=True, burn_in_first=burn_in)
    figures: dict[str, dict[int, list[float]]] = {"baseline": {}, "arm": {}}
    effect = {"baseline": 0.0, "arm": math.log1p(true_pct / 100)}
    drift = {block: rng.normal(0, noise.drift_sd) for block in range(pairs)}
    for position, (block, arm) in enumerate(plan.order()):
        artifact = math.log1p(noise.first_boot_pct / 100) if position == 0 else 0.0
        values = 100 * np.exp(effect[arm.name] + drift.get(block, 0.0) + artifact + rng.normal(0, noise.boot_sd)
                              + rng.normal(0, noise.round_sd, noise.rounds))
        if block != BURN_IN_BLOCK:  # a burn-in boot is measured but enters no pair
            figures[arm.name][block] = list(values)
    result = compare_boots(figures["baseline"], figures["arm"])
    decided = result.verdict in ("faster", "slower")
    wrong = decided and true_pct != 0 and (result.verdict == "slower") == (true_pct > 0)
    return Outcome(decided=decided, covered=result.ci is not None and result.ci[0] <= true_pct <= result.ci[1],
                   interval=result.ci is not None, wrong_sign=wrong, right_sign=decided and not wrong and true_pct != 0,
                   precision_pct=result.precision_pct)


def cell(pairs: int, noise: Noise, true_pct: float, simulations: int, seed: int, burn_in: bool = False) -> Cell:
    rng = np.random.default_rng(seed)
    runs = [simulate(pairs, noise, true_pct, rng, burn_in) for _ in range(simulations)]
    intervals = [r for r in runs if r.interval]
    return Cell(verdicts=sum(r.decided for r in runs) / len(runs),
                coverage=sum(r.covered for r in intervals) / len(intervals) if intervals else float("nan"),
                wrong=sum(r.wrong_sign for r in runs) / len(runs),
                power=sum(r.right_sign for r in runs) / len(runs),
                precision_pct=float(np.median([r.precision_pct for r in intervals])) if intervals else float("nan"))
