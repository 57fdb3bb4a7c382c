"""Metrics from raw per-request records (rig.load.records), never from Locust's histograms.

Three rules keep a figure honest:
- Headline rates are token-weighted (total tokens over total time), never a mean of per-request
  ratios: one request whose chunks reached a descheduled client in a burst cannot move them.
- Decode runs from the first to the last chunk that carries output; E2E ends at the last one too.
- The aggregate window is at steady state (`steady_window`): it opens once every user has had
  its first token plus one typical request lifetime, and closes when Locust starts stopping users.

An arrival-driven run's window and schedule are rig.load.arrivals'; which value is which reported
figure, rig.load.figures'.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median

import numpy as np

from rig.load.records import RequestRecord
from rig.load.request_metrics import (
    Done,
    decode_time,
    done_in_window,
    e2e,
    itl,
    run_tokens_per_chunk,
    tokens_read_between,
    tpot,
    ttft,
)
from rig.load.summary import (
    ClientBound,
    ClientLag,
    ClientVerdict,
    ConversationStats,
    Distribution,
    Metrics,
    OutputLengthStats,
    RateDistribution,
    RequestCounts,
    TokenFigures,
    TurnStats,
    Window,
)
from rig.load.wire import LAG_PERIOD_S, ClientStats

TOKEN_MISMATCH_TOLERANCE = 0.02  # usage vs chunk count, as a fraction
STALL_THRESHOLD_S = 0.020  # an event-loop wake-up later than this blocked every stream the process reads
CPU_LIMIT_PERCENT = 90.0
BURST_GAP_FRACTION = 0.1  # an inter-chunk gap under 10% of the run's median ITL ...
BURST_MIN_GAPS = 3  # ... three times in a row: chunks the client read from a backlog


def _percentiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0}
    array = np.asarray(values, dtype=float)
    p10, p50, p90, p99 = (float(value) for value in np.percentile(array, (10, 50, 90, 99)))  # one sort, not four
    return {"n": len(values), "mean": float(array.mean()), "p10": p10, "p50": p50, "p90": p90, "p99": p99}


def describe(values: list[float]) -> Distribution:
    return Distribution(**_percentiles(values))


def describe_rate(values: list[float], token_weighted: float | None) -> RateDistribution:
    return RateDistribution(**_percentiles(values), token_weighted=token_weighted)




def responsive_end(clients: list[ClientStats], stopping: float) -> float:
    """Locust blocks its event loop for tens of milliseconds while it starts stopping (measured:
    86 ms before `test_stopping` fired), and no chunk is read meanwhile: the window must close when
    the client was last responsive, not when the stop was announced."""
    end = stopping
    for client in clients:
        for wake, lag in client.lag:
            free = wake - lag - LAG_PERIOD_S  # when the wait that ended late began
            if wake >= stopping and free < stopping:
                end = min(end, free)
    return end


def window_of(start: float, end: float, run_start: float, run_end: float, steady: bool, opened_by: str) -> Window:
    """A run's window from its fields (steady_window here, rig.load.arrivals.arrival_window)."""
    return Window(start=start, end=end, run_start=run_start, run_end=run_end, steady=steady, opened_by=opened_by)


def steady_window(records: list[RequestRecord], events: dict[str, float], ramp_s: float = 0.0,
                  users: int | None = None) -> Window:
    """Opens once every user has received its first token plus one typical (median) request
    lifetime, so every user's stream is past its first prefill and requests start and end at
    their steady rate; closes when Locust starts stopping users. A detector over per-second token
    counts was the alternative; it needs many seconds of data to tell a plateau from noise and
    fails on short windows, while this rule follows from the closed loop's own structure."""
    sends = [r.t_send for r in records]
    run_start = events.get("spawning_complete", min(sends, default=0.0))
    run_end = events.get("stopping", max((r.t_end or r.t_send for r in records), default=run_start))
    floor = run_start + ramp_s
    first_by_user: dict[str, float] = {}
    for record in records:
        if record.t_first is not None:
            first_by_user[record.user] = min(first_by_user.get(record.user, record.t_first), record.t_first)
    waiting = {r.user for r in records} - set(first_by_user)
    if users is not None and len({r.user for r in records}) < users:
        return window_of(floor, run_end, run_start, run_end, False,
                      f"only {len({r.user for r in records})} of {users} users sent a request: no steady state")
    if waiting or not first_by_user:
        return window_of(floor, run_end, run_start, run_end, False,
                      f"{len(waiting) or 'no'} user(s) never received a token: no steady state")
    ratio = run_tokens_per_chunk(records)
    lifetimes = [e2e(done) for r in records if (done := Done.of(r, ratio)) is not None]
    lifetime = median(lifetimes) if lifetimes else 0.0
    start = max(floor, max(first_by_user.values()) + lifetime)
    reason = (f"every user had its first token (last at +{max(first_by_user.values()) - run_start:.2f} s) "
              + (f"plus one request lifetime ({lifetime:.2f} s)" if lifetimes else "(no request completed: streams outlive the run)"))
    if start >= run_end:
        return window_of(floor, run_end, run_start, run_end, False,
                      f"the run ended before a steady state ({reason}); lengthen the scenario's duration_s")
    return window_of(start, run_end, run_start, run_end, True, reason)


