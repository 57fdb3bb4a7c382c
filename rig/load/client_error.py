"""How far the client's own timing could move each reported figure: validity in units of error.

Every time the client records (a chunk's arrival, a request's end) is late by however long its
event loop took to get to the socket: an event's delay. The lag monitor (loadtests/locustfile.py)
is itself such an event, a kernel timer the loop waits on as on a socket (rig.load.kernel_timer),
read late by exactly that delay, so its samples inside the window are the delay distribution of
that process. What the monitor cannot meet is the wait a chunk has behind the other reads of the
same loop pass: an engine's step sends a chunk to every running stream at once, the loop reads them
one after another, and a probe due at a time of its own meets that queue only as often as the loop
is busy. So each chunk's read carries the most it can have waited behind the loop's own work
(RequestRecord.chunk_waits_us, w): a recorded time is late by at most w plus the monitor's delay
(which covers the wake-up from a real wait and what the loop's passes cannot tell). From it, per Locust process:

- `level` L: a delay that few events exceed (candidates: the monitor's p90, p99, p99.9 and max);
- the events later than L: short stretches (under the monitor's 10 ms period) in the share the
  monitor met them, since it meets them as often as any event does; and long stretches (a sample
  later than the period, taken as a period longer: it may have begun before the timer was due),
  each placed in time (`LagProfile.late_by`: from its earliest start to the monitor's next sample),
  so that it counts only at the recorded times it reached;
- the long stretches since the run began, in time, for the aggregate rate (each holds back the
  users whose request end or send it reached).

A figure's bound follows from how it is computed (rig.load.request_metrics, rig.load.metrics):

- a sum of per-request durations (decode time, TTFT) over N requests, each the difference of two
  recorded times, moves by N*mu (a bias, at most the mean short delay) + Z*sigma*sqrt(2N) (the
  spread of 2N independent delays, Z = 3.09) + the long stretches' delay at each recorded time
  they reached (a stretch is known in time: from its earliest start to the monitor's next sample);
- the aggregate rate (tokens whose arrival falls in the window, every stream's) moves as the
  client shifts each user's timeline later by what has held that user back so far (every long
  stretch before its first send: the spawn's pacing; at each of its requests' ends, the time to its
  next send (less a conversation's think time, which the ideal client waits too) and how late that
  end was read; a stretch that reached no end or send of the user
  moved none of its phase), plus how late a read at the edge may be. Two bounds, the smaller
  taken: each edge trades the user's tokens that arrived within that shift of it (past the run's
  end, what the user may still have brought stands in for what was never read: _Timeline.trade), the start only
  gaining and the end only losing, so by the larger of the two; plus the hold-back between
  requests (mu / mean E2E). And, in a steady window, the shifts' move across it: a window shifted
  whole counts what the ideal client's counted, up to the fluctuation of a sum of tokens in
  intervals of the users' shifts, read from every process's timelines at once across the window;
  what the users were held back inside the window is lost (rig.load.client_error._steady_state_moved);
- a percentile of per-request samples, each moved by at most e = L (TTFT, E2E, ITL; TPOT by
  L/(tokens-1)), except q of them that may move anywhere (the short-stretch share at its
  binomial 99.9th percentile, plus every long stretch's reach): the p-quantile stays between the
  (p-q)- and (p+q)-quantiles, widened by e. Its bound is e plus that spread, over the figure.

Each figure takes the smallest of its bounds over the candidate levels. The clock's resolution is
added to L. A bound is a share of the reported figure: the truth lies within reported * (1 +/- bound). A figure is usable when its bound is at most the scenario's `client_error_limit`
(1% by default); the bound is derived here and checked against the timed server's known timing
(tests/load/test_client_error.py).
"""

from __future__ import annotations

import bisect
import functools
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.stats import binom

from rig.load import request_metrics
from rig.load.records import RequestRecord
from rig.load.request_metrics import Done, decode_time, done_in_window, e2e, itl, tpot, ttft
from rig.load.summary import HEADLINE, LATENCY, ClientBound, Window
from rig.load.wire import LAG_PERIOD_S, ClientStats

# The records' clock (time.time()), and a float's step at today's epoch seconds (until 2038), the coarser
CLOCK_RESOLUTION_S = max(time.get_clock_info("time").resolution, math.ulp(2.0**31))
SAMPLE_EVENTS = 2  # a latency sample is the difference of two recorded times: either may be late
BAD_SAMPLE_QUANTILE = 0.999
SPREAD_Z = 3.09  # the normal 99.9th percentile: a sum of many independent delays stays within Z sd of its mean
UNBOUNDED = 1e3  # the client could have moved the figure by more than the figure itself


@dataclass(frozen=True)
class DelayLevel:
    """One candidate delay level L of one process, and the events it does not cover."""

    level: float  # seconds, the clock's resolution included
    beyond: float  # share of the monitor's samples from short stretches later than L


@dataclass(frozen=True)
class ShortDelays:
    """The delays of stretches under the monitor's period: rare ones (a quiet loop) are far from
    normal, so a bound on their sum carries the largest once besides the normal spread."""

    mean: float
    sd: float
    largest: float


