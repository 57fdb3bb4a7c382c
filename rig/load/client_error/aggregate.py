"""The aggregate rate's bound by the window's edges (docs/client-error.md, R6-R14): tokens counted at
their arrival inside the window, every stream's. A late client shifts each user's timeline later by
its hold-backs (R6-R8); at each edge the figure trades the user's tokens within that shift (R9-R12),
plus the hold-back between requests (R13) and a drained window's end (R14)."""

from __future__ import annotations

import bisect
import functools
import math
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from rig.load import request_metrics
from rig.load.client_error.delays import CLOCK_RESOLUTION_S, LagProfile
from rig.load.client_error.holds import first_send_hold, scheduled_holds, span_end_s, turnaround_hold
from rig.load.client_error.inputs import FigureInputs
from rig.load.client_error.terms import Hold
from rig.load.client_error.timeline import NOTHING_TRADED, FirstChunks, Timeline, Traded, Unread
from rig.load.records import RequestRecord
from rig.load.request_metrics import e2e
from rig.load.wire import LAG_PERIOD_S


@dataclass(frozen=True)
class AggregateParts:
    """One process's part of the aggregate: its tokens in the window; every user's shift traded at the
    edges (R9, a share of the truth); what a late read alone trades at each edge (for R15); the
    hold-back between requests (R13); a drained window's end (R14); its users' timelines (None:
    unbounded, the tokens per chunk unknown)."""

    tokens: float
    edges_share: float
    read_late_traded: tuple[Traded, Traded]
    between_share: float
    drain_share: float
    timelines: list[Timeline] | None

    @property
    def by_edges_share(self) -> float:
        return self.edges_share + self.between_share + self.drain_share


UNBOUNDED_PARTS = AggregateParts(1.0, 1.0, (NOTHING_TRADED, NOTHING_TRADED), 0.0, 0.0, None)


@dataclass(frozen=True)
class ReadWaits:
    """R3 at the edges: every read's loop-pass wait of one process, by its read time."""

    waits: list[tuple[float, float]]  # (read time, wait_s), sorted

    @classmethod
    def of(cls, records: list[RequestRecord]) -> ReadWaits:
        return cls(sorted((t, r.chunk_wait(i)) for r in records if r.chunk_waits_us for i, t in enumerate(r.chunks)))

    @functools.cached_property
    def times_s(self) -> list[float]:
        return [t for t, _ in self.waits]

    @functools.cached_property
    def longest_s(self) -> float:
        return max((wait for _, wait in self.waits), default=0.0)

    def across_s(self, edge_s: float) -> float:
        """How far before the edge the bytes of a read recorded at or after it may have arrived (its
        wait, less how long after the edge it was read). Waits only move a time earlier."""
        after = self.waits[bisect.bisect_left(self.times_s, edge_s):bisect.bisect_right(self.times_s, edge_s + self.longest_s)]
        return max((wait - (t - edge_s) for t, wait in after if wait > t - edge_s), default=0.0)

    def longest_in_s(self, a_s: float, b_s: float) -> float:
        near = self.waits[bisect.bisect_left(self.times_s, a_s):bisect.bisect_right(self.times_s, b_s + self.longest_s)]
        return max((wait for _, wait in near), default=0.0)


def unseen_s(profile: LagProfile) -> float:
    """R9: a stretch under the monitor's period may fall between two of its samples: up to a period, unseen."""
    return max(profile.short().largest_s, LAG_PERIOD_S)


def edge_read_late_s(profile: LagProfile, waits: ReadWaits, edge_s: float) -> float:
    """R9: how late a read at the edge may be: a long stretch reaching it, an unseen short one, the
    clock's step, a read's wait reaching back across it."""
    return profile.run_late_s(edge_s) + unseen_s(profile) + CLOCK_RESOLUTION_S + waits.across_s(edge_s)


