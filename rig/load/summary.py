"""The run summary (summary.json): one typed shape, written and read here, and the one rule that
says whether a run's figures may be used.

record (rig.load.records) -> run summary (here) -> boot entry -> comparison (rig.compare.model)

Every part is a typed record (rig.typed): the metrics rig.load.metrics computes from the records
(window, request counts, latency distributions, token figures, arrivals, conversations), the
client's verdict, the provenance and the scenario as it ran (rig.load.provenance) and the server
and GPU observations, all read by attribute. A renamed field is a validation error, never a None that turns into a
silently dropped round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, model_validator

from rig.atomic import write_text_atomic
from rig.load.figures import HEADLINE, USER_DECODE
from rig.load.provenance import ImportedFrom, Provenance, ScenarioRun
from rig.load.wire import LAG_PROBE_SLEEP, LagProbe
from rig.observe.gpu import GpuSummary
from rig.observe.server_metrics import ServerMetrics
from rig.typed import STORED, Epoch, Typed, Versioned

SUMMARY_SCHEMA = 3
SUMMARY_MAX_BYTES = 16 << 20  # a summary is tens of kB; its observations at most a few MB
ERROR_RATE_LIMIT = 0.01  # more than 1% of requests failed: the run measured a sick server


# ---- the metrics (rig.load.metrics computes them) ----------------------------------------------

class Window(Typed):
    """The measurement window of a run and how it was chosen."""

    start: Epoch
    end: Epoch
    run_start: Epoch  # users spawned (Locust's spawning_complete), else the first request
    run_end: Epoch  # Locust began stopping users, else the last request's end
    steady: bool  # False: no steady state was reached; the figures cover a transient
    opened_by: str  # why the window opens where it does
    # Derived, written for readers of the JSON; recomputed whenever a window is built or read.
    seconds: float = 0.0
    kept_fraction: float = 0.0

    @model_validator(mode="after")
    def _derive(self, info: ValidationInfo) -> Window:
        if info.context == STORED and (self.end < self.start or self.run_end < self.run_start):
            raise ValueError("the window (or the run) ends before it starts")
        self.seconds = max(self.end - self.start, 1e-9)
        self.kept_fraction = self.seconds / max(self.run_end - self.run_start, 1e-9)
        return self


class Distribution(Typed):
    """Count, mean and percentiles of a list of values (None where there are none)."""

    n: int
    mean: float | None = None
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class RateDistribution(Distribution):
    """A per-request rate beside its token-weighted headline (total tokens over total time)."""

    token_weighted: float | None = None


class RequestCounts(Typed):
    total: int
    completed: int  # completed requests sent inside the window: what the per-request figures cover
    errors: dict[str, int]  # by kind (http_503, stream_cut, cut_by_window, ...)
    cut_by_window: int
    error_rate: float  # errors other than cut_by_window, over every request
    burst_requests: int  # requests whose chunks arrived in a burst no server makes (a client backlog)
    burst_request_ids: list[str]
    unique_prompts: bool


class TokenFigures(Typed):
    per_chunk: Literal["continuous usage", "final usage / chunks"]
    run_tokens_per_chunk: float
    usage_vs_chunks_mismatched_requests: int
    usage_vs_chunks_mean_difference: float
    tolerance: float
    tokenizer_checked: bool
    usage_vs_tokenizer_mismatched_requests: int
    usage_vs_tokenizer_mean_difference: float
    prompt_tokens_target: float | None
    prompt_tokens_usage: float | None
    cached_share: float | None  # prompt tokens the server answered from its prefix cache (None: not reported)


class OutputLengthStats(Typed):
    requested: Distribution
    delivered: Distribution
    exact_share: float | None


class GapFit(Typed):
    """An open loop's sent gaps against the Gamma distribution its schedule drew (Kolmogorov-Smirnov)."""

    n: int
    distribution: str
    normalisation: float
    ks_statistic: float
    ks_p: float
    mean_s: float
    cv: float