@dataclass(frozen=True)
class LagProfile:
    """One Locust process's event delays inside the window (the lag monitor's samples)."""

    process: str | None
    samples: tuple[float, ...]  # sorted, seconds
    # Long stretches in time: (from, to, delay). An event recorded inside [from, to] may be late by
    # up to `delay`: from the stretch's earliest start (the wake-up, less the lag and a period) to
    # the monitor's next wake-up (by then the loop has read what the stretch held back).
    stretches: tuple[tuple[float, float, float], ...] = ()
    # Every long stretch of the process's life up to the window's end, in time as `stretches` (the
    # spawn's and the ramp's too: the spawn paces users from the time it woke): one that reached a
    # user's read of its last chunk, or its way to a send, held that user's next request back.
    held: tuple[tuple[float, float, float], ...] = ()
    # The mean and the largest short delay over the same span (the ramp is often busier than the window)
    short_mean_run: float = 0.0
    short_largest_run: float = 0.0

    @classmethod
    def of(cls, client: ClientStats, start: float, end: float) -> LagProfile:
        """The samples from `start` to `end`: the window, and after it as long as a request sent inside it was read."""
        timed = sorted((t, max(lag, 0.0)) for t, lag in client.lag)
        inside = sorted(lag for t, lag in timed if start <= t <= end)
        stretches, held = [], []
        for i, (wake, lag) in enumerate(timed):
            if lag <= LAG_PERIOD_S:
                continue
            after = timed[i + 1][0] if i + 1 < len(timed) else wake + LAG_PERIOD_S + lag
            stretch = (wake - lag - LAG_PERIOD_S, after, lag + LAG_PERIOD_S)
            if start - 1.0 <= wake <= end + 1.0:
                stretches.append(stretch)
            if wake <= end + 1.0:
                held.append(stretch)
        short = [lag for t, lag in timed if t <= end + 1.0 and lag <= LAG_PERIOD_S]
        return cls(client.process, tuple(inside), tuple(stretches), tuple(held), float(np.mean(short)) if short else 0.0,
                   max(short, default=0.0))

    def late_by(self, t: float) -> float:
        """How late a long stretch may have made an event recorded at t (0: none reached it)."""
        return _reached(self.stretches, t)

    def held_at(self, t: float) -> float:
        """`late_by` over the whole run: how long a stretch may have held up what the loop did at t."""
        return _reached(self.held, t)

    def held_between(self, a: float, b: float) -> float:
        """Seconds of the long stretches that overlapped [a, b]: what held up work due in it."""
        return sum(delay for begin, until, delay in self.held if begin <= b and until >= a)

    def held_within(self, a: float, b: float) -> float:
        """Seconds of the long stretches inside [a, b]: the most they held up events due in it (an
        event due at t in a stretch waits at most to its end, and no later than b if it was read by b)."""
        return sum(max(0.0, min(until, b) - max(begin, a)) for begin, until, _ in self.held if begin <= b and until >= a)

    def held_longest(self, a: float, b: float) -> float:
        """The longest of the long stretches that overlapped [a, b]: the most it held up one event due in it."""
        return max((delay for begin, until, delay in self.held if begin <= b and until >= a), default=0.0)

    def held_by(self, t: float) -> float:
        """Seconds of every long stretch begun by t."""
        return sum(delay for begin, _, delay in self.held if begin <= t)

    @functools.cached_property
    def short_stretch(self) -> float:
        """The longest stretch a short sample of the run may come from (a sample under the monitor's
        period may end a stretch begun up to a period before its timer was due): the most one event
        was held up outside the long stretches, the spawn's busy time included (read once per process:
        every user's first send asks for it)."""
        return max(self.short().largest, self.short_largest_run) + LAG_PERIOD_S

    def short(self) -> ShortDelays:
        """The short stretches' delay distribution: the samples under the monitor's period."""
        array = np.asarray(self.samples)
        short = array[array <= LAG_PERIOD_S]
        return ShortDelays(float(short.mean()) if short.size else 0.0, float(short.std()) if short.size > 1 else LAG_PERIOD_S,
                           float(short.max()) if short.size else LAG_PERIOD_S)

    def levels(self) -> list[DelayLevel]:
        """The candidates: L at the monitor's p90, p99, p99.9 and max. A stretch shorter than the
        monitor's period is met by the monitor as often as by any event, so those samples stand for
        the events' delays. A sample later than the period comes from one stretch that may have begun
        up to a period before the timer was due: it counts as that much longer, and as one stretch
        that may reach every user. Beyond the max (plus a period, when every stretch was short: one
        may have fallen between two samples) no event is late."""
        if not self.samples:
            return []
        array = np.asarray(self.samples)
        long = array > LAG_PERIOD_S
        stretch = array + LAG_PERIOD_S * long  # the longest stretch each sample may have come from
        # (stretches reach a second either side of the window: a request sent inside it is read after it)
        top = max([float(stretch.max()), *(delay for _, _, delay in self.stretches)]) + (0.0 if long.any() else LAG_PERIOD_S)
        out = []
        for level in (*(float(v) for v in np.percentile(array, [90, 99, 99.9])), top):
            later = stretch > level
            out.append(DelayLevel(level=level + CLOCK_RESOLUTION_S, beyond=float((later & ~long).mean())))
        return out


def _reached(stretches: tuple[tuple[float, float, float], ...], t: float) -> float:
    """The longest delay of the stretches (sorted, each (from, to, delay)) that reached time t."""
    i = bisect.bisect_right(stretches, (t, math.inf, math.inf))
    return max((delay for begin, until, delay in stretches[max(0, i - 2):i] if begin <= t <= until), default=0.0)


def _late_samples(times: list[tuple[float, float]], lv: DelayLevel, profile: LagProfile) -> int:
    """How many of the samples (each the difference of two recorded times) may be later than L: the
    short stretches' share at its binomial 99.9th percentile (a sample is two times), and every
    sample one of whose times a long stretch later than L reached (known in time)."""
    n = len(times)
    share = min(1.0, SAMPLE_EVENTS * lv.beyond)
    short = int(binom.ppf(BAD_SAMPLE_QUANTILE, n, share)) if share > 0 else 0
    reached = sum(1 for a, b in times if max(profile.late_by(a), profile.late_by(b)) > lv.level) if profile.stretches else 0
    return min(n, short + reached)


def share_text(bound: float, limit: float | None = None) -> str:
    """A bound as the reports print it: a share of the figure; from 100% on, the client could have
    made the figure up, and a larger number says nothing more. Beside its `limit`, with the digits
    that tell them apart (5.04% over a 5% limit, not "5%")."""
    if bound >= 1:
        return "over 100%"
    digits = 2
    while limit is not None and digits < 6 and bound != limit and f"{100 * bound:.{digits}g}" == f"{100 * limit:.{digits}g}":
        digits += 1
    return f"{100 * bound:.{digits}g}%"


def _share_of_reported(share_of_truth: float) -> float:
    """A bound stated as a share of the truth, restated as one of the reported figure."""
    return share_of_truth / (1 - share_of_truth) if share_of_truth < 1 else UNBOUNDED


