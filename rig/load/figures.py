"""Every figure rig reports, each declared once: its name, unit and direction, how a run yields it,
the client-error rule that bounds it, and how a comparison aggregates it over a boot's rounds.

A figure is one `Figure` below, registered in `FIGURES` as it is declared. Everything else is a
view of the registry: each scenario kind's headline (`HEADLINE`), the latency percentiles a
comparison pools (`LATENCY`), the client bounds (rig.load.client_error builds one per figure from
`client_rule` and `pooled_rule`, rules of docs/client-error.md), summary.md's columns, a sweep's
columns, a tune's latency constraints and the peer exports (`PEER_SERIES`, `Figure.peer_keys`).
A consumer names a figure through the constants here,
never by a string of its own (tests/load/test_figures.py holds that), so adding a figure touches
this file alone. The per-request values themselves are defined in rig.load.request_metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from typing import TYPE_CHECKING, Literal, NamedTuple, get_args

if TYPE_CHECKING:
    from rig.load.kinds import Kind
    from rig.load.summary import Metrics

# The per-request values a figure is computed from: a LatencySamples field for a percentile, or
# the durations a token-weighted rate sums ("decode": first to last output chunk; "prefill": send to
# first chunk, over the prompt's tokens); None for the window's aggregate rate.
Samples = Literal["ttft", "itl", "tpot", "e2e", "decode", "prefill"]
ClientRule = Literal["R4", "R5", "R9"]  # rules of docs/client-error.md that bound one process's figure
PooledRule = Literal["R15"]  # rules that bound a figure over every process at once


class Statistic(Enum):
    """How a run yields the figure from its records (rig.load.metrics.summarize)."""

    TOKEN_WEIGHTED = auto()  # total tokens over the summed per-request durations
    PERCENTILE = auto()  # a percentile of the per-request samples
    WINDOW_RATE = auto()  # output tokens read inside the window over its seconds


class Boots(Enum):
    """How a comparison aggregates the figure over a boot's usable rounds."""

    ROUND_MEAN = auto()  # the mean of the rounds' figures
    POOLED = auto()  # one percentile of every round's requests pooled (rig.compare.percentiles)
    NOT_COMPARED = auto()  # reported by a load test or a sweep only


class PeerSeries(NamedTuple):
    """A per-request quantity as the peers' files name it (rig.load.peers writes them)."""

    vllm: str  # vllm bench serve's result keys: mean_<name>_ms, median_<name>_ms, std_<name>_ms, p<q>_<name>_ms
    aiperf: str | None  # AIPerf's per-request metric and its block in profile_export_aiperf.json (None: not one)


# The series both peers report, by the samples they come from. vLLM's TPOT (and AIPerf's
# inter_token_latency, the same quantity) is (latency - ttft) / (output tokens - 1) on the server's
# token count; rig's is decode time over the tokens after the first chunk: the two agree when every
# chunk carries one token.
PEER_SERIES: dict[Samples, PeerSeries] = {
    "ttft": PeerSeries("ttft", "time_to_first_token"),
    "tpot": PeerSeries("tpot", "inter_token_latency"),
    "itl": PeerSeries("itl", None),
    "e2e": PeerSeries("e2el", "request_latency"),
}
# The percentiles of AIPerf's aggregate blocks (its schema's, whatever rig's figures are).
AIPERF_PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)


FIGURES: dict[str, Figure] = {}  # by name, in declaration order


@dataclass(frozen=True, kw_only=True)
class Figure:
    """One figure, registered in FIGURES on declaration (a second one of the same name is refused)."""

    name: str  # its key in summary.json's client bounds, a comparison's report and every export
    unit: str
    higher_is_better: bool
    metric: str  # the field of rig.load.summary.Metrics it sits in
    stat: str | None = None  # the field of that distribution (p50, token_weighted); None: the field is the figure
    scale: float = 1.0  # seconds in the metrics -> milliseconds in the figure
    statistic: Statistic
    samples: Samples | None = None
    quantile: float | None = None  # a percentile's quantile
    client_rule: ClientRule  # the rule bounding one process's figure (rig.load.client_error)
    pooled_rule: PooledRule | None = None  # the rule bounding it over every process, where tighter
    boots: Boots
    headline_of: tuple[Kind, ...] = ()  # the scenario kinds whose headline it is
    column: str | None = None  # its column in summary.md and summary.csv
    sweep_format: str | None = None  # its column's format in a sweep's table (None: not a sweep column)

    def __post_init__(self) -> None:
        if self.name in FIGURES:
            raise ValueError(f"figure {self.name} is declared twice")
        if (self.statistic is Statistic.PERCENTILE) != (self.quantile is not None):
            raise ValueError(f"figure {self.name}: a percentile, and only a percentile, has a quantile")
        FIGURES[self.name] = self

    def read(self, metrics: Metrics) -> float | None:
        """The figure's value in a run's metrics (None: the run has no samples of it)."""
        value = getattr(metrics, self.metric)
        if self.stat is not None:
            value = getattr(value, self.stat)
        return None if value is None else self.scale * float(value)

    def peer_keys(self) -> dict[str, str]:
        """Where each peer's export reports this figure's statistic of the same series: vLLM's result
        key and AIPerf's `metric.pNN` (empty: no peer reports it)."""
        series = PEER_SERIES.get(self.samples) if self.samples is not None else None
        if series is None or self.quantile is None:
            return {}
        percent = round(100 * self.quantile, 6)
        keys = {"vllm": f"median_{series.vllm}_ms" if percent == 50 else f"p{percent:g}_{series.vllm}_ms"}
        if series.aiperf is not None and percent in AIPERF_PERCENTILES:
            keys["aiperf"] = f"{series.aiperf}.p{percent:g}"
        return keys