@dataclass
class LatencySamples:
    """Per-request latencies (seconds) of the completed requests sent inside a window; ITL has
    one sample per gap between output chunks, so many per request."""

    ttft: list[float]
    tpot: list[float]  # requests that decoded at least one token after the first
    itl: list[float]
    e2e: list[float]


def latency_samples(done: list[Done]) -> LatencySamples:
    """`done`: done_in_window() of the run's records (rig.load.request_metrics)."""
    samples = LatencySamples(ttft=[], tpot=[], itl=[], e2e=[])
    for d in done:
        samples.ttft.append(ttft(d))
        samples.e2e.append(e2e(d))
        per_token = tpot(d)
        if per_token is not None:
            samples.tpot.append(per_token)
        samples.itl.extend(itl(d))
    return samples


def _bursty(done: Done, gap_limit: float) -> bool:
    run = 0
    for gap in itl(done):
        run = run + 1 if gap < gap_limit else 0
        if run >= BURST_MIN_GAPS:
            return True
    return False


def summarize(records: list[RequestRecord], window: Window,
              count_tokens: Callable[[str], int] | None = None) -> Metrics:
    """Per-request statistics over completed requests sent inside the window, aggregate rates from
    every chunk that arrived inside it. With `count_tokens` (the served tokenizer), usage is also
    checked against a re-tokenisation of the streamed text."""
    start, end, span = window.start, window.end, window.seconds
    ratio = run_tokens_per_chunk(records)
    done_views = done_in_window(records, start, end)
    done = [d.record for d in done_views]
    latency = latency_samples(done_views)
    itl_samples = latency.itl
    user_rates, prefill_rates = [], []
    decode_tokens = decode_seconds = 0.0
    prompt_tokens_total = ttft_total = 0.0
    mismatches, tokenizer_differences = [], []
    cached = prompted_with_cache_report = 0
    for view in done_views:
        r = view.record
        ttft_s, decode_s, decoded = ttft(view), decode_time(view), view.decoded_tokens
        if decoded > 0 and decode_s > 0:
            user_rates.append(decoded / decode_s)
            decode_tokens += decoded
            decode_seconds += decode_s
        prompt_tokens = r.prompt_tokens
        if prompt_tokens and ttft_s > 0:
            prefill_rates.append(prompt_tokens / ttft_s)
            prompt_tokens_total += prompt_tokens
            ttft_total += ttft_s
        if r.cached_tokens is not None and prompt_tokens:
            cached += r.cached_tokens
            prompted_with_cache_report += prompt_tokens
        usage_tokens = r.usage_tokens
        if usage_tokens is not None and r.chunk_tokens is None and abs(usage_tokens - len(r.chunks)) > TOKEN_MISMATCH_TOLERANCE * usage_tokens:
            mismatches.append(usage_tokens - len(r.chunks))
        if count_tokens is not None and usage_tokens and r.text is not None:
            recount = count_tokens(r.text)
            if abs(usage_tokens - recount) > TOKEN_MISMATCH_TOLERANCE * usage_tokens:
                tokenizer_differences.append(usage_tokens - recount)
    median_itl = float(np.median(itl_samples)) if itl_samples else 0.0
    bursts = [view.record.id for view in done_views if median_itl > 0 and _bursty(view, BURST_GAP_FRACTION * median_itl)]
    # Aggregate throughput: each chunk's tokens count at its arrival, clipped to the window, so
    # streams the window's edges cut still count what they produced inside it.
    window_tokens = tokens_read_between(records, start, end, ratio)
    window_prompt_tokens = sum(int(r.prompt_tokens or 0) for r in records if r.t_first is not None and start <= r.t_first <= end)
    errors = Counter(r.error for r in records if r.error)
    prompt_targets = [float(r.prompt_tokens_target) for r in done if r.prompt_tokens_target]
    prompt_actual = [float(r.prompt_tokens_usage) for r in done if r.prompt_tokens_usage]
    return Metrics(
        window=window,
        requests=RequestCounts(total=len(records), completed=len(done), errors=dict(errors),
                               cut_by_window=errors.get("cut_by_window", 0),
                               error_rate=sum(n for k, n in errors.items() if k != "cut_by_window") / max(len(records), 1),
                               burst_requests=len(bursts), burst_request_ids=bursts[:20],
                               unique_prompts=len({(r.prompt, r.prompt_nonce) for r in records}) == len(records)
                               if all(r.prompt_nonce for r in records) else False),
        ttft_s=describe(latency.ttft),
        itl_s=describe(itl_samples),
        tpot_s=describe(latency.tpot),
        e2e_s=describe(latency.e2e),
        # The decode headline: total decode tokens / total decode time; per request beside it.
        user_decode_tok_s=describe_rate(user_rates, decode_tokens / decode_seconds if decode_seconds else None),
        prefill_tok_s=describe_rate(prefill_rates, prompt_tokens_total / ttft_total if ttft_total else None),
        output_tok_s=window_tokens / span,
        prompt_tok_s=window_prompt_tokens / span,
        tokens=TokenFigures(
            per_chunk="continuous usage" if any(r.chunk_tokens is not None for r in records) else "final usage / chunks",
            run_tokens_per_chunk=ratio,
            usage_vs_chunks_mismatched_requests=len(mismatches),
            usage_vs_chunks_mean_difference=float(np.mean(mismatches)) if mismatches else 0.0,
            tolerance=TOKEN_MISMATCH_TOLERANCE,
            tokenizer_checked=count_tokens is not None,
            usage_vs_tokenizer_mismatched_requests=len(tokenizer_differences),
            usage_vs_tokenizer_mean_difference=float(np.mean(tokenizer_differences)) if tokenizer_differences else 0.0,
            prompt_tokens_target=describe(prompt_targets).mean,
            prompt_tokens_usage=describe(prompt_actual).mean,
            # Share of prompt tokens the server answered from its prefix cache (None: not reported).
            cached_share=cached / prompted_with_cache_report if prompted_with_cache_report else None,
        ),
    )