def _duration_sum_bound(spans: list[tuple[float, float, float]], profile: LagProfile) -> float | None:
    """A rate over per-request durations (tokens / their sum). Each duration is the difference of two
    recorded times of one stream, each late by a short-stretch delay (mean mu, sd sigma, the
    monitor's samples under its period) or held up by a long stretch. The sum moves by at most
    a = N*mu (a bias between the two ends, at most the mean delay) + Z*sigma*sqrt(2N) (their
    spread, at the normal 99.9th percentile) + the long stretches where they reached it, so the
    rate by a / (sum - a) of the reported rate. A long stretch counts where it reached one of the
    recorded times (each of the `spans`' two ends is checked against the stretches in time), and
    each span's wait in its loop pass (the larger of its two ends') once."""
    total = sum(b - a for a, b, _ in spans)
    if not spans or total <= 0 or not profile.samples:
        return None
    short = profile.short()
    n = len(spans)
    reached = sum(profile.late_by(a) + profile.late_by(b) for a, b, _ in spans)
    in_pass = sum(wait for _, _, wait in spans)
    moved = n * short.mean + SPREAD_Z * short.sd * math.sqrt(SAMPLE_EVENTS * n) + short.largest + reached + in_pass
    return moved / (total - moved) if moved < total else UNBOUNDED


def _quantile_bound(samples: list[float], times: list[tuple[float, float]], waits: list[float], quantile: float,
                    sample_error: float, profile: LagProfile, value: float) -> float | None:
    """A p-quantile of samples each moved by at most e = sample_error * (L + its wait in its loop
    pass), save a share q of them that may move anywhere: the truth's p-quantile lies between the
    (p-q)-quantile of (sample - e) and the (p+q)-quantile of (sample + e); the bound is the farther of
    the two from the reported value, over the value, at the best L (with no waits: e + the spread
    between the (p-q), p and (p+q) quantiles)."""
    if not samples or value <= 0:
        return None
    array, slack = np.asarray(samples), np.asarray(waits)
    mid = float(np.percentile(array, 100 * quantile))
    bounds = []
    for lv in profile.levels():
        q = _late_samples(times, lv, profile) / len(samples)
        if q > 0 and (quantile - q < 0 or quantile + q > 1):
            continue  # as many samples may be late as lie on one side of the quantile: nothing holds it but the top level
        moved = sample_error * (lv.level + slack)
        low = float(np.percentile(array - moved, 100 * max(quantile - q, 0.0)))
        high = float(np.percentile(array + moved, 100 * min(quantile + q, 1.0)))
        bounds.append(max(high - mid, mid - low) / value)
    return min(bounds, default=UNBOUNDED)  # the top level (no sample late beyond it) is a candidate whenever nothing outlasts it


@dataclass(frozen=True)
class AggregateParts:
    """One process's share of the aggregate and what bounds it: its tokens in the window; every user's
    shift traded at both edges (a share of the truth); the tokens a late read alone trades at each
    edge; the hold-back between requests (a share); its users' timelines (None: unbounded, the
    tokens per chunk unknown)."""

    tokens: float
    by_edges: float
    read_late_traded: tuple[_Traded, _Traded]
    between: float
    timelines: list[_Timeline] | None