class ArrivalStats(Typed):
    """What an arrival schedule asked for inside the window and what the client did."""

    scheduled: int
    sent: int
    note: str | None = None  # set when the schedule never started (and nothing else is)
    target_rate: float | None = None
    scheduled_rate: float | None = None
    achieved_rate: float | None = None
    achieved_vs_target: float | None = None
    unsent: int = 0
    queued: int = 0
    queued_share: float = 0.0
    queue_delay_s: Distribution | None = None
    dispatch_lateness_s: Distribution | None = None
    pool: int | None = None
    capped: bool | None = None
    gaps: GapFit | None = None


class TurnStats(Typed):
    requests: int
    prompt_tokens_mean: float | None
    cached_share: float | None
    ttft_p50_s: float | None


class ConversationStats(Typed):
    turns: dict[str, TurnStats]  # by turn (0-based, as a string: a JSON key)
    conversations: int
    conversations_ended_by_error: int


class Metrics(Typed):
    """rig.load.metrics.summarize(): per-request statistics over the window's completed requests,
    aggregate rates from every chunk that arrived inside it."""

    window: Window
    requests: RequestCounts
    ttft_s: Distribution
    itl_s: Distribution
    tpot_s: Distribution
    e2e_s: Distribution
    user_decode_tok_s: RateDistribution  # the decode headline: total decode tokens / total decode time
    prefill_tok_s: RateDistribution
    output_tok_s: float
    prompt_tok_s: float
    tokens: TokenFigures
    output_lengths: OutputLengthStats | None = None
    arrivals: ArrivalStats | None = None  # open_loop and trace runs
    conversation: ConversationStats | None = None  # multi_turn runs


# ---- the client ----------------------------------------------------------------------------------

class ClientLag(Typed):
    """One Locust process's event loop inside the window (rig.load.metrics.client_lag)."""

    process: str | None
    lag_samples: int
    lag_probe: LagProbe = LAG_PROBE_SLEEP  # the event its lag was timed on (rig.load.wire)
    cpu_s: float | None
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None
    stalls: int
    stalled_s: float
    stalled_fraction: float
    gc_pauses: list[tuple[float, float]]  # (wall time, seconds) of the collections inside the window
    cpu_percent_mean: float | None
    cpu_percent_max: float | None


class ClientBound(Typed):
    """The most the client's own timing could have moved one figure, as a share of it
    (rig.load.client_error): the figure is usable when that is at most `limit`."""

    bound: float | None  # None: not measurable (no lag samples, or no samples of the figure)
    limit: float
    holds: bool
    reason: str | None = None  # why it does not hold


class ClientVerdict(Typed):
    """Whether the client measured the server or itself (rig.load.metrics.client_verdict). `valid`
    and `reasons` are the headline's; `figures` holds every figure's own bound, and `every_figure`
    the problems that void them all (no statistics, a saturated process, a late schedule). `valid`
    is None for a run another tool measured: rig cannot check that client."""

    valid: bool | None
    reasons: list[str]
    figures: dict[str, ClientBound] = Field(default_factory=dict)
    every_figure: list[str] = Field(default_factory=list)
    processes: int
    lag_p99_ms: float | None = None
    lag_p50_ms: float | None = None
    lag_max_ms: float | None = None
    lag_probes: list[LagProbe] = Field(default_factory=list)  # the events the processes' lag was timed on
    stalled_fraction: float | None = None
    cpu_percent_mean_max: float | None = None
    lag_limit_ms: float | None = None
    server_clock: str | None = None
    note: str | None = None


class TokenAgreement(Typed):
    """The client's output tokens against the server's own counter (vLLM's generation_tokens_total,
    SGLang's generation tokens) over the same span: the server's first and last scrape inside the
    window (a counter's increase covers no more). Where they part, one of the two counts is wrong."""

    seconds: float
    client_tokens: float
    server_tokens: float
    difference: float  # client / server - 1


