"""The run summary (summary.json): one typed shape, written and read here, and the one rule that
says whether a run's figures may be used.

record (rig.load.records) -> run summary (here) -> boot entry -> comparison (rig.compare.model)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rig.atomic import write_text_atomic

SUMMARY_SCHEMA = 2
ERROR_RATE_LIMIT = 0.01  # more than 1% of requests failed: the run measured a sick server


@dataclass(frozen=True)
class Figure:
    """A number a comparison judges: where it sits in the metrics, and which way is better."""

    name: str
    unit: str
    higher_is_better: bool
    path: tuple[str, ...]
    scale: float = 1.0  # seconds in the metrics -> milliseconds in the figure

    def read(self, metrics: dict[str, Any]) -> float | None:
        value: Any = metrics
        for key in self.path:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return self.scale * float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# The headline figure of each kind of scenario; every one is token-weighted or window-clipped.
# At a fixed offered load (open loop, trace) throughput is the load itself: what a change moves
# is how long requests take, so their headline is the median end-to-end latency; a multi-turn
# run's is too (the prefix cache's gain shows as shorter requests).
HEADLINE = {
    "decode": Figure("user_decode_tok_s", "tok/s per user", True, ("user_decode_tok_s", "token_weighted")),
    "prefill": Figure("prefill_tok_s", "prefill tok/s", True, ("prefill_tok_s", "token_weighted")),
    "concurrency": Figure("output_tok_s", "tok/s aggregate", True, ("output_tok_s",)),
    "open_loop": Figure("e2e_p50_ms", "ms (lower is better)", False, ("e2e_s", "p50"), 1000.0),
    "trace": Figure("e2e_p50_ms", "ms (lower is better)", False, ("e2e_s", "p50"), 1000.0),
    "multi_turn": Figure("e2e_p50_ms", "ms (lower is better)", False, ("e2e_s", "p50"), 1000.0),
}


@dataclass(frozen=True)
class LatencyFigure:
    """A latency percentile compared beside the headline (lower is better). A comparison reads it
    from each boot's requests pooled over its usable rounds (rig.compare.percentiles), never as a
    mean of per-round percentiles: one round of a c=1 scenario has too few requests for a tail."""

    name: str
    samples: str  # the field of rig.load.metrics.LatencySamples it is read from
    quantile: float
    unit: str = "ms"
    higher_is_better: bool = False


LATENCY = (
    LatencyFigure("ttft_p50_ms", "ttft", 0.50),
    LatencyFigure("ttft_p99_ms", "ttft", 0.99),
    LatencyFigure("itl_p50_ms", "itl", 0.50),
    LatencyFigure("itl_p99_ms", "itl", 0.99),
    LatencyFigure("tpot_p50_ms", "tpot", 0.50),
)
LATENCY_SAMPLES = tuple(dict.fromkeys(figure.samples for figure in LATENCY))  # what a comparison keeps per round


@dataclass
class RunSummary:
    """One Locust run of one scenario against one boot."""

    scenario: dict[str, Any]  # name, version, kind, users, prompt/max tokens, duration
    warmup: bool  # the first run of this scenario after its boot: kept, never compared
    interrupted: bool  # stopped early (Ctrl-C, SIGTERM): covers what was measured until then
    provenance: dict[str, Any]  # recipe, boot, engine, image, gates, host, client set-up
    metrics: dict[str, Any]  # rig.load.metrics.summarize()
    client: dict[str, Any]  # rig.load.metrics.client_verdict()
    clients: list[dict[str, Any]] = field(default_factory=list)  # per Locust process
    observations: dict[str, Any] = field(default_factory=dict)  # server metrics, GPU telemetry
    schema: int = SUMMARY_SCHEMA

    @property
    def kind(self) -> str:
        return self.scenario["kind"]

    @property
    def name(self) -> str:
        return self.scenario["name"]

    @property
    def imported(self) -> dict[str, Any] | None:
        """Where a run measured by another tool came from (rig import); None for rig's own runs.
        rig cannot check another tool's client: such runs say so instead of passing the check."""
        return self.provenance.get("imported")

    def headline(self) -> float | None:
        return HEADLINE[self.kind].read(self.metrics)

    def figures(self) -> dict[str, float | None]:
        """The per-round figures a comparison averages over a boot's rounds: the headline (latency
        percentiles are pooled over the rounds instead; see LATENCY)."""
        return {HEADLINE[self.kind].name: self.headline()}

    def problems(self) -> list[str]:
        """Why this run's figures may not be used; empty when they may. The one usability rule."""
        out = []
        if self.warmup:
            out.append("warmup run")
        if self.interrupted:
            out.append("interrupted")
        if self.imported is None and not self.client.get("valid"):
            out.append("client INVALID: " + "; ".join(self.client.get("reasons") or []))
        requests = self.metrics.get("requests", {})
        if requests.get("error_rate", 0.0) > ERROR_RATE_LIMIT:
            out.append(f"{100 * requests['error_rate']:.1f}% of requests failed ({requests.get('errors')}) > {100 * ERROR_RATE_LIMIT:.0f}%")
        window = self.metrics.get("window", {})
        if not window.get("steady", False):
            out.append(f"window not at steady state: {window.get('opened_by')}")
        if self.headline() is None:
            out.append(f"no {HEADLINE[self.kind].name} (no completed request in the window)")
        return out

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSummary:
        if data.get("schema") != SUMMARY_SCHEMA:
            raise ValueError(f"summary schema {data.get('schema')} is not {SUMMARY_SCHEMA}")
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def write(self, out_dir: Path) -> None:
        write_text_atomic(out_dir / "summary.json", json.dumps(self.to_json(), indent=1, default=str))

    @classmethod
    def read(cls, out_dir: Path) -> RunSummary:
        return cls.from_json(json.loads((out_dir / "summary.json").read_text()))
