"""race.json: what a race runs, fixed before its first boot and read back by `--resume`; and the
order each round boots its survivors in."""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import Field, model_validator

from rig.atomic import write_text_atomic
from rig.compare.design import MAX_ARMS, MAX_PAIRS
from rig.compare.model import ComparePlan
from rig.load.bounds import MAX_DURATION_S, MAX_WORKERS
from rig.load.goodput import SLO_KEYS
from rig.tune.rule import RaceRule
from rig.tune.space import Candidate, Constraints
from rig.typed import Versioned

RACE_SCHEMA = 1
RACE_FILE = "race.json"
RACE_MAX_BYTES = 1 << 20


class RacePlan(Versioned):
    """The race: its candidates (the baseline first), objective, constraints and budget."""

    schema_version: int = Field(RACE_SCHEMA, alias="schema")
    recipe: str
    scenario: str
    space: str  # the space file it was built from (for the report; the candidates below are what runs)
    candidates: list[Candidate]
    baseline_given: bool  # --baseline named the first candidate (the user's configuration of today)
    constraints: Constraints
    objective: str  # the scenario's headline figure, or goodput_req_s under `slos`
    slos: dict[str, float] | None = None  # goodput SLOs in seconds (rig.tune.goodput): the objective when given
    higher_is_better: bool
    max_rounds: int
    max_boots: int  # measured boots of the whole race (burn-ins not counted)
    max_minutes: float | None = None  # the boots' own wall time, summed over every step of the race
    margin_pct: float
    alpha: float
    rounds: int  # measured rounds per boot (rig compare's --rounds)
    small: bool
    duration_s: float | None = None
    workers: int | None = None
    boot_state_control: bool = True
    burn_in_first: bool = False  # the engine's log cannot say a boot compiled: a burn-in boot opens the race
    created: float = Field(default_factory=time.time)

    @model_validator(mode="after")
    def _bounded(self) -> RacePlan:
        """A plan read back is input: it may not ask for a billion boots or NaN margins."""
        names = [c.name for c in self.candidates]
        if not 2 <= len(names) <= MAX_ARMS or len(set(names)) != len(names):
            raise ValueError(f"a race has 2 to {MAX_ARMS} candidates with distinct names")
        if not 3 <= self.max_rounds <= MAX_PAIRS:
            raise ValueError(f"max_rounds {self.max_rounds} is outside 3..{MAX_PAIRS}")
        if not 2 <= self.max_boots <= MAX_ARMS * MAX_PAIRS:
            raise ValueError(f"max_boots {self.max_boots} is outside 2..{MAX_ARMS * MAX_PAIRS}")
        if not 0 < self.margin_pct <= 100 or not 0 < self.alpha < 1:
            raise ValueError("the margin is a percentage in (0, 100] and alpha a rate in (0, 1)")
        if not 1 <= self.rounds <= MAX_PAIRS:
            raise ValueError(f"rounds {self.rounds} is outside 1..{MAX_PAIRS}")
        if self.duration_s is not None and not 0 < self.duration_s <= MAX_DURATION_S:
            raise ValueError(f"duration {self.duration_s} s is not in (0, {MAX_DURATION_S:g}]")
        if self.workers is not None and not 1 <= self.workers <= MAX_WORKERS:
            raise ValueError(f"workers {self.workers} is outside 1..{MAX_WORKERS}")
        if self.slos is not None and (not self.slos or any(key not in SLO_KEYS or not 0 < limit <= MAX_DURATION_S
                                                           for key, limit in self.slos.items())):
            raise ValueError(f"slos {self.slos} are not limits in (0, {MAX_DURATION_S:g}] s of {', '.join(SLO_KEYS)}")
        if self.max_minutes is not None and not 0 < self.max_minutes <= 7 * 24 * 60:
            raise ValueError(f"max_minutes {self.max_minutes} is not in (0, a week]")
        return self

    @property
    def rule(self) -> RaceRule:
        return RaceRule(candidates=len(self.candidates), max_rounds=self.max_rounds, margin_pct=self.margin_pct,
                        alpha=self.alpha, higher_is_better=self.higher_is_better)

    def objective_text(self) -> str:
        if not self.slos:
            return self.objective
        return f"{self.objective}: requests/s meeting " + ", ".join(f"{k} <= {1000 * v:g} ms" for k, v in self.slos.items())

    def by_name(self) -> dict[str, Candidate]:
        return {c.name: c for c in self.candidates}

    def compare_plan(self) -> ComparePlan:
        """The comparison plan each boot runs under (rig.compare.run.run_boot): every candidate an
        arm, the first the quality reference; never written (race.json is the race's plan)."""
        return ComparePlan(recipe=self.recipe, arms=[c.arm() for c in self.candidates], control=None, boots=1,
                           rounds=self.rounds, scenarios=[self.scenario], small=self.small, workers=self.workers,
                           duration_s=self.duration_s, boot_state_control=self.boot_state_control,
                           burn_in_first=self.burn_in_first)

    def write(self, out: Path) -> None:
        write_text_atomic(out / RACE_FILE, self.json_text())

    @classmethod
    def read(cls, out: Path) -> RacePlan:
        return cls.read_file(out / RACE_FILE, RACE_MAX_BYTES)


def round_order(survivors: list[str], round_index: int) -> list[str]:
    """The boot order of one round: the survivors (in race order) rotated by one place every two
    rounds and reversed on odd rounds, so consecutive rounds mirror each other (ABBA-like: a linear
    drift falls on every candidate alike over a pair of rounds) and, over 2k rounds of k survivors,
    every candidate boots in every position (a Latin square). Round 0 opens with the first survivor:
    the baseline, whose first boot is the quality reference."""
    if not survivors:
        return []
    shift = (round_index // 2) % len(survivors)
    rotated = survivors[shift:] + survivors[:shift]
    return rotated if round_index % 2 == 0 else list(reversed(rotated))
