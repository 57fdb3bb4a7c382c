"""The typed shapes of a comparison, each written and read here only.

record -> run summary (rig.load) -> RunResult -> BootEntry (boots/NN-arm.json) -> analysis
(compare.json). Whether a run may be used is decided once, by RunSummary.problems().
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rig.atomic import write_text_atomic
from rig.compare.arms import Arm, boot_order
from rig.compare.percentiles import LatencyHistogram
from rig.strict_yaml import load_json_file

COMPARE_SCHEMA = 3
PLAN_MAX_BYTES = 1 << 20
ENTRY_MAX_BYTES = 16 << 20
IMPORTED_INDEX = 100  # boots imported from another tool (rig import --compare) are numbered from here


@dataclass
class ComparePlan:
    recipe: str
    arms: list[Arm]
    control: Arm | None
    boots: int  # boot pairs (ABBA blocks); `--target` may add more, up to max_boots
    rounds: int
    scenarios: list[str]
    small: bool
    workers: int | None = None
    duration_s: float | None = None
    target_pct: float | None = None  # keep adding pairs until every headline interval is this narrow
    max_boots: int | None = None
    first_stage: int | None = None  # --target: pairs of Stein's first stage (they alone estimate the sd)
    planned_pairs: int | None = None  # --target: the pairs the first stage's sd asks for, capped at max_boots
    slos: dict[str, float] | None = None  # goodput SLOs in seconds: ttft, tpot, e2e (vLLM's --goodput)
    accept_fingerprint: list[str] = field(default_factory=list)  # fingerprint fields allowed to differ (globs)
    cold_caches: bool = False  # every boot starts with empty compile/kernel caches of its own
    created: float = field(default_factory=time.time)
    schema: int = COMPARE_SCHEMA

    def order(self) -> list[tuple[int, Arm]]:
        """The control (if any) boots first, so its index stays put when --target adds pairs."""
        return ([(0, self.control)] if self.control else []) + boot_order(self.arms, self.boots)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["order"] = [(block, arm.name) for block, arm in self.order()]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ComparePlan:
        if data.get("schema") != COMPARE_SCHEMA:
            raise ValueError(f"plan schema {data.get('schema')} is not {COMPARE_SCHEMA}")
        data = {k: v for k, v in data.items() if k != "order"}
        data["arms"] = [Arm.from_json(a) for a in data["arms"]]
        data["control"] = Arm.from_json(data["control"]) if data["control"] else None
        return cls(**data)

    def write(self, out: Path) -> None:
        write_text_atomic(out / "plan.json", json.dumps(self.to_json(), indent=1))

    @classmethod
    def read(cls, out: Path) -> ComparePlan:
        """The plan of a comparison directory (`--resume` names it): read like any input file."""
        return cls.from_json(load_json_file(out / "plan.json", PLAN_MAX_BYTES))


@dataclass
class RunResult:
    """One scenario run inside one round of one boot."""

    scenario: str
    dir: str
    figures: dict[str, float | None]  # RunSummary.figures(): the headline
    problems: list[str]  # RunSummary.problems(): empty = usable
    goodput: dict[str, Any] | None = None  # requests/s meeting the SLOs, when SLOs were given
    # Per-request latencies of the window (ms), by rig.load.summary.LATENCY_SAMPLES name: a boot's
    # percentiles are read from its usable rounds pooled (rig.compare.percentiles).
    latency: dict[str, LatencyHistogram] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return not self.problems

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        data = dict(data)
        data["latency"] = {name: LatencyHistogram(**h) for name, h in (data.get("latency") or {}).items()}
        return cls(**data)


@dataclass
class BootEntry:
    """One boot of one arm: its checks, its rounds, its greedy outputs."""

    index: int  # position in the boot order
    block: int  # ABBA block: the pair this boot belongs to
    arm: str
    spec: str
    control: bool
    attempt: int  # 1 + earlier attempts of this boot that did not finish (interrupted)
    boot_id: str | None = None
    voided: bool = False
    problems: list[str] = field(default_factory=list)
    rounds: list[dict[str, RunResult]] = field(default_factory=list)  # round -> scenario -> result
    greedy: dict[str, str] = field(default_factory=dict)  # prompt -> sha256 of the c=1 temperature-0 output
    check: dict[str, Any] | None = None
    healthy_after_s: float | None = None
    log_path: str | None = None
    adapter_stats: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    started: float | None = None
    quality: dict[str, Any] | None = None  # rig.compare.quality.BootQuality: continuations and reference scores
    schema: int = COMPARE_SCHEMA

    def usable_results(self, scenario: str) -> list[RunResult]:
        """This scenario's usable rounds, in round order."""
        return [r[scenario] for r in self.rounds if scenario in r and r[scenario].usable]

    def usable_figures(self, scenario: str, figure: str) -> list[float]:
        return [float(value) for result in self.usable_results(scenario) if (value := result.figures.get(figure)) is not None]

    def exclusions(self) -> list[str]:
        return [f"round {index} {name}: {'; '.join(result.problems)}"
                for index, round_results in enumerate(self.rounds) for name, result in round_results.items() if result.problems]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BootEntry:
        if data.get("schema") != COMPARE_SCHEMA:
            raise ValueError(f"boot entry schema {data.get('schema')} is not {COMPARE_SCHEMA}")
        data = dict(data)
        data["rounds"] = [{name: RunResult.from_json(result) for name, result in round_results.items()}
                          for round_results in data["rounds"]]
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    @staticmethod
    def path(out: Path, index: int, arm: str) -> Path:
        return out / "boots" / f"{index:02d}-{arm}.json"

    def write(self, out: Path) -> None:
        write_text_atomic(self.path(out, self.index, self.arm), json.dumps(self.to_json(), indent=1, default=str))

    @classmethod
    def read(cls, path: Path) -> BootEntry:
        return cls.from_json(load_json_file(path, ENTRY_MAX_BYTES))