def forward_s(profile: LagProfile, waits: ReadWaits, edge_s: float, span_s: float) -> float:
    """R10: how much later than edge + span the tokens that arrived by then may have been read: the
    longest stretch met in the span (and an unseen one), then the read's place in its pass."""
    held_s = profile.longest_overlapping_s(edge_s, edge_s + span_s) + unseen_s(profile)
    return held_s + waits.longest_in_s(edge_s, edge_s + span_s + held_s)


def decode_rate_per_s(chunks: list[float], tokens: list[float]) -> float | None:
    """A stream's tokens per second after its first chunk, as read; None for fewer than two chunks apart."""
    return sum(tokens[1:]) / (chunks[-1] - chunks[0]) if len(chunks) > 1 and chunks[-1] > chunks[0] else None


def open_at_the_end(record: RequestRecord, run_end_s: float) -> bool:
    """A stream still running when the run's end stopped the reads (cut by it, or never ended)."""
    return record.error in (None, "cut_by_window") and not record.complete and (record.t_end is None or record.t_end >= run_end_s)


@dataclass(frozen=True)
class ProcessStreams:
    """R11: what one process's streams read, to stand in for what was never read past the run's end."""

    per_chunk: dict[int, list[float]]  # tokens of each chunk, by id(record)
    decode_per_s: dict[int, float | None]
    typical_decode_per_s: float  # the median decode rate (the fastest life's where none)
    fastest_per_s: float  # the fastest stream over its whole life, send to last chunk
    first_chunk_tokens: float
    longest_tokens: float  # the largest max_tokens (inf: one not known)

    @classmethod
    def of(cls, records: list[RequestRecord], tokens_per_chunk: float) -> ProcessStreams:
        per_chunk = {id(r): request_metrics.chunk_token_counts(r, tokens_per_chunk) for r in records}
        fastest = max((sum(per_chunk[id(r)]) / (r.chunks[-1] - r.t_send) for r in records if r.chunks and r.chunks[-1] > r.t_send),
                      default=0.0)
        decode = {id(r): decode_rate_per_s(r.chunks, per_chunk[id(r)]) for r in records}
        rates = [rate for rate in decode.values() if rate is not None]
        return cls(per_chunk, decode, float(np.median(rates)) if rates else fastest, fastest,
                   max((per_chunk[id(r)][0] for r in records if r.chunks), default=1.0),
                   math.inf if any(r.max_tokens is None for r in records) else max(r.max_tokens or 0 for r in records))

    def unread(self, requests: list[RequestRecord], run_end_s: float, closed_loop: bool) -> tuple[Unread, ...]:
        """R11: each stream the end cut (its max_tokens left, a first chunk if none came, the larger of
        its own and the median decode rate); a closed-loop user with none open, the next request it
        was about to send (the largest max_tokens, a first chunk, the median rate)."""
        open_at_end = [r for r in requests if open_at_the_end(r, run_end_s)]
        if not open_at_end and closed_loop:
            return (Unread(self.longest_tokens, self.first_chunk_tokens, self.typical_decode_per_s),)
        return tuple(Unread(math.inf if r.max_tokens is None else max(0.0, r.max_tokens - sum(self.per_chunk[id(r)])),
                            0.0 if r.chunks else self.first_chunk_tokens, max(self.decode_per_s[id(r)] or 0.0, self.typical_decode_per_s))
                     for r in open_at_end)


def user_timeline(requests: list[RequestRecord], inputs: FigureInputs, streams: ProcessStreams, read_late_s: float) -> Timeline:
    """One user's arrivals and hold-backs: an arrival schedule's own sends (R8), else its first send
    (R6) and its turnarounds (R7)."""
    window, profile = inputs.window, inputs.profile
    requests.sort(key=lambda r: r.t_send)
    arrivals = sorted((a, n) for r in requests for a, n in zip(r.chunks, streams.per_chunk[id(r)]))
    rate_per_s = sum(n for a, n in arrivals if window.start <= a <= window.end) / window.seconds
    times, cumulative = np.array([a for a, _ in arrivals]), np.concatenate(([0.0], np.cumsum([n for _, n in arrivals])))
    if all(r.t_scheduled is not None for r in requests):
        cut = any(span_end_s(r, window.run_end) >= window.run_end for r in requests)  # in flight when reads stopped
        return Timeline(times, cumulative, scheduled_holds(requests, read_late_s, window.run_end),
                        max(rate_per_s, streams.fastest_per_s) if cut else rate_per_s,
                        streams.unread(requests, window.run_end, False), scheduled=True)
    short = profile.short()
    end_read_late_s = max(short.mean_s, profile.run_short_mean_s)  # a request end read late by a short delay
    holds: list[Hold] = [first_send_hold(requests[0], profile, inputs.dispatcher)]
    holds += [turnaround_hold(previous, following, profile, end_read_late_s, inputs.pause_s)
              for previous, following in zip(requests, requests[1:])]
    return Timeline(times, cumulative, tuple(holds), rate_per_s, streams.unread(requests, window.run_end, True))


