"""Each reported figure's client bound, built from the rules its declaration names
(rig.load.figures: `client_rule`, `pooled_rule`), and the bound of a figure over every process
(docs/client-error.md, R16)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from rig.load.client_error.inputs import FigureInputs
from rig.load.client_error.per_request import duration_sum_bound, quantile_bound, sample_lates_s
from rig.load.client_error.steady import steady_state_bound
from rig.load.client_error.terms import NO_BOUND, Bound, Term, share_of_reported
from rig.load.client_error.timeline import Timeline
from rig.load.figures import FIGURES, Figure
from rig.load.request_metrics import Done, decode_time, e2e, itl, tpot, ttft

# A request's samples: (value, first recorded time, second, the larger loop-pass wait of the two
# reads (R3); the send is no read: it has none)
Spans = Callable[[Done], list[tuple[float, float, float, float]]]


def first_wait_s(d: Done) -> float:
    return d.record.chunk_wait(0)


def last_wait_s(d: Done) -> float:
    return d.record.chunk_wait(len(d.record.chunks) - 1)


def decode_bound(inputs: FigureInputs) -> Bound:
    """R4 over the decode times (first chunk to last)."""
    return duration_sum_bound([(d.first, d.last, max(first_wait_s(d), last_wait_s(d))) for d in inputs.done
                               if d.decoded_tokens > 0 and decode_time(d) > 0], inputs.profile)


def prefill_bound(inputs: FigureInputs) -> Bound:
    """R4 over the TTFTs (send to first chunk)."""
    return duration_sum_bound([(d.sent, d.first, first_wait_s(d)) for d in inputs.done if d.record.prompt_tokens and ttft(d) > 0],
                              inputs.profile)


class Samples(NamedTuple):
    """One kind of per-request sample of one process, as every percentile figure of it reads them."""

    values: np.ndarray
    lates_s: list[float]  # R2: sample_lates_s of their times
    waits_s: np.ndarray  # R3
    fewest_tokens: float  # the fewest decoded tokens of a request (TPOT's per-token share)


def samples_of(inputs: FigureInputs, spans_of: Spans) -> Samples | None:
    """The samples `spans_of` makes of the process's requests; computed once per process and kind
    (several quantiles read them)."""
    memo = inputs.shared
    if spans_of not in memo:
        spans = [span for d in inputs.done for span in spans_of(d)]
        fewest = min((d.decoded_tokens for d in inputs.done if d.decoded_tokens >= 1), default=1.0)
        memo[spans_of] = Samples(np.asarray([value for value, _, _, _ in spans]),
                                 sample_lates_s([(a, b) for _, a, b, _ in spans], inputs.profile),
                                 np.asarray([wait for _, _, _, wait in spans]), fewest) if spans else None
    return memo[spans_of]


def percentile_bound(spans_of: Spans, quantile: float, per_token: bool = False) -> Callable[[FigureInputs], Bound]:
    """R5 over one kind of sample; TPOT divides a duration by the request's decoded tokens."""
    def bound_of(inputs: FigureInputs) -> Bound:
        samples = samples_of(inputs, spans_of)
        if samples is None:
            return NO_BOUND
        value = float(np.percentile(samples.values, 100 * quantile))
        return quantile_bound(samples.values, samples.lates_s, samples.waits_s, quantile,
                              1.0 / samples.fewest_tokens if per_token else 1.0, inputs.profile, value)
    return bound_of


def tpot_spans(d: Done) -> list[tuple[float, float, float, float]]:
    value = tpot(d)
    return [] if value is None else [(value, d.first, d.last, max(first_wait_s(d), last_wait_s(d)))]


def itl_spans(d: Done) -> list[tuple[float, float, float, float]]:
    chunks = d.record.chunks
    return [(gap, a, b, max(d.record.chunk_wait(i), d.record.chunk_wait(i + 1)))
            for i, (gap, a, b) in enumerate(zip(itl(d), chunks, chunks[1:]))]