class Observations(Typed):
    """What the server and the GPUs did inside the window, and the run's timeline picture."""

    server: ServerMetrics
    gpu: GpuSummary | None = None
    timeline: str | None = None
    output_tokens: TokenAgreement | None = None  # None: no counter, or fewer than two scrapes inside the window


class RunSummary(Versioned):
    """One Locust run of one scenario against one boot."""

    schema_version: int = Field(SUMMARY_SCHEMA, alias="schema")
    scenario: ScenarioRun
    warmup: bool  # the first run of this scenario after its boot: kept, never compared
    interrupted: bool  # stopped early (Ctrl-C, SIGTERM): covers what was measured until then
    provenance: Provenance
    metrics: Metrics
    client: ClientVerdict
    clients: list[ClientLag] = Field(default_factory=list)  # per Locust process
    observations: Observations | None = None  # server metrics, GPU telemetry (None: imported)

    @property
    def kind(self) -> str:
        return self.scenario.kind

    @property
    def name(self) -> str:
        return self.scenario.name

    @property
    def imported(self) -> ImportedFrom | None:
        """Where a run measured by another tool came from (rig import); None for rig's own runs.
        rig cannot check another tool's client: such runs say so instead of passing the check."""
        return self.provenance.imported

    def headline(self) -> float | None:
        return HEADLINE[self.kind].read(self.metrics)

    def headline_text(self) -> str:
        """The headline as a line shows it: "user_decode_tok_s 224.7 tok/s per user", or "none"."""
        figure, value = HEADLINE[self.kind], self.headline()
        return f"{figure.name} {'none' if value is None else f'{value:.4g} {figure.unit}'}"

    def figures(self) -> dict[str, float | None]:
        """The per-round figures a comparison averages over a boot's rounds: the headline (latency
        percentiles are pooled over the rounds instead; see rig.load.figures.LATENCY)."""
        return {HEADLINE[self.kind].name: self.headline()}

    def problems(self, figure: str | None = None) -> list[str]:
        """Why this run's headline (or the named figure) may not be used; empty when it may. The one
        usability rule. A figure other than the headline is usable when the run is, save the client:
        for it, its own client bound counts (a busy client may move ITL p99 and not the headline)."""
        out = []
        if self.warmup:
            out.append("warmup run")
        if self.interrupted:
            out.append("interrupted")
        own = self.client.figures.get(figure) if figure not in (None, HEADLINE[self.kind].name) else None
        if self.imported is not None:
            pass
        elif own is not None:
            if self.client.every_figure or not own.holds:
                out.append(f"client INVALID for {figure}: " + "; ".join([*self.client.every_figure, *([own.reason] if own.reason else [])]))
        elif not self.client.valid:
            out.append("client INVALID: " + "; ".join(self.client.reasons))
        requests = self.metrics.requests
        if requests.error_rate > ERROR_RATE_LIMIT:
            out.append(f"{100 * requests.error_rate:.1f}% of requests failed ({requests.errors}) > {100 * ERROR_RATE_LIMIT:.0f}%")
        window = self.metrics.window
        if not window.steady:
            out.append(f"window not at steady state: {window.opened_by}")
        if self.headline() is None:
            if not requests.completed:
                why = "no completed request in the window"
            else:
                why = f"none of the {requests.completed} completed request(s) in the window carries the timing it is computed from"
                why += ": two or more streamed tokens with their arrival times" if HEADLINE[self.kind] is USER_DECODE else ""
            out.append(f"no {HEADLINE[self.kind].name} ({why})")
        return out

    def write(self, out_dir: Path) -> None:
        write_text_atomic(out_dir / "summary.json", self.json_text())

    @classmethod
    def read(cls, out_dir: Path) -> RunSummary:
        """A run's summary, read like every stored record (regular file, size cap, strict JSON); NotFound
        when there is none, Damaged (one line) when it is not one this rig wrote."""
        return cls.read_file(out_dir / "summary.json", SUMMARY_MAX_BYTES)