def traded_at_the_edges(timelines: list[Timeline], first_chunks: FirstChunks) -> float:
    """R9: a late client only moves tokens later, so the start edge gains what it trades and the end
    edge loses it: the figure moves by at most the larger of the two."""
    return max(Traded.of([line.traded[k] for line in timelines]).total(first_chunks) for k in (0, 1))


def between_share(inputs: FigureInputs) -> float:
    """R13: the client holds each user back between requests by the mean short delay: mu / mean E2E
    (at most once per window where no request sent inside it finished)."""
    mean_e2e_s = float(np.mean([e2e(d) for d in inputs.done] or [inputs.window.seconds]))
    return inputs.profile.short().mean_s / mean_e2e_s if mean_e2e_s > 0 else 1.0


def drain_share(inputs: FigureInputs, read_late_s: float) -> float:
    """R14: a window that closes when the last response was read closes when the client read it: its
    seconds move by up to the largest send's lateness plus how late that read was."""
    scheduled = [r for r in inputs.records if r.t_scheduled is not None]
    last = max((r.chunks[-1] for r in inputs.records if r.chunks), default=None)
    if not scheduled or last is None or inputs.window.end < last:
        return 0.0
    return (max(max(0.0, r.t_send - r.t_scheduled) for r in scheduled) + read_late_s) / inputs.window.seconds  # type: ignore[operator]


def aggregate_parts(inputs: FigureInputs) -> AggregateParts | None:
    """This process's part of the aggregate (R6-R14). A stream with no per-chunk counts counts at the
    run's tokens per chunk; a run that gives no such ratio leaves the figure unbounded."""
    window, profile = inputs.window, inputs.profile
    if not profile.samples_s:
        return None
    if not inputs.tokens_per_chunk_known and any(request_metrics.counted_at_the_run_ratio(r) for r in inputs.records):
        return UNBOUNDED_PARTS
    tokens = request_metrics.tokens_read_between(inputs.records, window.start, window.end, inputs.tokens_per_chunk)
    if tokens <= 0:
        return None
    waits = ReadWaits.of(inputs.records)
    late_s = (edge_read_late_s(profile, waits, window.start), edge_read_late_s(profile, waits, window.end))
    streams = ProcessStreams.of(inputs.records, inputs.tokens_per_chunk)
    users: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in inputs.records:
        users[r.user].append(r)
    timelines = [user_timeline(requests, inputs, streams, max(late_s)) for requests in users.values()]

    def traded(line: Timeline, edge_s: float, shift_s: float) -> Traded:
        return line.trade(edge_s, shift_s, window.run_end, forward_s(profile, waits, edge_s, shift_s))

    timelines = [replace(line, traded=(traded(line, window.start, late_s[0] + line.held_by_s(window.start)),
                                       traded(line, window.end, late_s[1] + line.held_by_s(window.end))))
                 for line in timelines]
    read_late_traded = (Traded.of([traded(line, window.start, late_s[0]) for line in timelines]),
                        Traded.of([traded(line, window.end, late_s[1]) for line in timelines]))
    return AggregateParts(tokens, traded_at_the_edges(timelines, inputs.first_chunks) / tokens, read_late_traded,
                          between_share(inputs), drain_share(inputs, late_s[1]), timelines)