# Each latency sample with the two recorded times it is the difference of (the values from
# rig.load.request_metrics, the one definition of each).
SPANS: dict[str, Spans] = {
    "ttft": lambda d: [(ttft(d), d.sent, d.first, first_wait_s(d))],
    "e2e": lambda d: [(e2e(d), d.sent, d.last, last_wait_s(d))],
    "tpot": tpot_spans,
    "itl": itl_spans,
}


def edges_bound(inputs: FigureInputs) -> Bound:
    """R9-R14: one process's aggregate by the edges' rule (the steady-state one is pooled: R15)."""
    parts = inputs.aggregate
    if parts is None:
        return NO_BOUND
    return Bound(share_of_reported(parts.by_edges_share),
                 (Term("R9", "edges_share", parts.edges_share), Term("R13", "between_share", parts.between_share),
                  Term("R14", "drain_share", parts.drain_share), Term("R9", "window_tokens", parts.tokens),
                  *hold_terms(parts.timelines or [], inputs.window.end)))


def hold_terms(timelines: list[Timeline], end_s: float) -> list[Term]:
    """The longest any user was held back by each source (R6-R8) up to the window's end: which
    hold-backs the edges traded."""
    longest: dict[str, float] = {}
    for line in timelines:
        by_rule: dict[str, float] = {}
        for hold in line.holds:
            if hold.start_s <= end_s:
                by_rule[hold.rule] = by_rule.get(hold.rule, 0.0) + hold.seconds
        for rule, seconds in by_rule.items():
            longest[rule] = max(longest.get(rule, seconds), seconds)
    return [Term(rule, "longest_user_hold_s", seconds) for rule, seconds in sorted(longest.items())]


# R4's summed durations, by the per-request samples a token-weighted figure is made of.
DURATIONS: dict[str, Callable[[FigureInputs], Bound]] = {"decode": decode_bound, "prefill": prefill_bound}


# One process's bound of a figure, by the rule its declaration names (`client_rule`).
PROCESS_RULES: dict[str, Callable[[Figure], Callable[[FigureInputs], Bound]]] = {
    "R4": lambda figure: DURATIONS[str(figure.samples)],
    "R5": lambda figure: percentile_bound(SPANS[str(figure.samples)], float(figure.quantile or 0.0),
                                          per_token=figure.samples == "tpot"),
    "R9": lambda figure: edges_bound,  # R9-R14: the aggregate by the window's edges
}
# Bounds read over every process at once, where a statistical one is tighter than the worst process's (R16).
POOLED_RULES: dict[str, Callable[[list[FigureInputs]], Bound]] = {"R15": steady_state_bound}

# One bound per reported figure and process, and the pooled ones: views of the registry.
BOUNDS: dict[str, Callable[[FigureInputs], Bound]] = {
    name: PROCESS_RULES[figure.client_rule](figure) for name, figure in FIGURES.items()}
POOLED: dict[str, Callable[[list[FigureInputs]], Bound]] = {
    name: POOLED_RULES[figure.pooled_rule] for name, figure in FIGURES.items() if figure.pooled_rule is not None}


def monitored(inputs: list[FigureInputs]) -> bool:
    """R16: every process that sent the window's requests has lag samples."""
    return bool(inputs) and all(i.profile.samples_s for i in inputs)


def bound(figure: str, inputs: list[FigureInputs]) -> Bound:
    """R16: the worst process's bound, or the pooled one where that is smaller; with the terms of the
    one taken. NO_BOUND where a process is not monitored or no process has samples of the figure."""
    if not monitored(inputs):
        return NO_BOUND
    bounds = [b for i in inputs if (b := BOUNDS[figure](i)).total is not None]
    if not bounds:
        return NO_BOUND
    worst = max(bounds, key=lambda b: b.total)  # type: ignore[arg-type,return-value]
    pooled = POOLED[figure](inputs) if figure in POOLED else NO_BOUND
    if pooled.total is not None and pooled.total < worst.total:  # type: ignore[operator]
        return Bound(pooled.total, (*pooled.terms, Term("R16", "pooled_over_processes_count", float(len(inputs)))))
    return Bound(worst.total, (*worst.terms, Term("R16", "worst_of_processes_count", float(len(bounds)))))
