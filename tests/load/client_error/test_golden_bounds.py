"""Every client bound (total and parts) of the committed evidence runs and of one run of each
simulation family stays what golden_bounds.json holds (to 1e-12 of the value): a change of how the
model is written changes no bound. golden_bounds.py says how the numbers were made."""

from __future__ import annotations

import json
import math
from typing import Any

import golden_bounds as golden
import pytest

STORED = json.loads(golden.GOLDEN.read_text())


def differences(stored: Any, computed: Any, where: str = "") -> list[str]:
    if isinstance(stored, dict) and isinstance(computed, dict):
        if set(stored) != set(computed):
            return [f"{where}: keys {sorted(set(stored) ^ set(computed))}"]
        return [line for key in stored for line in differences(stored[key], computed[key], f"{where}/{key}")]
    if stored is None or computed is None:
        return [] if stored is computed else [f"{where}: {stored} != {computed}"]
    same = stored == computed or math.isclose(stored, computed, rel_tol=golden.RELATIVE, abs_tol=0.0)
    return [] if same else [f"{where}: {stored!r} != {computed!r}"]


@pytest.fixture(scope="module")
def simulated() -> dict[str, Any]:
    return {f"simulated: {name}": golden.parts(source) for name, source in golden.simulated_runs()}


def test_every_simulation_familys_bounds_are_the_golden_ones(simulated):
    stored = {key: value for key, value in STORED.items() if key.startswith("simulated: ")}
    assert set(simulated) == set(stored)
    assert not differences(stored, simulated)


@pytest.mark.parametrize("archive", [pytest.param(a, marks=pytest.mark.slow) if a in golden.LARGE_RUNS else a
                                     for a in golden.EVIDENCE_RUNS])
def test_every_evidence_runs_bounds_are_the_golden_ones(archive, tmp_path):
    computed = golden.parts(golden.evidence_run(archive, tmp_path))
    assert not differences(STORED[f"validation/{archive}"], computed)