def client_lag(client: ClientStats, window: Window) -> ClientLag:
    """One Locust process's event loop inside the window: lag percentiles, and stalls: every
    wake-up later than STALL_THRESHOLD_S blocked all its streams for that long."""
    inside = sorted(lag for t, lag in client.lag if window.start <= t <= window.end)
    stats = describe(inside)
    stalls = [lag for lag in inside if lag > STALL_THRESHOLD_S]
    return ClientLag(process=client.process, lag_samples=len(inside), lag_probe=client.lag_probe,
                     cpu_s=cpu_seconds(client.cpu_time, window),
                     lag_p50_ms=None if stats.p50 is None else 1000 * stats.p50,
                     lag_p99_ms=None if stats.p99 is None else 1000 * stats.p99,
                     lag_max_ms=1000 * inside[-1] if inside else None,
                     stalls=len(stalls), stalled_s=float(sum(stalls)), stalled_fraction=sum(stalls) / window.seconds,
                     # collections the client ran inside the window (its collector is off there; see rig/load/client/monitor.py)
                     gc_pauses=[pause for pause in client.gc_pauses if window.start <= pause[0] <= window.end],
                     cpu_percent_mean=client.cpu_percent_mean, cpu_percent_max=client.cpu_percent_max)


def cpu_seconds(samples: list[tuple[float, float]], window: Window) -> float | None:
    """CPU seconds a client process used inside the window, interpolated between its once-a-second
    samples of cumulative CPU time (None without two samples around the window)."""
    if len(samples) < 2:
        return None
    times = [t for t, _ in samples]
    values = [v for _, v in samples]
    if times[0] > window.start + 1.5 or times[-1] < window.end - 1.5:
        return None
    return float(np.interp(window.end, times, values) - np.interp(window.start, times, values))


