"""The typed shapes of a comparison, each written and read here only.

record -> run summary (rig.load) -> RunResult -> BootEntry (boots/NN-arm.json) -> analysis
(compare.json). Whether a run may be used is decided once, by RunSummary.problems().
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from pydantic import Field, JsonValue, model_validator

from rig.atomic import write_text_atomic
from rig.boot.checks import BootCheck
from rig.boot.record import CacheState
from rig.compare.arms import Arm, boot_order
from rig.compare.coherence import BootCoherence
from rig.compare.design import FIRST_LOOK, MAX_ARMS, MAX_PAIRS, MAX_SCENARIOS
from rig.compare.percentiles import LatencyHistogram
from rig.compare.stats import CONFIDENCE, per_look_confidence
from rig.load.bounds import MAX_DURATION_S, MAX_WORKERS
from rig.load.goodput import SLO_KEYS, Goodput
from rig.observe.fingerprint import Fingerprint
from rig.observe.gpu import GpuTelemetry
from rig.typed import Typed, Versioned

COMPARE_SCHEMA = 6
PLAN_MAX_BYTES = 1 << 20
ENTRY_MAX_BYTES = 16 << 20
IMPORTED_INDEX = 100  # boots imported from another tool (rig import --compare) are numbered from here

# The ABBA block of the comparison's burn-in boot: before block 0, paired with nothing.
BURN_IN_BLOCK = -1


class ComparePlan(Versioned):
    """plan.json: what a comparison runs; `--resume` reads it back."""

    schema_version: int = Field(COMPARE_SCHEMA, alias="schema")
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
    # A stopping rule's (first, most) pairs (rig.compare.sequential): it adds pairs until decided,
    # and a resume carries the rule on. Each headline interval is then read at the rule's per-look
    # level, because an interval read at a data-chosen stop covers the change only at that level.
    stopping_rule: tuple[int, int] | None = None
    slos: dict[str, float] | None = None  # goodput SLOs in seconds: ttft, tpot, e2e (vLLM's --goodput)
    accept_fingerprint: list[str] = Field(default_factory=list)  # fingerprint fields allowed to differ (globs)
    cold_caches: bool = False  # every boot starts with empty compile/kernel caches of its own
    driver: Literal["native", "compose", "slurm"] | None = None  # every boot's driver (None: the recipe's own)
    # The boot-state control (rig.compare.schedule): a measured boot whose engine log says it compiled is
    # kept as a burn-in and booted again; where the engine's log cannot tell, a burn-in boot of the
    # baseline arm opens the comparison instead (burn_in_first).
    boot_state_control: bool = True
    burn_in_first: bool = False
    # Where the control boots: after the first ABBA block (so it is scored against the reference),
    # or first, as comparisons written before that kept it (read back as they ran: a resume or a
    # re-read report finds every boot at its own index).
    control_slot: Literal["first", "after_first_block"] = "after_first_block"
    created: float = Field(default_factory=time.time)

    # (block, arm) of every boot in the order they run: derived, written for readers of plan.json,
    # recomputed when the plan is built or read and before it is written (--target adds pairs).
    boot_sequence: list[tuple[int, str]] = Field(default_factory=list, alias="order")

    @model_validator(mode="after")
    def _derive(self) -> ComparePlan:
        self._bounded()
        self.boot_sequence = [(block, arm.name) for block, arm in self.order()]
        return self

    def _bounded(self) -> None:
        """What a plan may say, from the command line or read back from plan.json (which is input:
        an edited one must not name a path, ask for a billion boots or a NaN target)."""
        from rig import grammar

        grammar.recipe_name(self.recipe)
        for name in self.scenarios:
            grammar.load_name(name)
        names = [a.name for a in self.arms] + ([self.control.name] if self.control else [])
        if not 2 <= len(self.arms) <= MAX_ARMS or len(set(names)) != len(names):
            raise ValueError(f"a comparison has 2 to {MAX_ARMS} arms (and a control) with distinct names")
        if not 1 <= len(self.scenarios) <= MAX_SCENARIOS or len(set(self.scenarios)) != len(self.scenarios):
            raise ValueError(f"a comparison names 1 to {MAX_SCENARIOS} distinct scenarios")
        for field, value in (("boots", self.boots), ("rounds", self.rounds), ("max_boots", self.max_boots),
                             ("first_stage", self.first_stage), ("planned_pairs", self.planned_pairs)):
            if value is not None and not 1 <= value <= MAX_PAIRS:
                raise ValueError(f"{field} {value} is outside 1..{MAX_PAIRS}")
        if self.stopping_rule is not None:
            first, most = self.stopping_rule
            if not FIRST_LOOK <= first <= most <= MAX_PAIRS:
                raise ValueError(f"stopping_rule {list(self.stopping_rule)} is not [first, most] pairs with "
                                 f"{FIRST_LOOK} <= first <= most <= {MAX_PAIRS}")
            if self.target_pct is not None:
                raise ValueError("a plan stops at a precision (target_pct) or at a decision (stopping_rule), not both")
        if self.target_pct is not None and not 0 < self.target_pct <= 100:
            raise ValueError(f"target {self.target_pct}% is not a precision in (0, 100]")
        # (0, max]: a plan written before rig.load.bounds.MIN_DURATION_S still resumes; a new one is held to it by the CLI
        if self.duration_s is not None and not 0 < self.duration_s <= MAX_DURATION_S:
            raise ValueError(f"duration {self.duration_s} s is not in (0, {MAX_DURATION_S:g}]")
        if self.workers is not None and not 1 <= self.workers <= MAX_WORKERS:
            raise ValueError(f"workers {self.workers} is outside 1..{MAX_WORKERS}")
        for key, limit in (self.slos or {}).items():  # --goodput's grammar (rig.load.goodput.parse_slos)
            if key not in SLO_KEYS or not 0 < limit <= MAX_DURATION_S:  # NaN fails the comparison too
                raise ValueError(f"SLO {key[:40]!r} <= {limit} s is not one of {', '.join(SLO_KEYS)} with a positive limit")

    @property
    def confidence(self) -> float:
        """Each headline interval's confidence: 95%, or with a stopping rule 1 - 5% / its looks (Bonferroni)."""
        if self.stopping_rule is None:
            return CONFIDENCE
        first, most = self.stopping_rule
        return per_look_confidence(most - first + 1)

    def order(self) -> list[tuple[int, Arm]]:
        """The burn-in boot (if any), the first ABBA block, the control (if any), then the other
        blocks. The control boots after the first baseline boot, whose greedy continuations are the
        reference it is scored against (before it, the control could only be compared token by
        token); `--target` adds blocks at the end, so every index stays put."""
        blocks = boot_order(self.arms, self.boots)
        first = 0 if self.control_slot == "first" else len(self.arms)
        return (([(BURN_IN_BLOCK, self.arms[0])] if self.burn_in_first else []) + blocks[:first]
                + ([(0, self.control)] if self.control else []) + blocks[first:])

    def write(self, out: Path) -> None:
        self._derive()
        write_text_atomic(out / "plan.json", self.json_text())

    @classmethod
    def read(cls, out: Path) -> ComparePlan:
        """The plan of a comparison directory (`--resume` names it): read like any input file. One
        written before control_slot existed ran its control first, and is read back so."""
        plan = cls.read_file(out / "plan.json", PLAN_MAX_BYTES)
        if "control_slot" not in plan.model_fields_set:
            plan.control_slot = "first"
            plan._derive()
        return plan