def aggregate_parts(inputs: FigureInputs) -> AggregateParts | None:
    """Tokens counted at their arrival inside the window, every stream's. A late client shifts a
    user's timeline later by what held that user back: before its first send, what held back its
    batch of the spawn (_first_send_late); at each of its requests' ends, the time from the end
    as read to the next request's send (plus how late that end may have been read: a long stretch
    that reached it, its wait in its loop pass, the mean short delay of the run so far or of the
    window, the larger); after a failed request only to the next request's start (the new
    connection's handshake is the server's) plus the long stretches over that pending connect.
    At each edge the figure then trades the user's tokens that arrived within that shift S_u of the
    edge, S_u also counting how late a read at the edge may be (a long stretch reaching it, the
    largest short delay or a monitor period, a read's wait in its loop pass reaching back across
    it), counted by their reads up to as far past S_u as a stretch met there held them (forward);
    past the run's end nothing was read: twice the user's mean rate in the window over that span
    stands in for it, and no less than its streams the end cut could bring then (_Timeline.trade).
    Inside the run a stretch shifts only the users it reached at a request's end or on the way to a
    send: a user mid-stream reads what it held back when it ends, the server's schedule unmoved.
    An arrival schedule's requests (open loop, trace) are each sent at their arrival by the ideal
    client, whichever user is free: a request's shift is its own send's lateness, never its user's
    earlier ones (_scheduled_shifts).
    The client also holds each user back between requests inside the window (mu / mean E2E: the
    server idles). A stream with no per-chunk counts counts at the run's tokens per chunk; a run
    that gives no such ratio (no stream finished with its usage) leaves the figure unbounded.
    Returns this process's part: the edges' bound and what the steady-state bound, read over every
    process at once (_aggregate_at_steady_state), needs of it."""
    done, window, profile = inputs.done, inputs.window, inputs.profile
    if not profile.samples:
        return None
    if not inputs.ratio_known and any(request_metrics.counted_at_the_run_ratio(r) for r in inputs.records):
        return AggregateParts(1.0, 1.0, (NOTHING_TRADED, NOTHING_TRADED), 0.0, None)  # the whole figure: unbounded
    per_chunk = {id(r): request_metrics.chunk_token_counts(r, inputs.ratio) for r in inputs.records}
    tokens = request_metrics.tokens_read_between(inputs.records, window.start, window.end, inputs.ratio)
    if tokens <= 0:
        return None
    short = profile.short()
    waits = sorted((t, r.chunk_wait(i)) for r in inputs.records if r.chunk_waits_us for i, t in enumerate(r.chunks))
    wait_times = [t for t, _ in waits]
    longest_wait = max((wait for _, wait in waits), default=0.0)

    def in_pass_across(edge: float) -> float:
        """How far before the edge the bytes of a read recorded at or after it may have arrived (its
        wait in its loop pass, less how long after the edge it was read): a token that arrived on
        one side of the edge recorded on the other. Waits only move a time earlier."""
        after = waits[bisect.bisect_left(wait_times, edge):bisect.bisect_right(wait_times, edge + longest_wait)]
        return max((wait - (t - edge) for t, wait in after if wait > t - edge), default=0.0)

    per_end = max(short.mean, profile.short_mean_run)  # a request end read late by a short delay, the run's or the window's

    # a stretch under the monitor's period may fall between two of its samples: up to a period, unseen
    unseen = max(short.largest, LAG_PERIOD_S)

    def read_late(edge: float) -> float:
        return profile.held_at(edge) + unseen + CLOCK_RESOLUTION_S + in_pass_across(edge)

    def forward(edge: float, span: float) -> float:
        """How much later than edge + span the tokens that arrived by then may have been read: a
        token that crossed the edge arrived within `span` after it, and a stretch that held the loop
        then held its read back (the tokens read within `span` of the edge are no count of them: a
        stall just after an edge moves every such read beyond it). A read waits out the stretch its
        bytes met, then its place in the pass."""
        held = profile.held_longest(edge, edge + span) + unseen
        near = waits[bisect.bisect_left(wait_times, edge):bisect.bisect_right(wait_times, edge + span + held + longest_wait)]
        return held + max((wait for _, wait in near), default=0.0)  # the waits of the reads that came then

    late = (read_late(window.start), read_late(window.end))
    # Per user: its arrivals (time, tokens) in order, and the hold-backs of its timeline, each (from when, seconds)
    users: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in inputs.records:
        users[r.user].append(r)
    # An arrival user idles between its requests, so its mean rate in the window is no measure of the
    # tokens a request the run's end cut would have brought: the fastest stream of the run stands in
    # (the mean rate, idle time included, undercounts what a cut stream's late send loses).
    # (over each request's whole life, send to last chunk: a backlog read in a burst compresses its gaps, not its life)
    @functools.cache
    def streaming() -> float:
        return max((sum(per_chunk[id(r)]) / (r.chunks[-1] - r.t_send) for r in inputs.records
                    if r.chunks and r.chunks[-1] > r.t_send), default=0.0)

    # What a user may still have brought past the run's end (_Unread): each stream the end cut, at the
    # larger of its own decode rate and the process's median one (a stream with fewer than two chunks:
    # the median), one that had not begun its first chunk at once (the largest first chunk of the
    # process); a closed-loop user with no stream open, the next request it was about to send.
    decode_of = {id(r): _decode_rate(r.chunks, per_chunk[id(r)]) for r in inputs.records}
    decodes = [rate for rate in decode_of.values() if rate is not None]
    typical_decode = float(np.median(decodes)) if decodes else streaming()
    first_chunk = max((per_chunk[id(r)][0] for r in inputs.records if r.chunks), default=1.0)
    longest = math.inf if any(r.max_tokens is None for r in inputs.records) else max(r.max_tokens or 0 for r in inputs.records)

    def unread(requests: list[RequestRecord], closed_loop: bool) -> tuple[_Unread, ...]:
        open_at_the_end = [r for r in requests if _open_at_the_end(r, window.run_end)]
        if not open_at_the_end and closed_loop:
            # its next send was due at the run's end at the latest (else it had sent it), the ideal
            # client's its shift before: a think time the records cannot tell from a turnaround
            # (a conversation's last turn starts the next at once) counts as none
            return (_Unread(longest, first_chunk, typical_decode),)
        return tuple(_Unread(math.inf if r.max_tokens is None else max(0.0, r.max_tokens - sum(per_chunk[id(r)])),
                             0.0 if r.chunks else first_chunk, max(decode_of[id(r)] or 0.0, typical_decode))
                     for r in open_at_the_end)

    timelines: list[_Timeline] = []
    for requests in users.values():
        requests.sort(key=lambda r: r.t_send)
        arrivals = sorted((a, n) for r in requests for a, n in zip(r.chunks, per_chunk[id(r)]))
        user_rate = sum(n for a, n in arrivals if window.start <= a <= window.end) / window.seconds
        times, cumulative = np.array([a for a, _ in arrivals]), np.concatenate(([0.0], np.cumsum([n for _, n in arrivals])))
        if all(r.t_scheduled is not None for r in requests):  # an arrival schedule's: each send anchored to its arrival
            cut = any(_span_end(r, window.run_end) >= window.run_end for r in requests)  # in flight when reads stopped
            timelines.append(_Timeline(times, cumulative, _scheduled_shifts(requests, max(late), window.run_end),
                                       max(user_rate, streaming()) if cut else user_rate, unread(requests, False), scheduled=True))
            continue
        first = requests[0]
        holds = [(first.t_send, _first_send_late(first, profile, inputs.dispatcher))]
        for previous, following in zip(requests, requests[1:]):
            # the response's end as read (after the last chunk: the usage, [DONE]), where the next send begins
            ended = next(t for t in (previous.t_end, previous.t_last, previous.t_send) if t is not None)
            late_read = profile.held_at(ended) + (previous.chunk_wait(len(previous.chunks) - 1) if previous.chunks else 0.0)
            # to the next send: the user's turnaround and its building of the request. After a failed
            # request the pool opens a new connection, whose handshake is the server's (a dropped SYN is
            # retried after 1 s, then 3 s; vLLM drops some at 3000 users): then to the user's start only.
            # (a stretch over that pending connect is still the client's)
            began = following.t_start if previous.error is not None and following.t_start is not None else following.t_send
            pending = profile.held_between(began, following.t_send) if began < following.t_send else 0.0
            # the next turn of a conversation waits the scenario's think time: the ideal client's too
            paused = inputs.pause_s if _next_turn(previous, following) else 0.0
            holds.append((ended, max(0.0, began - ended - paused) + late_read + per_end + pending))
        timelines.append(_Timeline(times, cumulative, tuple(holds), user_rate, unread(requests, True)))

    def traded(line: _Timeline, edge: float, shift: float) -> _Traded:
        return line.trade(edge, shift, window.run_end, forward(edge, shift))

    timelines = [replace(line, traded=(traded(line, window.start, late[0] + line.held_by(window.start)),
                                       traded(line, window.end, late[1] + line.held_by(window.end))))
                 for line in timelines]
    read_late_traded = (_Traded.of([traded(line, window.start, late[0]) for line in timelines]),
                        _Traded.of([traded(line, window.end, late[1]) for line in timelines]))

    # No request sent inside the window finished: no user went back for another inside it, so the
    # hold-back between requests happened at most once per window.
    mean_e2e = float(np.mean([e2e(d) for d in done] or [window.seconds]))
    between = short.mean / mean_e2e if mean_e2e > 0 else 1.0
    by_edges = _traded_at_the_edges(timelines, inputs.first_chunks) / tokens + between + _drain_moved(inputs, late[1])
    return AggregateParts(tokens, by_edges, read_late_traded, between, timelines)