def client_verdict(clients: list[ClientLag], bounds: dict[str, ClientBound], headline: str) -> ClientVerdict:
    """Whether the client measured the server or itself, in units of error: each figure is usable
    when the client's timing could move it by at most its limit (`bounds`, rig.load.client_error);
    the verdict is the headline's. No statistics, or a process above CPU_LIMIT_PERCENT, void every
    figure. Checked for every run, c=1 included. `clients` are client_lag() results."""
    if not clients:
        every = ["no client statistics were written"]
        return ClientVerdict(valid=False, reasons=every, every_figure=every, figures=bounds, processes=0)
    worst_cpu = max((c.cpu_percent_mean or 0.0) for c in clients)
    worst_stall = max(clients, key=lambda c: c.stalled_fraction or 0.0)
    every = []
    if worst_cpu > CPU_LIMIT_PERCENT:
        every.append(f"a client process averaged {worst_cpu:.0f}% CPU > {CPU_LIMIT_PERCENT:.0f}%")
    own = bounds.get(headline)
    reasons = [*every, *([f"{headline}: {own.reason}"] if own is not None and own.reason else [])]
    if own is None:
        reasons.append(f"{headline}: no client bound")
    return ClientVerdict(valid=not reasons, reasons=reasons, every_figure=every, figures=bounds, processes=len(clients),
                         lag_p99_ms=max(c.lag_p99_ms or 0.0 for c in clients),
                         lag_p50_ms=max(c.lag_p50_ms or 0.0 for c in clients),
                         lag_max_ms=max(c.lag_max_ms or 0.0 for c in clients),
                         lag_probes=sorted({c.lag_probe for c in clients}),
                         stalled_fraction=worst_stall.stalled_fraction or 0.0,
                         cpu_percent_mean_max=worst_cpu,
                         server_clock="unavailable (OpenAI streams carry only whole-second timestamps)")


def turn_stats(records: list[RequestRecord], window: Window) -> ConversationStats:
    """Multi-turn runs, per turn: prompt tokens as the server counted them (the whole history, once),
    the share it answered from its prefix cache, and TTFT."""
    by_turn: dict[int, list[Done]] = {}
    for view in done_in_window(records, window.start, window.end):
        if view.record.turn is not None:
            by_turn.setdefault(view.record.turn, []).append(view)
    out = {}
    for turn in sorted(by_turn):
        views = by_turn[turn]
        done = [view.record for view in views]
        prompted = [r for r in done if r.cached_tokens is not None and r.prompt_tokens]
        out[str(turn)] = TurnStats(
            requests=len(done),
            prompt_tokens_mean=float(np.mean([r.prompt_tokens for r in done if r.prompt_tokens])) if any(r.prompt_tokens for r in done) else None,
            cached_share=(sum(r.cached_tokens for r in prompted) / sum(r.prompt_tokens for r in prompted)) if prompted else None,  # type: ignore[misc]
            ttft_p50_s=describe([ttft(view) for view in views]).p50,
        )
    conversations = {r.conversation for r in records if r.conversation}
    failed = {r.conversation for r in records if r.conversation and r.error and r.error != "cut_by_window"}
    return ConversationStats(turns=out, conversations=len(conversations), conversations_ended_by_error=len(failed))


def output_length_stats(records: list[RequestRecord], window: Window) -> OutputLengthStats:
    """Requested output lengths against what the server produced (ignore_eos pins them where the
    engine supports it; otherwise a model may stop early at EOS)."""
    done = [r for r in records if r.complete and r.max_tokens is not None and window.start <= r.t_send <= window.end]
    delivered = [(r.max_tokens, r.usage_tokens) for r in done if r.usage_tokens is not None]
    return OutputLengthStats(requested=describe([float(r.max_tokens) for r in done]),  # type: ignore[arg-type]
                             delivered=describe([float(d) for _, d in delivered]),
                             exact_share=sum(1 for want, got in delivered if want == got) / len(delivered) if delivered else None)