class RunResult(Typed):
    """One scenario run inside one round of one boot."""

    scenario: str
    dir: str
    figures: dict[str, float | None]  # RunSummary.figures(): the headline
    problems: list[str]  # RunSummary.problems(): empty = usable
    goodput: Goodput | None = None  # requests/s meeting the SLOs, when SLOs were given
    # Per-request latencies of the window (ms), by rig.load.figures.LATENCY_SAMPLES name: a boot's
    # percentiles are read from its usable rounds pooled (rig.compare.percentiles).
    latency: dict[str, LatencyHistogram] = Field(default_factory=dict)
    # The serving GPUs over the window (NVML index -> clocks, power, clock-event reasons): conditions
    # the comparison checks between boots (rig.compare.conditions.gpu_conditions). None: no telemetry.
    gpu: dict[str, GpuTelemetry] | None = None
    window: tuple[float, float] | None = None  # the measured window (wall time), for checks against adapter timings
    # Per latency figure, why this round may not be used for it (RunSummary.problems(figure)): a busy
    # client may move ITL p99 and not the headline. A figure not named here follows `problems`.
    problems_by_figure: dict[str, list[str]] = Field(default_factory=dict)
    # Per figure, the most the client's timing could have moved it, as a share (rig.load.client_error).
    client_bounds: dict[str, float | None] = Field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return not self.problems

    def usable_for(self, figure: str | None) -> bool:
        """Whether this round may be used for `figure` (None: the headline)."""
        if figure is None or figure not in self.problems_by_figure:
            return self.usable
        return not self.problems_by_figure[figure]


class Generation(Typed):
    """A greedy continuation: token ids where the engine returns them, its text, and per position
    the top-k (token id -> logprob) where the engine returns logprobs."""

    prompt_ids: list[int] | None
    output_ids: list[int] | None
    text: str
    top: list[dict[int, float]] | None = None