OPENING_EVENTS = 2  # the opening call's connect completing (its request is written at once) and its answer read


def _first_send_late(first: RequestRecord, profile: LagProfile, master: LagProfile | None) -> float:
    """How much later than the ideal client a closed-loop user sent its first request.
    Where its first record says which round of the spawn started it (t_dispatched: the master's
    spawn message on a worker of a distributed run, the local runner's own round in one process),
    the round's pacer (the master; in one process the process itself) and the user's own way from
    the round to its send are counted apart: a worker's stall holds back the batch it met, not the
    later ones, which the master paces on its own clock (a worker that stalls at each of the
    master's batches leaves their spacing as it was: charged to every later batch, its stalls would
    add up to a bound many times the error). So:
    - the pacer's stretches before the round, the first round's own wake-up (the longest stretch a
      short sample of the pacer may come from: dispatch_behind counts from that round, so a stretch
      over it is counted nowhere else), and every late wake-up of its pace after it, however short
      (dispatch_behind: short late wake-ups at every round add up; a long stretch may count in
      both);
    - from the round to the send, everything is the client's (spawning the batch, the users before
      this one, building the request), except the server's answer to the opening call: its time,
      less what the process's stretches held of it (a stretch counts its part inside the call only:
      the spawn's own ends as the first users begin) and, at each of its two wake-ups, the longest
      stretch a short sample of the run may come from (`LagProfile.short_stretch`; the spawn is the
      loop's busiest time, so its mean short delay is no measure of the opening calls'; nor is the
      window's largest: stretches nearly back to back during the spawn alone are read as about half
      their length).
    A worker whose master wrote no samples has its own stretches in the master's place: its
    dispatch_behind still holds every late round after the first.
    Otherwise (records that do not say): the spawn paces the users from when it woke, so every
    stretch since the process began delays every batch after it, sends it never reached included,
    and the master's too; a pace's late wake-ups under the monitor's period are not counted."""
    if first.t_dispatched is not None and first.dispatch_behind is not None:
        pacer = master if master is not None else profile
        late = pacer.held_by(first.t_dispatched) + pacer.short_stretch + first.dispatch_behind + first.t_send - first.t_dispatched
        if first.opening is not None:
            began, read = first.opening
            late -= max(0.0, read - began - profile.held_within(began, read) - OPENING_EVENTS * profile.short_stretch)
        return late
    return profile.held_by(first.t_send) + (master.held_by(first.t_send) if master is not None else 0.0)


def _scheduled_shifts(requests: list[RequestRecord], read_late: float, run_end: float) -> tuple[tuple[float, float], ...]:
    """An arrival-driven user's shifts as hold-backs (from when, change): the ideal client sends each
    arrival at its scheduled time (its pool has a free user whenever the real one has: it frees them
    no later), so a request runs behind it by at most s = sent - scheduled, a queued arrival's wait
    for a free user included, and the shift does not carry over to the next request. A token of the
    request crosses an edge E only if E lies after the arrival and no later than its last chunk (its
    ideal time is at least the scheduled one), and a read late by up to `read_late` reaches back as
    far: the shift at E is the largest of the requests whose span (scheduled - read_late, last chunk]
    holds E (a queued arrival's span overlaps the request before it), else nothing."""
    # each span up to and including its end (it lapses a clock step after): the run's end cuts at run_end exactly
    spans = sorted((r.t_scheduled - read_late, _span_end(r, run_end) + CLOCK_RESOLUTION_S,  # type: ignore[operator]
                    max(0.0, r.t_send - r.t_scheduled)) for r in requests)
    changes = sorted({t for start, end, _ in spans for t in (start, end)})
    holds, level, active = [], 0.0, 0
    for t in changes:  # the largest shift of the spans open from t on (a span holds from its start to its end)
        while active < len(spans) and spans[active][0] <= t:
            active += 1
        shift = max((s for start, end, s in spans[:active] if start <= t < end), default=0.0)
        if shift != level:
            holds.append((t, shift - level))
            level = shift
    return tuple(holds)


def _drain_moved(inputs: FigureInputs, read_late: float) -> float:
    """A window that closes when the last response was read (a trace replay's drain) closes when the
    client read it: the ideal client, whose last request ran behind the real one's by its shift,
    read it earlier, and the figure's seconds move by up to the largest shift plus how late that
    read was (a stall at the last arrival delays that read). As a share of the window; 0 for a window
    closed by anything else."""
    scheduled = [r for r in inputs.records if r.t_scheduled is not None]
    last = max((r.chunks[-1] for r in inputs.records if r.chunks), default=None)
    if not scheduled or last is None or inputs.window.end < last:
        return 0.0
    return (max(max(0.0, r.t_send - r.t_scheduled) for r in scheduled) + read_late) / inputs.window.seconds  # type: ignore[operator]


def _span_end(record: RequestRecord, run_end: float) -> float:
    """Until when a request may still bring tokens: its end as read; one with no end (the run's end
    cut it, before or after its first chunk) to the run's end, where reads stopped."""
    ends = [t for t in (record.t_end, record.t_last, *record.chunks[-1:]) if t is not None]
    return max(ends) if record.t_end is not None and record.error is None else max([run_end, *ends])


def _traded_at_the_edges(timelines: list[_Timeline], first_chunks: _FirstChunks) -> float:
    """The users' shifts traded at both edges: a late client only moves tokens later, so the start
    edge gains what it trades and the end edge loses it; the figure moves by their difference, at
    most the larger of the two."""
    return max(_Traded.of([line.traded[k] for line in timelines]).total(first_chunks) for k in (0, 1))


def _aggregate_bound(inputs: FigureInputs) -> float | None:
    """One process's aggregate by the edges' rule (the steady-state one is pooled: POOLED)."""
    parts = inputs.aggregate
    return None if parts is None else _share_of_reported(parts.by_edges)