LatencyFigure = Figure  # the type of a latency percentile: a Figure whose statistic is PERCENTILE


def _percentile(name: str, samples: Samples, quantile: float, *, unit: str = "ms", boots: Boots = Boots.POOLED,
                headline_of: tuple[Kind, ...] = (), column: str | None = None, sweep_format: str | None = None) -> Figure:
    """A latency percentile (ms, lower is better): its quantile of the samples' distribution in the
    metrics (`<samples>_s`), bounded by R5."""
    return Figure(name=name, unit=unit, higher_is_better=False, metric=f"{samples}_s", stat=f"p{round(100 * quantile)}",
                  scale=1000.0, statistic=Statistic.PERCENTILE, samples=samples, quantile=quantile, client_rule="R5", boots=boots,
                  headline_of=headline_of, column=column, sweep_format=sweep_format)


# The headline of each kind of scenario; every one is token-weighted or window-clipped. At a fixed
# offered load (open loop, trace) throughput is the load itself: what a change moves is how long
# requests take, so their headline is the median end-to-end latency; a multi-turn run's is too (the
# prefix cache's gain shows as shorter requests).
USER_DECODE = Figure(name="user_decode_tok_s", unit="tok/s per user", higher_is_better=True, metric="user_decode_tok_s",
                     stat="token_weighted", statistic=Statistic.TOKEN_WEIGHTED, samples="decode", client_rule="R4",
                     boots=Boots.ROUND_MEAN, headline_of=("decode",), column="user tok/s")
PREFILL = Figure(name="prefill_tok_s", unit="prefill tok/s", higher_is_better=True, metric="prefill_tok_s", stat="token_weighted",
                 statistic=Statistic.TOKEN_WEIGHTED, samples="prefill", client_rule="R4", boots=Boots.ROUND_MEAN,
                 headline_of=("prefill",), column="prefill tok/s")
OUTPUT = Figure(name="output_tok_s", unit="tok/s aggregate", higher_is_better=True, metric="output_tok_s",
                statistic=Statistic.WINDOW_RATE, client_rule="R9", pooled_rule="R15", boots=Boots.ROUND_MEAN,
                headline_of=("concurrency",), column="output tok/s", sweep_format="{:,.1f}")
E2E_P50 = _percentile("e2e_p50_ms", "e2e", 0.50, unit="ms (lower is better)", boots=Boots.ROUND_MEAN,
                      headline_of=("open_loop", "trace", "multi_turn"), column="E2E p50 ms", sweep_format="{:.0f}")
E2E_P99 = _percentile("e2e_p99_ms", "e2e", 0.99, boots=Boots.NOT_COMPARED, sweep_format="{:.0f}")
TPOT_P99 = _percentile("tpot_p99_ms", "tpot", 0.99, boots=Boots.NOT_COMPARED, sweep_format="{:.2f}")
# Latency percentiles compared beside the headline: a comparison reads each from a boot's requests
# pooled over its usable rounds, never as a mean of per-round percentiles (one round of a c=1
# scenario has too few requests for a tail).
TTFT_P50 = _percentile("ttft_p50_ms", "ttft", 0.50, column="TTFT p50 ms", sweep_format="{:.1f}")
TTFT_P99 = _percentile("ttft_p99_ms", "ttft", 0.99, column="TTFT p99 ms", sweep_format="{:.1f}")
ITL_P50 = _percentile("itl_p50_ms", "itl", 0.50, column="ITL p50 ms")
ITL_P99 = _percentile("itl_p99_ms", "itl", 0.99)
TPOT_P50 = _percentile("tpot_p50_ms", "tpot", 0.50, column="TPOT p50 ms", sweep_format="{:.2f}")

# ---- views ---------------------------------------------------------------------------------------

HEADLINE: dict[str, Figure] = {kind: figure for figure in FIGURES.values() for kind in figure.headline_of}
LATENCY = tuple(figure for figure in FIGURES.values() if figure.boots is Boots.POOLED)
LATENCY_SAMPLES = tuple(dict.fromkeys(str(figure.samples) for figure in LATENCY))  # what a comparison keeps per round
# The figures of a sweep's table, and of summary.md's, by column.
SWEEP = tuple(sorted((figure for figure in FIGURES.values() if figure.sweep_format is not None),  # rates, then percentiles
                     key=lambda f: (f.quantile is not None, get_args(Samples).index(f.samples) if f.samples else 0, f.quantile or 0.0)))
BY_COLUMN = {figure.column: figure for figure in FIGURES.values() if figure.column is not None}
# Latency percentiles a scenario whose requests return one token cannot measure: there is no second token.
NEEDS_TWO_TOKENS = frozenset(figure.name for figure in LATENCY if figure.samples in ("itl", "tpot"))
# The percentiles vLLM's export writes of each series beside its mean, median and std, as
# `vllm bench serve --metric-percentiles` would: those of the registry's figures of that series.
VLLM_PERCENTILES: dict[Samples, tuple[float, ...]] = {
    samples: tuple(sorted({round(100 * f.quantile, 6) for f in FIGURES.values()
                           if f.samples == samples and f.quantile is not None and f.quantile != 0.5}))
    for samples in PEER_SERIES}
