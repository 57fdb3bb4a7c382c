"""R9-R11 and R14: the users' shifts traded at the window's edges, reads held past an edge, what the
run's end never read, a drained window's end (docs/client-error.md)."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
from client_sim import (
    PROFILES,
    START,
    Loop,
    busy_loop,
    closed_loop,
    cut_at,
    monitor,
    open_loop,
    paced_spawn,
    record,
    stalls_at,
)

from rig.load.client_error import Hold, Timeline, Traded, Unread, client_bounds, figure_inputs
from rig.load.metrics import summarize
from rig.load.summary import Window
from rig.load.wire import ClientStats


@pytest.mark.parametrize("profile", ["quiet", "busy", "stalled"])
def test_the_aggregate_is_bounded_over_every_stream_the_window_cuts(profile):
    """The H200's c3000 run: a window that never reached steady state and closed with the run, long
    requests (most of what the window counts comes from streams it cuts), several tokens a chunk. The
    aggregate's bound counts every token the figure counts (it read over 100% when it divided by
    the finished requests' tokens alone) and the chunk beside each edge of every stream cut there:
    the truth stays within it, and a quiet client keeps it within 1%."""
    users, tokens, ttft, itl, per_chunk, seconds = 48, 300, 0.3, 0.03, 4, 14.0
    for seed in range(5):
        rng = random.Random(seed)
        rate, longest, stalls = PROFILES[profile]
        loop = busy_loop(rng, seconds + 5, rate, longest, stalls)
        window = Window(start=START + 3.0, end=START + seconds, run_start=START, run_end=START + seconds, steady=False,
                        opened_by="simulated: the run ended first")
        records = cut_at(closed_loop(loop, users, seconds, tokens, ttft, itl, per_chunk)[0], START + seconds)
        truth = summarize(cut_at(closed_loop(None, users, seconds, tokens, ttft, itl, per_chunk)[0], START + seconds), window)
        measured = summarize(records, window)
        assert measured.requests.completed < measured.requests.total / 2  # most streams are cut
        bound = client_bounds(records, window, [ClientStats(process="p", lag=monitor(loop, seconds + 2))], limit=0.01)["output_tok_s"]
        error = abs(truth.output_tok_s / measured.output_tok_s - 1)
        assert bound.bound is not None and error <= bound.bound, (seed, error, bound)
        assert bound.holds or profile != "quiet", (seed, error, bound)


@pytest.mark.parametrize(("tokens", "per_chunk"), [(8, 1), (16, 1), (40, 4)])
def test_what_the_streams_cut_by_the_runs_end_still_had_to_bring_counts_where_the_window_is_not_steady(tokens, per_chunk):
    """60 users at 50 a second in the local runner, a 0.67 s stall over the second round, TTFT about
    8 s, short outputs, the window from spawning_complete to the run's end and not steady. The late
    round's users read nothing inside the window, so twice their rate there (0) is no measure of what
    the ideal client, 0.67 s ahead, read of their streams before the run's end: each stream the end
    cut counts what it may still bring. Wide here (no steady state, so every stream not begun may bring its first chunk past the end:
    nothing seen caps how many begin together); test_no_more_streams_begin_... caps a steady run's."""
    loop = stalls_at([(0.998, 0.67)], 200.0)
    error, bound, _ = paced_spawn([], [], users=60, rate=50.0, seconds=6.0, master=loop, ttft=8.0, local=True, tokens=tokens,
                                  per_chunk=per_chunk, connect=0.002)
    assert error > 0.05 and bound is not None and error <= bound, (error, bound)


def test_past_the_runs_end_a_cut_stream_brings_at_most_what_it_had_left_at_twice_its_rate():
    """Past the run's end nothing was read. What a user may have brought there stands in: a stream the
    end cut brings its first chunk at once if none had come (counted apart), then twice its decode
    rate, never more than its max_tokens left; and no less than twice the user's own rate in the window."""
    end = 100.0
    line = Timeline(np.array([85.0, 91.0]), np.array([0.0, 4.0, 8.0]), (Hold(80.0, 0.0, "R6"),), rate_per_s=0.0,
                     unread=(Unread(remaining_tokens=8.0, first_tokens=1.0, rate_per_s=30.0),))
    reads_before = 4.0  # the second chunk, read at 91 s, lies within 10 s of the edge
    assert line.trade(end, 10.0, end) == Traded(reads_before + 8.0, 0.0, 10.0)  # all it had left
    short = line.trade(end, 0.05, end)  # its first chunk, then twice its rate
    assert (short.tokens, short.first_tokens, short.beyond_s) == (pytest.approx(2 * 30.0 * 0.05), pytest.approx(1.0), pytest.approx(0.05))
    assert line.trade(end - 1.0, 0.5, end) == Traded(0.0, 0.0, 0.0)  # the span ends before the run's end: reads count
    unknown = Timeline(np.array([]), np.array([0.0]), (Hold(80.0, 0.0, "R6"),), rate_per_s=2.0, unread=(Unread(math.inf, 0.0, 30.0),))
    assert unknown.trade(end, 1.0, end) == Traded(2 * 30.0, 0.0, 1.0)  # no max_tokens: its rate alone
    steady = Timeline(np.array([]), np.array([0.0]), (Hold(80.0, 0.0, "R6"),), rate_per_s=40.0, unread=(Unread(math.inf, 1.0, 10.0),))
    assert steady.trade(end, 1.0, end) == Traded(2 * 40.0, 0.0, 1.0)  # its own rate, where that is more