def _aggregate_at_steady_state(inputs: list[FigureInputs]) -> float | None:
    """The aggregate over every process at a steady state: the shifts' move across the window, read
    from all users' timelines at once (the processes' fluctuations add up as one sum's: their
    maxima do not), plus what late reads trade at the edges and the hold-back between requests.
    None where the window is not steady or the timelines cannot show it."""
    parts = [i.aggregate for i in inputs]
    if not inputs or not inputs[0].window.steady or any(p is None or p.timelines is None for p in parts):
        return None
    window = inputs[0].window
    moved = _steady_state_moved([line for p in parts for line in p.timelines], window, inputs[0].first_chunks)
    if moved is None:
        return None
    first_chunks = inputs[0].first_chunks
    traded = max(_Traded.of([p.read_late_traded[k] for p in parts]).total(first_chunks) for k in (0, 1))
    return _share_of_reported((moved + traded) / sum(p.tokens for p in parts) + max(p.between for p in parts))


def _decode_rate(chunks: list[float], tokens: list[float]) -> float | None:
    """A stream's tokens per second after its first chunk, as read (a backlog read in a burst only
    makes it faster); None for fewer than two chunks apart."""
    return sum(tokens[1:]) / (chunks[-1] - chunks[0]) if len(chunks) > 1 and chunks[-1] > chunks[0] else None


def _open_at_the_end(record: RequestRecord, run_end: float) -> bool:
    """A stream still running when the run's end stopped the reads (cut by it, or never ended; one
    that finished, however late, brings nothing more)."""
    return record.error in (None, "cut_by_window") and not record.complete and (record.t_end is None or record.t_end >= run_end)


@dataclass(frozen=True)
class _Unread:
    """A stream the run's end cut, or the next one a user was about to send: what it may have brought
    past that end."""

    remaining: float  # tokens it had still to bring: its max_tokens less those read (inf: not known)
    first: float  # tokens at once: its first chunk, where none had come (0: it was streaming)
    rate: float  # tokens per second once streaming

    def within(self, seconds: float, first: bool = True) -> float:
        """The most it brings in `seconds` after the run's end: its first chunk (`first` False: left
        out), then its decode rate doubled (the margin of the users' own rates), never more than it had
        still to bring."""
        return min(self.remaining, (self.first if first else 0.0) + 2 * self.rate * seconds)


@dataclass(frozen=True)
class _Traded:
    """What a user's shift trades at an edge: tokens (those read within it, and past the run's end
    what its streams bring once begun), the first chunks of streams not begun that may have come past
    the run's end (apart: _FirstChunks caps how many), and how far past that end its span reached."""

    tokens: float
    first: float
    beyond: float

    @classmethod
    def of(cls, parts: list[_Traded]) -> _Traded:
        return cls(sum(p.tokens for p in parts), sum(p.first for p in parts), max((p.beyond for p in parts), default=0.0))

    def total(self, first_chunks: _FirstChunks) -> float:
        return self.tokens + min(self.first, first_chunks.most_within(self.beyond))


