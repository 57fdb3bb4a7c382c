"""How far the client's own timing could move each reported figure: validity in units of error.

Every time the client records (a chunk's arrival, a request's end) is late by however long its
event loop took to get to the socket: an event's delay. The lag monitor (loadtests/locustfile.py)
is itself such an event, a timer that wakes up late by exactly that delay, so its samples inside
the window are the delay distribution of that process. From it, per Locust process:

- `level` L: a delay that at most a small share of events exceed (the monitor's p99, or its max);
- `beyond` q(L): the share of events later than L, the monitor's share of late samples plus the
  share of the window spent in stretches longer than L (a stretch much longer than the monitor's
  period holds many arrivals but one monitor sample);
- `excess` X(L): the seconds of those stretches beyond L, each of which can hold up every user of
  the process once.

A figure's bound follows from how it is computed (rig.load.request_metrics, rig.load.metrics):

- a sum of per-request durations (decode time, TTFT) over N requests moves by at most N*L plus
  users*X(L): relative bound (N*L + users*X) / sum of the durations;
- the aggregate rate (tokens whose arrival falls in the window) moves by the tokens the window's
  two edges can trade (2L/T), by the time the client held each user back between requests
  (L / mean E2E), and by stretches (2X/T);
- a percentile of per-request samples, each moved by at most e = L (TTFT, E2E, ITL; TPOT by
  L/(tokens-1)), except a share q of them that may move anywhere: the p-quantile stays between
  the (p-q)- and (p+q)-quantiles, widened by e. Its bound is e plus that spread, over the figure.

Each figure takes the smaller of the bounds at L = p99 and at L = max. The clock's resolution is
added to L. A bound is a share of the reported figure: the truth lies within reported * (1 +/- bound). A figure is usable when its bound is at most the scenario's `client_error_limit`
(1% by default); the bound is derived here and checked against the timed server's known timing
(tests/load/test_client_error.py).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from rig.load.metrics import LAG_PERIOD_S
from rig.load.records import RequestRecord
from rig.load.request_metrics import Done, decode_time, done_in_window, e2e, itl, tpot, ttft
from rig.load.summary import HEADLINE, LATENCY, ClientBound, Window
from rig.load.wire import ClientStats

CLOCK_RESOLUTION_S = time.get_clock_info("time").resolution  # the records' clock (time.time())
SAMPLE_EVENTS = 2  # a latency sample is the difference of two recorded times: either may be late
BAD_SAMPLE_QUANTILE = 0.999
UNBOUNDED = 1e3  # the client could have moved the figure by more than the figure itself


@dataclass(frozen=True)
class DelayLevel:
    """One candidate delay level L of one process, and the events it does not cover."""

    level: float  # seconds, the clock's resolution included
    beyond: float  # share of the monitor's samples from short stretches later than L
    long_stretches: int  # stretches longer than the monitor's period that outlast L
    long_share: float  # share of the span those long stretches spend beyond L
    excess: float  # seconds beyond L, summed over the stretches: each can hold up every user once


@dataclass(frozen=True)
class LagProfile:
    """One Locust process's event delays inside the window (the lag monitor's samples)."""

    process: str | None
    samples: tuple[float, ...]  # sorted, seconds
    window_s: float
    users: int  # simulated users of this process inside the window

    @classmethod
    def of(cls, client: ClientStats, start: float, end: float, users: int) -> LagProfile:
        """The samples from `start` to `end`: the window, and after it as long as a request sent inside it was read."""
        inside = sorted(max(lag, 0.0) for t, lag in client.lag if start <= t <= end)
        return cls(client.process, tuple(inside), max(end - start, 1e-9), users)

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
        top = float(stretch.max()) + (0.0 if long.any() else LAG_PERIOD_S)
        out = []
        for level in (*(float(v) for v in np.percentile(array, [90, 99, 99.9])), top):
            later = stretch > level
            out.append(DelayLevel(level=level + CLOCK_RESOLUTION_S, beyond=float((later & ~long).mean()),
                                  long_stretches=int((later & long).sum()),
                                  long_share=float((stretch[later & long] - level).sum()) / self.window_s,
                                  excess=float((stretch[later] - level).sum())))
        return out


def _bad_samples(n: int, per_request: bool, lv: DelayLevel, users: int) -> int:
    """How many of n latency samples may have a time later than L: short stretches at the monitor's
    rate, by the binomial's 99.9th percentile (a sample is two times); long stretches each reach a
    user's request once (a per-request figure) or its gaps for the stretch's share of the time (ITL)."""
    share = lv.beyond if per_request else lv.beyond + lv.long_share
    random_part = int(binom.ppf(BAD_SAMPLE_QUANTILE, n, min(1.0, SAMPLE_EVENTS * share))) if share > 0 else 0
    return min(n, random_part + SAMPLE_EVENTS * users * lv.long_stretches)


def _share_of_reported(share_of_truth: float) -> float:
    """A bound stated as a share of the truth, restated as one of the reported figure."""
    return share_of_truth / (1 - share_of_truth) if share_of_truth < 1 else UNBOUNDED


def _duration_sum_bound(durations: list[float], profile: LagProfile) -> float | None:
    """A rate over per-request durations (tokens / their sum): the sum moves by at most a = N*L +
    users*X, so the rate by at most a / (sum - a) of the reported rate, at the best L."""
    total = sum(durations)
    if not durations or total <= 0:
        return None
    moved = min(len(durations) * lv.level + profile.users * lv.excess for lv in profile.levels())
    return moved / (total - moved) if moved < total else UNBOUNDED


def _quantile_bound(samples: list[float], quantile: float, sample_error: float, per_request: bool,
                    profile: LagProfile, value: float) -> float | None:
    """A p-quantile of samples each moved by at most sample_error * L, save a share q of them:
    (e + spread between the (p-q), p and (p+q) quantiles) / the value, at the best L."""
    if not samples or value <= 0:
        return None
    array = np.asarray(samples)
    bounds = []
    for lv in profile.levels():
        q = _bad_samples(len(samples), per_request, lv, profile.users) / len(samples)
        if q > 0 and (quantile - q < 0 or quantile + q > 1):
            continue  # as many samples may be late as lie on one side of the quantile: nothing holds it but the top level
        low, mid, high = np.percentile(array, [100 * max(quantile - q, 0.0), 100 * quantile, 100 * min(quantile + q, 1.0)])
        bounds.append((sample_error * lv.level + max(high - mid, mid - low)) / value)
    return min(bounds)  # the top level (no sample late beyond it) is always a candidate


def _aggregate_bound(done: list[Done], window: Window, profile: LagProfile) -> float | None:
    """Tokens counted at their arrival inside the window: edges (2L/T), users held back between
    requests (L / mean E2E), stretches (2X/T)."""
    lifetimes = [e2e(d) for d in done]
    if not lifetimes:
        return None
    mean_e2e = float(np.mean(lifetimes))
    return _share_of_reported(min(2 * lv.level / window.seconds + (lv.level / mean_e2e if mean_e2e > 0 else 1.0)
                                  + 2 * lv.excess / window.seconds for lv in profile.levels()))


@dataclass(frozen=True)
class FigureInputs:
    """The completed requests one process sent inside the window, and its delay profile."""

    done: list[Done]
    profile: LagProfile
    window: Window


def _decode(inputs: FigureInputs) -> float | None:
    return _duration_sum_bound([decode_time(d) for d in inputs.done if d.decoded_tokens > 0 and decode_time(d) > 0], inputs.profile)


def _prefill(inputs: FigureInputs) -> float | None:
    return _duration_sum_bound([ttft(d) for d in inputs.done if d.record.prompt_tokens and ttft(d) > 0], inputs.profile)


def _aggregate(inputs: FigureInputs) -> float | None:
    return _aggregate_bound(inputs.done, inputs.window, inputs.profile)


def _percentile(samples_of: Callable[[Done], list[float]], quantile: float,
                per_token: bool = False) -> Callable[[FigureInputs], float | None]:
    def bound(inputs: FigureInputs) -> float | None:
        samples = [s for d in inputs.done for s in samples_of(d)]
        if not samples:
            return None
        value = float(np.percentile(samples, 100 * quantile))
        # TPOT divides a duration (two recorded times) by the request's decoded tokens
        fewest = min((d.decoded_tokens for d in inputs.done if d.decoded_tokens >= 1), default=1.0)
        return _quantile_bound(samples, quantile, 1.0 / fewest if per_token else 1.0, samples_of is not itl, inputs.profile, value)
    return bound


_SAMPLES: dict[str, Callable[[Done], list[float]]] = {
    "ttft": lambda d: [ttft(d)], "itl": itl, "tpot": lambda d: [] if (v := tpot(d)) is None else [v], "e2e": lambda d: [e2e(d)],
}

# One bound per reported figure, by the figure's name in HEADLINE and LATENCY (rig.load.summary).
BOUNDS: dict[str, Callable[[FigureInputs], float | None]] = {
    "user_decode_tok_s": _decode,
    "prefill_tok_s": _prefill,
    "output_tok_s": _aggregate,
    "e2e_p50_ms": _percentile(_SAMPLES["e2e"], 0.50),
    **{f.name: _percentile(_SAMPLES[f.samples], f.quantile, per_token=f.samples == "tpot") for f in LATENCY},
}
assert {f.name for f in HEADLINE.values()} <= set(BOUNDS), "every headline figure has a client bound"


def client_bounds(records: list[RequestRecord], window: Window, clients: list[ClientStats],
                  limit: float) -> dict[str, ClientBound]:
    """Per figure, the most the client's timing could have moved it (a share of the figure): the
    worst over the Locust processes, each bounded with its own delays and its own requests. A
    figure with no samples has bound None, which never holds."""
    done = done_in_window(records, window.start, window.end)
    by_process: dict[str, list[Done]] = defaultdict(list)
    users: dict[str, set[str]] = defaultdict(set)
    for d in done:
        by_process[d.record.process].append(d)
    for r in records:
        if window.start <= r.t_send <= window.end or (r.t_first is not None and window.start <= r.t_first <= window.end):
            users[r.process].add(r.user)
    profiles = {c.process: c for c in clients}
    inputs: list[FigureInputs] = []
    for process, process_done in by_process.items():
        client = profiles.get(process)
        if client is None:  # requests from a process that wrote no lag samples: the worst process's delays stand in
            client = max(clients, key=lambda c: max((lag for _, lag in c.lag), default=0.0), default=None)
        if client is None:
            continue
        # the delays that reached these requests: from the window's start to the last chunk read of one sent inside it
        end = max(window.end, max(d.last for d in process_done))
        inputs.append(FigureInputs(process_done, LagProfile.of(client, window.start, end, len(users[process]) or 1), window))
    unmonitored = not inputs or any(not i.profile.samples for i in inputs)  # a process whose delays are unknown
    out = {}
    for name, bound_of in BOUNDS.items():
        bounds = [b for i in inputs if i.profile.samples and (b := bound_of(i)) is not None]
        worst = None if unmonitored or not bounds else max(bounds)
        if worst is None:
            reason = "no lag samples inside the window" if unmonitored else "no samples of it inside the window"
        elif worst > limit:
            reason = f"the client's timing could move it by {100 * worst:.2g}% > {100 * limit:.2g}%"
        else:
            reason = None
        out[name] = ClientBound(bound=worst, limit=limit, holds=reason is None, reason=reason)
    return out