def test_a_closed_loop_user_with_no_stream_open_at_the_runs_end_was_about_to_send_its_next():
    """A closed-loop user whose stream had ended (thinking, or its next request not yet sent when the
    run stopped it) stands in for the next request, which the ideal client, running ahead, may have
    sent already: the process's largest max_tokens, a first chunk, the median decode rate."""
    window = Window(start=START + 2.0, end=START + 10.0, run_start=START, run_end=START + 10.0, steady=True, opened_by="simulated")
    done = record(0, 0, 1.0, [1.5 + 0.05 * i for i in range(8)], 8)  # 20 tokens a second; ended at 1.85 s, then thought
    running = record(1, 0, 9.0, [9.5, 9.51, 9.52], 12)  # 100 a second, 3 of 12 read when the run's end cut it
    running = running.model_copy(update={"t_end": START + 10.0, "usage": None, "finish_reason": None, "error": "cut_by_window"})
    clients = [ClientStats(process="p", lag=[(START + 0.01 * k, 0.0001) for k in range(1, 1100)])]
    [inputs] = figure_inputs([done, running], window, clients)
    parts = inputs.aggregate
    assert parts is not None and parts.timelines is not None
    streaming, thinking = sorted(parts.timelines, key=lambda line: len(line.times_s))
    # the next request: the process's largest max_tokens, from its first chunk on, at the median decode rate
    [(remaining, first, rate)] = [(u.remaining_tokens, u.first_tokens, u.rate_per_s) for u in thinking.unread]
    assert (remaining, first, rate) == (12.0, 1.0, pytest.approx((20.0 + 100.0) / 2))
    # the cut stream: its own max_tokens less what it read, at the larger of its own rate and the median
    [(remaining, first, rate)] = [(u.remaining_tokens, u.first_tokens, u.rate_per_s) for u in streaming.unread]
    assert (remaining, first, rate) == (9.0, 0.0, pytest.approx(100.0))


def open_loop_error_and_bound(loop: Loop, window: Window, cut: float | None = None, ideal_window: Window | None = None,
                               seed: int = 0) -> tuple[float, Any]:
    """256 users at 60 req/s for 25 s, 16 tokens each: the aggregate's error against the ideal client
    (its own window where the window's end is the client's to time) and its bound."""
    records, _ = open_loop(loop, 256, 60.0, 25.0, 16, 0.05, 0.01, seed)
    ideal, _ = open_loop(None, 256, 60.0, 25.0, 16, 0.05, 0.01, seed)
    if cut is not None:
        records, ideal = cut_at(records, START + cut), cut_at(ideal, START + cut)
    truth = summarize(ideal, ideal_window or window).output_tok_s
    bound = client_bounds(records, window, [ClientStats(process="p", lag=monitor(loop, 40.0))], 0.05)["output_tok_s"]
    return abs(truth / summarize(records, window).output_tok_s - 1), bound


def window_of(start: float, end: float, run_end: float) -> Window:
    return Window(start=START + start, end=START + end, run_start=START, run_end=START + run_end, steady=True, opened_by="simulated")


def test_a_stall_just_after_an_edge_holds_back_the_reads_of_what_crossed_it():
    """Each inside its bound: sends late by a stall just before the window's end, whose tokens a
    second stall just after it read late, beyond the tokens read near the edge; a replay's window that
    closes when the client read the last response; a run cut at its end just after a stall."""
    scheduled = open_loop(None, 256, 60.0, 25.0, 16, 0.05, 0.01, 0)[1]
    last = scheduled[-1]
    error, bound = open_loop_error_and_bound(stalls_at([(last - 0.32, 0.3), (last + 0.015, 0.3)], 40.0), window_of(2.0, last, 33.0))
    assert error > 0.005 and bound.bound is not None and error <= bound.bound, (error, bound)
    loop = stalls_at([(last - 0.001, 0.2)], 40.0)
    drained = max(r.t_end for r in open_loop(loop, 256, 60.0, 25.0, 16, 0.05, 0.01, 0)[0]) - START
    ideal_drained = max(r.t_end for r in open_loop(None, 256, 60.0, 25.0, 16, 0.05, 0.01, 0)[0]) - START
    error, bound = open_loop_error_and_bound(loop, window_of(0.0, drained, drained), ideal_window=window_of(0.0, ideal_drained, ideal_drained))
    assert error > 0.005 and bound.bound is not None and error <= bound.bound, (error, bound)
    error, bound = open_loop_error_and_bound(stalls_at([(19.6, 0.3)], 40.0), window_of(2.0, 20.0, 20.0), cut=20.0)
    assert error > 0.005 and bound.bound is not None and error <= bound.bound, (error, bound)
