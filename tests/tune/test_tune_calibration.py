"""The race's error rates and savings by simulation at the boot noise measured on real engines
(docs/validation.md: vllm-c1-noise, vllm-loaded-noise), through the rule `rig tune` runs."""

from __future__ import annotations

import pytest

from rig.compare.calibration import Noise
from rig.tune.calibration import pairwise_abba_boots, race_cell
from rig.tune.rule import RaceRule

pytestmark = pytest.mark.slow

C1 = Noise(boot_sd=0.00065, round_sd=0.00018, drift_sd=0.001, rounds=2)  # vllm-c1-noise, its noisiest host
RULE = RaceRule(candidates=8, max_rounds=6)


def test_with_every_candidate_equal_at_most_five_percent_of_races_eliminate_any():
    cell = race_cell([0.0] * 8, C1, RULE, simulations=300, seed=11)
    assert cell.any_eliminated <= 0.05 and cell.best_eliminated <= 0.05


@pytest.mark.parametrize("gap_pct", [0.5, 1.0])
def test_a_known_gap_is_recovered_in_fewer_boots_than_abba_of_every_pair(gap_pct):
    cell = race_cell([0.0] + [-gap_pct] * 7, C1, RULE, simulations=200, seed=12)
    assert cell.best_eliminated <= 0.05
    assert cell.named_alone >= 0.8, cell
    assert cell.boots_mean < pairwise_abba_boots(8) / 4