NOTHING_TRADED = _Traded(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class _FirstChunks:
    """The run's first chunks as read (every process's, sorted) and the most tokens one carried. At a
    steady state (every user had begun a stream before the window opened, so the engine's way of
    beginning streams, one by one or a batch at a time, was seen) no more streams begin within a span
    past the run's end than twice the most that began within any span as long inside the run; before
    it (a late round of the spawn may begin all its streams together, past the run's end) no cap."""

    times: np.ndarray
    tokens: float
    steady: bool  # a closed loop's steady window (metrics.steady_window)

    def most_within(self, seconds: float) -> float:
        if not self.steady or not len(self.times):  # (a steady window follows every user's first chunk)
            return math.inf
        if seconds <= 0:
            return 0.0
        begun = np.searchsorted(self.times, self.times + seconds, side="right") - np.arange(len(self.times))
        return 2 * float(begun.max()) * self.tokens


@dataclass(frozen=True)
class _Timeline:
    """One user's arrivals as read (times sorted; cumulative tokens, from 0) and the hold-backs of its
    timeline, each (from when, seconds)."""

    times: np.ndarray
    cumulative: np.ndarray
    holds: tuple[tuple[float, float], ...]
    rate: float  # its tokens per second in the window
    unread: tuple[_Unread, ...] = ()  # what it may have brought past the run's end
    traded: tuple[_Traded, _Traded] = (NOTHING_TRADED, NOTHING_TRADED)  # within its shift of each edge (start, end)
    scheduled: bool = False  # an arrival schedule's user: its shifts are its requests' own (_scheduled_shifts)

    def held_by(self, t: float) -> float:
        return sum(seconds for when, seconds in self.holds if when <= t)

    def tokens_between(self, a: float, b: float) -> float:
        return float(self.cumulative[np.searchsorted(self.times, b, side="right")] - self.cumulative[np.searchsorted(self.times, a)])

    def trade(self, edge: float, shift: float, run_end: float, forward: float = 0.0) -> _Traded:
        """Its tokens within `shift` of the edge, and `forward` beyond (where reads of tokens that
        arrived within `shift` after it were held back), and past the run's end what was never read:
        twice its mean rate in the window over that span, and no less than what it may have brought
        in it (_Unread). Its rate alone misses a user whose stream had not begun inside the window (a
        rate of 0 there), and users in step, whose streams all begin together: a round of the spawn
        sent late with a long TTFT, a stall over the sends of users in step inside a steady window,
        conversation users thinking at the run's end while the ideal client streams. A stream not
        begun is charged a first chunk, apart (_Traded.first): summed over the users, no more first
        chunks count than a steady run read within so long a span (_FirstChunks)."""
        # what never was read: tokens that arrived within `shift` after the edge but past the run's end
        # (an estimate of arrivals, so the reads' `forward` does not widen it), or before it and read
        # past it (at most those of `shift`)
        beyond = max(0.0, edge + shift - run_end) or min(shift, max(0.0, edge + shift + forward - run_end))
        read = self.tokens_between(edge - shift, min(edge + shift + forward, max(run_end, edge + shift)))
        if beyond <= 0:
            return _Traded(read, 0.0, 0.0)
        rated = 2 * self.rate * beyond
        streaming = max(rated, sum(stream.within(beyond, first=False) for stream in self.unread))
        beginning = max(rated, sum(stream.within(beyond) for stream in self.unread))
        return _Traded(read + streaming, beginning - streaming, beyond)

    def cycle(self, run_end: float) -> float:
        """The longest stretch between its first send, its requests' ends and the run's end: a
        request and its turnaround, or a stream the run's end cut."""
        return float(np.max(np.diff([when for when, _ in self.holds] + [run_end])))

    def counts(self, starts: np.ndarray, seconds: float) -> np.ndarray:
        """Its tokens read in [start, start + seconds), for each start."""
        return self.cumulative[np.searchsorted(self.times, starts + seconds)] - self.cumulative[np.searchsorted(self.times, starts)]


STEADY_GRID = 10_000  # where the shifted counts are read across the window (3 ms apart over 30 s)


def _steady_state_moved(timelines: list[_Timeline], window: Window, first_chunks: _FirstChunks) -> float | None:
    """How many tokens the users' hold-backs moved across the window's edges, at a steady state.
    A user's timeline runs behind the ideal client's by a_u at the window's start (what held it back
    before: the spawn's pacing, its requests' turnarounds) and by a_u + d_u at its end (d_u: the
    hold-backs inside the window), so the window counts the ideal's tokens from W0 - a_u to W1 - a_u -
    d_u: the figure moves by F(W0) - G(W1), F(t) = sum over users of its tokens in [t - a_u, t), G(t)
    the same over [t - a_u - d_u, t). At a steady state F and G at the edges are draws of the same
    sums at any time, which the users' timelines as read give across the window (F~(t): their tokens
    in [t, t + a_u), read a_u later; an interval's place in a stationary run does not change what it
    holds): the move lies within [min F~ - max G~, max F~ - min G~]. Before the window the shifts
    cancel between the edges (trading every user's a_u at both edges would bound 3000 streams at
    many times their error); inside it the hold-backs d_u are lost tokens, G~ > F~.
    The stretch read must hold every phase of a user's cycle: users whose request and turnaround
    outlast it (long requests the run's end cuts, admitted together in one of the spawn's batches
    and in step ever after, read nowhere near their turnaround) keep their own shifts traded at both
    edges. None where the timelines as read cannot show those sums over half the window (shifts as
    long as the window leave no steady stretch to read them from)."""
    if not timelines or any(line.scheduled for line in timelines):
        return None  # an arrival schedule's shifts do not accumulate: the edges' rule reads them (aggregate_parts)
    at_start = [line.held_by(window.start) for line in timelines]
    spans = [(before, line.held_by(window.end) - before) for line, before in zip(timelines, at_start)]
    last = window.run_end - max(before + inside for before, inside in spans)
    if last - window.start < window.seconds / 2:
        return None
    step = (last - window.start) / STEADY_GRID
    grid = window.start + step * np.arange(STEADY_GRID)  # each point with the step after it: [W0, last)
    # Between two points of the grid an interval holds at most what the one a step longer from the
    # first point holds, and at least what the one a step shorter from the second holds: the sums'
    # range over every time, not only the grid's (intervals shorter than its step would hide in it).
    most_before, most_through = np.zeros(STEADY_GRID), np.zeros(STEADY_GRID)
    least_before, least_through = np.zeros(STEADY_GRID), np.zeros(STEADY_GRID)
    outlasting = []
    for line, (before, inside) in zip(timelines, spans):
        if line.cycle(window.run_end) > last - window.start:
            outlasting.append(line)
            continue
        most_before += line.counts(grid, before + step)
        most_through += line.counts(grid, before + inside + step)
        least_before += line.counts(grid + step, max(before - step, 0.0))
        least_through += line.counts(grid + step, max(before + inside - step, 0.0))
    moved = max(most_through.max() - least_before.min(), most_before.max() - least_through.min())
    return float(moved + _traded_at_the_edges(outlasting, first_chunks))


@dataclass(frozen=True)
class FigureInputs:
    """The completed requests one process sent inside the window, and its delay profile."""

    done: list[Done]
    profile: LagProfile
    window: Window
    records: list[RequestRecord]  # every request of the process (the aggregate counts cut streams too)
    ratio: float  # the run's tokens per chunk where a stream did not say (rig.load.request_metrics)
    ratio_known: bool  # some stream of the run finished with its usage (else the ratio is a guess of 1)
    # The Locust master's delays in a distributed run (None: one process, or not written): it
    # dispatches the users, so a stall of its loop before a user's first send started it late too.
    dispatcher: LagProfile | None = None
    pause_s: float = 0.0  # the scenario's think time between a conversation's turns (rig.load.scenarios)
    first_chunks: _FirstChunks = field(default_factory=lambda: _FirstChunks(np.array([]), 1.0, False))  # the run's

    @functools.cached_property
    def aggregate(self) -> AggregateParts | None:
        """This process's part of the aggregate (computed once: its bound and the pooled one read it)."""
        return aggregate_parts(self)


def _next_turn(previous: RequestRecord, following: RequestRecord) -> bool:
    """The following request is the next turn of the same conversation (ConversationUser thinks
    before it; after a conversation's last turn or a failed one it starts the next at once)."""
    return (previous.conversation is not None and following.conversation == previous.conversation
            and previous.turn is not None and following.turn == previous.turn + 1)


def _first_wait(d: Done) -> float:
    return d.record.chunk_wait(0)


def _last_wait(d: Done) -> float:
    return d.record.chunk_wait(len(d.record.chunks) - 1)


def _decode(inputs: FigureInputs) -> float | None:
    return _duration_sum_bound([(d.first, d.last, max(_first_wait(d), _last_wait(d))) for d in inputs.done
                                if d.decoded_tokens > 0 and decode_time(d) > 0], inputs.profile)


def _prefill(inputs: FigureInputs) -> float | None:
    return _duration_sum_bound([(d.sent, d.first, _first_wait(d)) for d in inputs.done if d.record.prompt_tokens and ttft(d) > 0],
                               inputs.profile)


# A request's samples: (value, first recorded time, second, the larger wait in its loop pass of the two
# reads; the send is no read: it has none)
Spans = Callable[[Done], list[tuple[float, float, float, float]]]


def _percentile(spans_of: Spans, quantile: float, per_token: bool = False) -> Callable[[FigureInputs], float | None]:
    def bound(inputs: FigureInputs) -> float | None:
        spans = [span for d in inputs.done for span in spans_of(d)]
        if not spans:
            return None
        samples = [value for value, _, _, _ in spans]
        value = float(np.percentile(samples, 100 * quantile))
        # TPOT divides a duration (two recorded times) by the request's decoded tokens
        fewest = min((d.decoded_tokens for d in inputs.done if d.decoded_tokens >= 1), default=1.0)
        return _quantile_bound(samples, [(a, b) for _, a, b, _ in spans], [wait for _, _, _, wait in spans], quantile,
                               1.0 / fewest if per_token else 1.0, inputs.profile, value)
    return bound


def _tpot_spans(d: Done) -> list[tuple[float, float, float, float]]:
    value = tpot(d)
    return [] if value is None else [(value, d.first, d.last, max(_first_wait(d), _last_wait(d)))]


def _itl_spans(d: Done) -> list[tuple[float, float, float, float]]:
    chunks = d.record.chunks
    return [(gap, a, b, max(d.record.chunk_wait(i), d.record.chunk_wait(i + 1)))
            for i, (gap, a, b) in enumerate(zip(itl(d), chunks, chunks[1:]))]


# Each latency sample with the two recorded times it is the difference of (the values from
# rig.load.request_metrics, the one definition of each).
_SPANS: dict[str, Spans] = {
    "ttft": lambda d: [(ttft(d), d.sent, d.first, _first_wait(d))],
    "e2e": lambda d: [(e2e(d), d.sent, d.last, _last_wait(d))],
    "tpot": _tpot_spans,
    "itl": _itl_spans,
}

# One bound per reported figure, by the figure's name in HEADLINE and LATENCY (rig.load.summary).
BOUNDS: dict[str, Callable[[FigureInputs], float | None]] = {
    "user_decode_tok_s": _decode,
    "prefill_tok_s": _prefill,
    "output_tok_s": _aggregate_bound,
    "e2e_p50_ms": _percentile(_SPANS["e2e"], 0.50),
    "e2e_p99_ms": _percentile(_SPANS["e2e"], 0.99),  # a sweep's tail columns (rig.load.sweep)
    "tpot_p99_ms": _percentile(_SPANS["tpot"], 0.99, per_token=True),
    **{f.name: _percentile(_SPANS[f.samples], f.quantile, per_token=f.samples == "tpot") for f in LATENCY},
}
assert {f.name for f in HEADLINE.values()} <= set(BOUNDS), "every headline figure has a client bound"
# Bounds read over every process at once, where a statistical one is tighter than the worst
# process's: the figure takes the smaller.
POOLED: dict[str, Callable[[list[FigureInputs]], float | None]] = {"output_tok_s": _aggregate_at_steady_state}


def figure_inputs(records: list[RequestRecord], window: Window, clients: list[ClientStats],
                  dispatcher: ClientStats | None = None, pause_s: float = 0.0) -> list[FigureInputs]:
    """Each Locust process's requests and delays, as the bounds read them (client_bounds)."""
    done = done_in_window(records, window.start, window.end)
    measured = request_metrics.measured_tokens_per_chunk(records)
    ratio, ratio_known = (1.0, False) if measured is None else (measured, True)
    records_of: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        records_of[r.process].append(r)
    by_process: dict[str, list[Done]] = defaultdict(list)
    for d in done:
        by_process[d.record.process].append(d)
    profiles = {c.process: c for c in clients}
    master = LagProfile.of(dispatcher, window.start, window.end) if dispatcher is not None else None
    # (an arrival schedule's window is no closed loop's steady state: a trace replay's is its whole trace)
    first_chunks = _FirstChunks(np.sort([r.chunks[0] for r in records if r.chunks]),
                                max((request_metrics.chunk_token_counts(r, ratio)[0] for r in records if r.chunks), default=1.0),
                                window.steady and all(r.t_scheduled is None for r in records))
    inputs: list[FigureInputs] = []
    # every process whose streams the window counts: one whose requests all outlast it finished none
    # inside it, and its tokens are bounded all the same
    counted = {r.process for r in records if any(window.start <= t <= window.end for t in r.chunks)}
    for process in sorted(set(by_process) | counted):
        process_done = by_process.get(process, [])
        client = profiles.get(process)
        if client is None:  # requests from a process that wrote no lag samples: the worst process's delays stand in
            client = max(clients, key=lambda c: max((lag for _, lag in c.lag), default=0.0), default=None)
        if client is None:
            continue
        # the delays that reached these requests: from the window's start to the last chunk read of one sent inside it
        end = max(window.end, max((d.last for d in process_done), default=window.end))
        inputs.append(FigureInputs(process_done, LagProfile.of(client, window.start, end), window,
                                   records_of[process], ratio, ratio_known, master, pause_s, first_chunks))
    return inputs


def client_bounds(records: list[RequestRecord], window: Window, clients: list[ClientStats],
                  limit: float, dispatcher: ClientStats | None = None, pause_s: float = 0.0) -> dict[str, ClientBound]:
    """Per figure, the most the client's timing could have moved it (a share of the figure): the
    worst over the Locust processes, each bounded with its own delays and its own requests (and
    the master's, `dispatcher`, where it dispatched them; `pause_s`: the think time between a
    conversation's turns, which the ideal client waits too). A figure with no samples has bound
    None, which never holds."""
    inputs = figure_inputs(records, window, clients, dispatcher, pause_s)
    unmonitored = not inputs or any(not i.profile.samples for i in inputs)  # a process whose delays are unknown
    out = {}
    for name, bound_of in BOUNDS.items():
        bounds = [b for i in inputs if i.profile.samples and (b := bound_of(i)) is not None]
        worst = None if unmonitored or not bounds else max(bounds)
        pooled = POOLED[name](inputs) if worst is not None and name in POOLED else None
        worst = worst if pooled is None else min(worst, pooled)
        if worst is None:
            reason = "no lag samples inside the window" if unmonitored else "no samples of it inside the window"
        elif worst > limit:
            reason = f"the client's timing could move it by {share_text(worst, limit)} > {share_text(limit)}"
        else:
            reason = None
        out[name] = ClientBound(bound=worst, limit=limit, holds=reason is None, reason=reason)
    return out

