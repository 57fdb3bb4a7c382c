"""R7: a user's turnaround between requests, less a conversation's think time, after a failure to its start (docs/client-error.md)."""

from __future__ import annotations

import random

import numpy as np
from client_sim import PROFILES, START, Loop, busy_loop, closed_loop, conversations, monitor, record, server_times, stalls_at

from rig.load.client_error import LagProfile, client_bounds, turnaround_hold
from rig.load.metrics import summarize
from rig.load.records import RequestRecord
from rig.load.summary import Window
from rig.load.wire import ClientStats


def test_a_stall_moves_the_aggregate_by_the_users_it_held_back():
    """A stall holds a user's timeline back only where it delays the user's next send: one that
    reaches a request's end. Ten 200 ms stalls while every stream runs (requests longer than the run)
    shift no user's phase and move no token across an edge: the aggregate keeps its 1% (it read
    88% when every stall counted against every user). The same stalls at the users' request
    ends (short requests) hold them back (11% from the truth): the bound grows to cover it."""
    seconds, window = 14.0, Window(start=START + 3.0, end=START + 12.0, run_start=START, run_end=START + 14.0, steady=True,
                                   opened_by="simulated")
    mid_stream = stalls_at([(3.5 + 0.8 * k, 0.2) for k in range(10)], seconds + 5)
    bounds, errors = [], []
    for loop, tokens in ((mid_stream, 2000), (stalls_at([(1.0 + 0.9 * k, 0.2) for k in range(14)], seconds + 5), 16)):
        records, _ = closed_loop(loop, 8, seconds, tokens, 0.1, 0.02)
        truth = summarize(closed_loop(None, 8, seconds, tokens, 0.1, 0.02)[0], window).output_tok_s
        bound = client_bounds(records, window, [ClientStats(process="p", lag=monitor(loop, seconds + 2))], limit=0.01)["output_tok_s"]
        bounds.append(bound)
        errors.append(abs(truth / summarize(records, window).output_tok_s - 1))
        assert bound.bound is not None and errors[-1] <= bound.bound, (tokens, errors[-1], bound)
    assert bounds[0].holds and bounds[0].bound < 0.01, bounds[0]
    assert bounds[1].bound > 5 * bounds[0].bound and errors[1] > 0, (bounds, errors)


def test_a_conversations_think_time_is_no_hold_back():
    """Multi-turn chats think 2 s between turns (the built-in multi-turn scenario): the ideal client
    waits as long, so only what the client adds to it holds a user back. A quiet client keeps the
    aggregate within 1% and the truth within its bound; charging the think time to the client read
    it as a hold-back of every turn."""
    users, seconds, tokens, ttft, itl, turns, think = 16, 30.0, 32, 0.2, 0.02, 4, 2.0
    loop = busy_loop(random.Random(5), seconds + 5, *PROFILES["quiet"][:2], 0)
    window = Window(start=START + 6.0, end=START + 28.0, run_start=START, run_end=START + seconds, steady=True, opened_by="simulated")
    records = conversations(loop, users, seconds, tokens, ttft, itl, turns, think)
    truth = summarize(conversations(None, users, seconds, tokens, ttft, itl, turns, think), window).output_tok_s
    error = abs(truth / summarize(records, window).output_tok_s - 1)
    clients = [ClientStats(process="p", lag=monitor(loop, seconds + 2))]
    bound = client_bounds(records, window, clients, 0.01, None, think)["output_tok_s"]
    charged = client_bounds(records, window, clients, 0.01)["output_tok_s"]
    assert bound.bound is not None and error <= bound.bound and bound.holds, (error, bound)
    assert charged.bound > 5 * bound.bound, (charged, bound)


def test_a_stall_over_a_pending_connect_after_a_failure_is_the_clients():
    """The server cuts every stream at 8 s; each user's next request begins at once and its connect
    completes 1 s later (a dropped SYN, the kernel's retry: the server's time, the same for the ideal
    client), but the client's loop stalls across those connects and sends later still. The time to
    the next request's start is all that counts after a failure, save the stretches over the pending
    connect: the truth (4% away) stays within the bound."""
    users, seconds, tokens, ttft, itl, reset = 16, 14.0, 64, 0.2, 0.02, 8.0
    window = Window(start=START + 3.0, end=START + 13.0, run_start=START, run_end=START + seconds, steady=True,
                    opened_by="simulated")

    def run(loop: Loop | None) -> list[RequestRecord]:
        out = []
        for user in range(users):
            sent, began, k, failed = 0.01 * user, None, 0, False
            while sent < seconds:
                first, gaps = server_times(user, k, tokens, ttft, itl)
                true = [sent + first]
                for gap in gaps:
                    true.append(true[-1] + gap)
                cut = not failed and sent < reset < true[-1]
                true = [t for t in true if t <= reset] if cut else true
                seen = list(np.maximum.accumulate([t + (loop.delay(t) if loop else 0.0) for t in true]))
                r = record(user, k, sent, seen, tokens).model_copy(update={"t_start": START + (began if began is not None else sent)})
                if not cut:
                    out.append(r)
                    sent, began, k = seen[-1], None, k + 1
                    continue
                ended = reset + (loop.delay(reset) if loop else 0.0)  # the cut, read
                out.append(r.model_copy(update={"t_end": START + ended, "usage": None, "finish_reason": None, "error": "stream_cut"}))
                connected = ended + 1.0  # the first SYN dropped, retried by the kernel
                sent, began, k, failed = connected + (loop.delay(connected) if loop else 0.0) + 0.0006, ended, k + 1, True
        return out

    loop = stalls_at([(reset + 0.5, 0.8)], seconds + 5)
    records = run(loop)
    truth = summarize(run(None), window).output_tok_s
    error = abs(truth / summarize(records, window).output_tok_s - 1)
    bound = client_bounds(records, window, [ClientStats(process="p", lag=monitor(loop, seconds + 2))], limit=0.01)["output_tok_s"]
    assert error > 0.01 and bound.bound is not None and error <= bound.bound, (error, bound)


def test_a_turnaround_holds_the_user_back_by_the_time_to_its_next_send_less_the_think_time():
    """R7 on two turns of one conversation, a quiet loop: the hold-back is the time from the end as
    read to the next send, less the think time, plus the short delay the end was read late by."""
    first = record(0, 0, 1.0, [1.2, 1.3], 2).model_copy(update={"conversation": "c", "turn": 0})
    second = record(0, 1, 3.35, [3.5, 3.6], 2).model_copy(update={"conversation": "c", "turn": 1})
    profile = LagProfile.of(ClientStats(process="p", lag=[(START + 0.01 * k, 0.0001) for k in range(1, 500)]), START, START + 5.0)
    hold = turnaround_hold(first, second, profile, 0.0001, 2.0)
    assert hold.rule == "R7" and hold.start_s == first.t_end
    assert hold.seconds == max(0.0, second.t_send - first.t_end - 2.0) + 0.0 + 0.0001
    other = second.model_copy(update={"conversation": "d", "turn": 0})  # a new conversation starts at once: no think time
    assert turnaround_hold(first, other, profile, 0.0001, 2.0).seconds == second.t_send - first.t_end + 0.0001
