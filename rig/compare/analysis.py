"""The comparison's analysis as typed records (compare.json), and what it is computed from
(AnalysisInputs): rig.compare.report builds them, markdown.py and plot.py read them."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import Field

from rig.boot.record import CacheState
from rig.compare.conditions import BootState, FingerprintReport, GpuConditions
from rig.compare.effects import KnownEffect
from rig.compare.identity import BatchingIdentity, GreedyIdentity, OutputKey
from rig.compare.model import COMPARE_SCHEMA, ComparePlan
from rig.compare.percentiles import min_count, percentile_label
from rig.compare.quality import Encode, QualityReport
from rig.compare.stats import Comparison, SampleSupport
from rig.load.figures import USER_DECODE, Figure, LatencyFigure
from rig.typed import Typed, Versioned

ArmBoots = dict[str, dict[int, list[float]]]  # arm -> ABBA block -> the boot's usable figures
GOODPUT = "goodput_req_s"
GOODPUT_WORDS = ("higher (better)", "lower (worse)")
STEP_FIGURE = "ms_per_token"
STEP_UNIT = "ms per token"
PER_USER_RATE = USER_DECODE.unit  # a headline in this unit also reads as time per token: 1000 / rate


@dataclass
class PercentileBoots:
    """One latency percentile of one scenario: each boot's figure from its pooled rounds."""

    figure: LatencyFigure
    values: ArmBoots  # supported boots only, one value each
    counts: dict[str, dict[int, int]]  # arm -> block -> samples pooled over the boot's usable rounds
    # arm -> the client bounds of its rounds usable for the headline but left out of this figure (its
    # own client bound failed)
    client_left_out: dict[str, list[float]] = field(default_factory=dict)

    def support(self, arms: tuple[str, str]) -> SampleSupport:
        """The counts of the blocks where both arms' boots were measured (a voided boot's partner
        enters no pair, so its count stands behind nothing printed)."""
        blocks = set(self.counts.get(arms[0], {})) & set(self.counts.get(arms[1], {}))
        return SampleSupport(percentile=percentile_label(self.figure.quantile), needed=min_count(self.figure.quantile),
                             counts={arm: {b: n for b, n in self.counts[arm].items() if b in blocks} for arm in arms
                                     if arm in self.counts})


@dataclass
class ScenarioFigures:
    """What a scenario's comparisons are computed from."""

    kind: str
    headline: Figure
    headline_boots: ArmBoots
    latency: list[PercentileBoots]
    goodput: ArmBoots | None  # None: no SLOs were given
    client_bounds: dict[str, float] = field(default_factory=dict)  # figure -> largest client bound over the rounds used for it


class ScenarioResult(Typed):
    kind: str
    unit: str
    headline: str
    vs: dict[str, Comparison]  # arm -> headline comparison against the baseline
    latency: dict[str, dict[str, Comparison]]  # figure -> arm -> comparison
    goodput: dict[str, Comparison]  # arm -> goodput (requests/s meeting the SLOs) against the baseline; {} without SLOs
    boots: ArmBoots  # usable headline figures
    # arm -> the headline's own boots as time per token (1000 / tok/s per user), a paired difference
    # in ms: what a per-token change (an injected delay, a slower kernel) is in its own unit. The
    # same measurements as the headline, so it is no further verdict; {} for other headlines.
    per_token: dict[str, Comparison] = Field(default_factory=dict)
    # figure -> the largest client bound (a share, rig.load.client_error) over the rounds used for it
    client_bounds: dict[str, float] = Field(default_factory=dict)


class SecondaryFamily(Typed):
    """Every secondary verdict the report prints, judged together."""

    size: int  # secondary comparisons with an interval, over every scenario and arm
    confidence: float  # of each of their intervals
    alpha: float  # the family-wise false-verdict rate with nothing changed
    method: str


class VoidedBoot(Typed):
    index: int
    arm: str
    attempt: int
    problems: list[str]


class ExcludedRounds(Typed):
    index: int
    arm: str
    rounds: list[str]  # "round N scenario: why"


class ImportedBoot(Typed):
    index: int
    arm: str
    block: int
    spec: str
    boot_id: str | None


class BootTally(Typed):
    """Boots planned and used, the voided ones and the rounds left out (with reasons), the imported ones."""

    planned: int
    used: int
    voided: list[VoidedBoot]
    exclusions: list[ExcludedRounds]
    imported: list[ImportedBoot]


class TargetReport(Typed):
    """--target: whether the widest headline precision reached the target, and after how many pairs."""

    target_pct: float
    widest_precision_pct: float | None
    pairs: int
    first_stage: int | None
    planned_pairs: int | None
    max_boots: int | None
    met: bool
    status: str


class TimelineBoot(Typed):
    """A boot in time order, for the plot: its rounds' headline figures (None: not usable)."""

    index: int
    arm: str
    block: int
    voided: bool
    control: bool
    rounds: dict[str, list[float | None]]  # scenario -> each round's headline


class Analysis(Versioned):
    """compare.json."""

    schema_version: int = Field(COMPARE_SCHEMA, alias="schema")
    plan: ComparePlan
    boots: BootTally
    boot_to_healthy_s: dict[str, float | None]
    boot_caches: dict[str, CacheState] = Field(default_factory=dict)  # boot -> its compile caches, where recorded
    scenarios: dict[str, ScenarioResult]
    family: SecondaryFamily
    greedy: GreedyIdentity
    batching: BatchingIdentity
    fingerprints: FingerprintReport
    boot_log_diff: dict[str, list[str]]
    target: TargetReport | None
    gpu: GpuConditions | None = None  # the GPUs during every measured window
    boot_state: BootState | None = None  # the boot-state control applied, its burn-in boots
    known_effects: list[KnownEffect] = Field(default_factory=list)
    void: str | None = None  # why no verdict stands (an unaccepted condition difference)

    @property
    def no_data(self) -> bool:
        """No headline of any scenario had a boot pair usable in both arms: the comparison measured nothing."""
        return all(c.pairs == 0 for result in self.scenarios.values() for c in result.vs.values())
    quality: QualityReport | None = None  # outputs moved or not
    timeline: list[TimelineBoot] = Field(default_factory=list)  # boots in time order, for the plot


@dataclass(frozen=True)
class AnalysisInputs:
    """Everything the analysis needs beyond the plan and the boot entries, read in one place
    (read_inputs): the analysis itself reads no file and starts nothing."""

    kinds: dict[str, str]  # scenario -> its kind (which headline it has)
    greedy: dict[str, bool]  # scenario -> it runs at temperature 0
    encode: Encode | None  # the served tokenizer, where this host has it and an output came as text only
    log_lines: dict[str, set[str]]  # boot "NN-arm" -> its normalised boot-log lines
    outputs: dict[str, dict[OutputKey, set[str]]]  # boot -> its temperature-0 load-test output digests
    unreadable_outputs: list[str] = field(default_factory=list)  # rounds whose records are damaged (left out)