class Score(Typed):
    """The reference continuation scored teacher-forced: per position the logprob of the reference
    token and the top-k (token id -> logprob); `sequence` names the scored token sequence, so scores
    of two different sequences are never compared."""

    logprobs: list[float]
    top: list[dict[int, float]]
    sequence: str = ""


class BootQuality(Typed):
    """One boot's greedy continuations of the probe set and its scores of the reference continuation
    (rig.compare.quality.collect)."""

    scoring: str | None  # the engine's protocol, None when it cannot score
    generations: dict[str, Generation] = Field(default_factory=dict)
    scores: dict[str, Score] = Field(default_factory=dict)
    note: str | None = None


class QualityReference(Versioned):
    """quality-reference.json: the first baseline boot's greedy continuations, which every boot of
    the comparison scores."""

    schema_version: int = Field(COMPARE_SCHEMA, alias="schema")
    generations: dict[str, Generation]


class BootEntry(Versioned):
    """One boot of one arm: its checks, its rounds, its greedy outputs."""

    schema_version: int = Field(COMPARE_SCHEMA, alias="schema")
    index: int  # position in the boot order
    block: int  # ABBA block: the pair this boot belongs to
    arm: str
    spec: str
    control: bool
    attempt: int  # 1 + earlier attempts at this position: interrupted ones, and a first boot kept as a burn-in
    # A burn-in boot: measured like the others but paired with nothing (the comparison's first boot,
    # or a measured boot that compiled and was booted again); its figures show what boot state costs.
    burn_in: bool = False
    boot_id: str | None = None
    voided: bool = False
    problems: list[str] = Field(default_factory=list)
    rounds: list[dict[str, RunResult]] = Field(default_factory=list)  # round -> scenario -> result
    greedy: dict[str, str] = Field(default_factory=dict)  # prompt -> sha256 of the c=1 temperature-0 output
    check: BootCheck | None = None
    healthy_after_s: float | None = None
    log_path: str | None = None
    # adapter -> its runtime statistics, as the adapter's manifest (rig_adapters, in the engine) wrote them
    adapter_stats: dict[str, JsonValue] = Field(default_factory=dict)
    fingerprint: Fingerprint | None = None
    started: float | None = None
    quality: BootQuality | None = None  # continuations and reference scores
    coherence: BootCoherence | None = None  # the load tests' own outputs, computed when the boot ran
    compile_cache: CacheState | None = None  # the engine's compile caches at start and what the boot added
    # Seconds each part of the boot took (up, checks, load, greedy, quality, down): what a user pays per boot.
    phases_s: dict[str, float] = Field(default_factory=dict)

    @property
    def measured(self) -> bool:
        """A boot whose figures enter the comparison: not voided, not the control, not a burn-in."""
        return not self.voided and not self.control and not self.burn_in

    @property
    def gpus(self) -> str:
        """The GPUs of the host (each node's, for a multi-node boot) this boot ran on, by uuid: a boot
        of another host reads another set. It is every GPU NVML sees there, not only those the boot
        used: two boots of one host on different GPUs read alike. "" where the fingerprint names none
        or a uuid NVML could not read (unknown: two such hosts must not read as one)."""
        if self.fingerprint is None:
            return ""
        uuids = [g.uuid for fp in [self.fingerprint, *self.fingerprint.nodes] for g in fp.gpus]
        return "" if None in uuids else ",".join(dict.fromkeys(uuids))

    @property
    def compiled(self) -> bool:
        """The engine's own log says this boot compiled (its caches did not hold the configuration)."""
        return self.compile_cache is not None and self.compile_cache.log == "compiled"

    def usable_results(self, scenario: str, figure: str | None = None) -> list[RunResult]:
        """This scenario's rounds usable for `figure` (None: the headline), in round order."""
        return [r[scenario] for r in self.rounds if scenario in r and r[scenario].usable_for(figure)]

    def usable_figures(self, scenario: str, figure: str) -> list[float]:
        return [float(value) for result in self.usable_results(scenario) if (value := result.figures.get(figure)) is not None]

    def exclusions(self) -> list[str]:
        return [f"round {index} {name}: {'; '.join(result.problems)}"
                for index, round_results in enumerate(self.rounds) for name, result in round_results.items() if result.problems]

    @staticmethod
    def path(out: Path, index: int, arm: str, burn_in: bool = False) -> Path:
        """boots/NN-arm.json; a measured position's compiled first boot is boots/NN-arm.burn-in.json."""
        return out / "boots" / f"{index:02d}-{arm}{'.burn-in' if burn_in else ''}.json"

    def write(self, out: Path, as_burn_in: bool = False) -> None:
        write_text_atomic(self.path(out, self.index, self.arm, as_burn_in), self.json_text())

    @classmethod
    def read(cls, path: Path) -> BootEntry:
        return cls.read_file(path, ENTRY_MAX_BYTES)
