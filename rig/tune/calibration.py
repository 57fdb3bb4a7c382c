"""Calibration of the race by simulation, through the rule `rig tune` runs (rig.tune.rule.look)
and its boot order (rig.tune.plan.round_order).

Model (rig.compare.calibration's): figure = mu_candidate * exp(drift_round + boot + round), with a
drift shared by every boot of a race round, boot effects N(0, boot_sd) and round effects
N(0, round_sd), `rounds` rounds per boot. A race runs as `rig tune` does: each round boots every
survivor once, a look after each round, stopping when one remains, when every survivor is within the
margin of the best, or at max_rounds or max_boots.

What is counted: whether the true best was eliminated (the rule's error, held at alpha by
construction), whether the race named it the winner alone, the boots spent, and how it stopped.
The boots are compared with a full ABBA comparison of every pair (`rig compare`'s default of 4
boot pairs per pair: 8 boots each) and with one n-arm design that runs every candidate every round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rig.compare.calibration import Noise
from rig.compare.design import DEFAULT_BOOTS
from rig.tune.plan import round_order
from rig.tune.rule import RaceRule, RoundFigures, intervals, look


@dataclass(frozen=True)
class RaceOutcome:
    best_eliminated: bool  # the true best (or, where several tie for it, every one of them) left the race
    any_eliminated: bool  # some candidate left the race (with every candidate equal: a false elimination)
    named_alone: bool  # the race ended with the true best as its only survivor
    winner_is_best: bool  # the winner is a true best
    boots: int
    stop: str


@dataclass(frozen=True)
class RaceCell:
    """Rates over simulated races of one space at one noise."""

    best_eliminated: float
    any_eliminated: float
    named_alone: float
    winner_is_best: float
    boots_mean: float
    stops: dict[str, float]


def simulate_race(true_pct: list[float], noise: Noise, rule: RaceRule, rng: np.random.Generator,
                  max_boots: int | None = None) -> RaceOutcome:
    """One race over candidates whose true figures are 100 (1 + true_pct/100) (higher is better)."""
    names = [f"c{i}" for i in range(len(true_pct))]
    effect = {name: math.log1p(pct / 100) for name, pct in zip(names, true_pct)}
    top = max(true_pct)
    best = {name for name, pct in zip(names, true_pct) if pct == top}
    figures: dict[str, RoundFigures] = {name: {} for name in names}
    survivors, boots, stop, any_out = list(names), 0, "rounds", False
    budget = max_boots or len(names) * rule.max_rounds
    for round_index in range(rule.max_rounds):
        if boots + len(survivors) > budget:
            stop = "boots"
            break
        drift = rng.normal(0, noise.drift_sd)
        for name in round_order(survivors, round_index):
            values = 100 * np.exp(effect[name] + drift + rng.normal(0, noise.boot_sd) + rng.normal(0, noise.round_sd, noise.rounds))
            figures[name][round_index] = list(values)
            boots += 1
        made = look(rule, figures, survivors, round_index)
        survivors = [name for name in survivors if name not in made.eliminated]
        any_out = any_out or bool(made.eliminated)
        if len(survivors) == 1:
            stop = "one"
            break
        if made.equivalent:
            stop = "equivalent"
            break
    winner, _ = intervals(rule, figures, survivors)
    return RaceOutcome(best_eliminated=not (best & set(survivors)), any_eliminated=any_out,
                       named_alone=survivors == [winner] and winner in best, winner_is_best=winner in best, boots=boots, stop=stop)


def race_cell(true_pct: list[float], noise: Noise, rule: RaceRule, simulations: int, seed: int,
              max_boots: int | None = None) -> RaceCell:
    rng = np.random.default_rng(seed)
    runs = [simulate_race(true_pct, noise, rule, rng, max_boots) for _ in range(simulations)]
    stops: dict[str, float] = {}
    for run in runs:
        stops[run.stop] = stops.get(run.stop, 0.0) + 1 / len(runs)
    return RaceCell(best_eliminated=sum(r.best_eliminated for r in runs) / len(runs),
                    any_eliminated=sum(r.any_eliminated for r in runs) / len(runs),
                    named_alone=sum(r.named_alone for r in runs) / len(runs),
                    winner_is_best=sum(r.winner_is_best for r in runs) / len(runs),
                    boots_mean=float(np.mean([r.boots for r in runs])), stops=stops)


def pairwise_abba_boots(candidates: int, pairs: int = DEFAULT_BOOTS) -> int:
    """Boots of a `rig compare` of every pair of candidates at its default design."""
    return candidates * (candidates - 1) // 2 * 2 * pairs
