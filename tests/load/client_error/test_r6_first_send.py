"""R6: a closed-loop user's first send, held back by the spawn's pacer and its own way to the send (docs/client-error.md)."""

from __future__ import annotations

import pytest
from client_sim import (
    PERIOD,
    START,
    cut_at,
    distributed_batches,
    local_first_sends,
    locust_batches,
    monitor,
    paced_spawn,
    spawned_users,
    stalls_at,
)

from rig.load.client_error import LagProfile, client_bounds, first_send_hold
from rig.load.metrics import summarize
from rig.load.summary import Window
from rig.load.wire import ClientStats, dispatch_wait, dispatched_at


def test_a_workers_stall_holds_back_the_batch_it_met_and_not_the_later_ones():
    """Workers that stall 90 ms at each of the master's six batches leave the batches about 1 s apart: the
    master paces them, so a stall is not charged to every later batch. With the master's dispatch of
    each user recorded the bound counts each batch's own hold-up; the truth stays inside it, here too
    where a worker's stall outlasts a batch (the next message waits for it) and where the master
    stalls as well."""
    batches = [(k / 20.5 * 20, 0.09) for k in range(6)]  # the spawn's work at each batch
    for master_stalls, worker_stalls in (([], batches), ([], [*batches, (2.5, 1.2)]), ([(1.5, 0.6)], [*batches, (3.2, 0.4)])):
        error, bound, undispatched = paced_spawn(master_stalls, worker_stalls)
        assert bound is not None and undispatched is not None and error <= bound, (master_stalls, worker_stalls, error, bound)
        assert bound < undispatched, (bound, undispatched)
    _, bound, undispatched = paced_spawn([], batches)
    assert bound is not None and undispatched is not None and bound < undispatched / 2, (bound, undispatched)


def test_which_spawn_message_started_a_user():
    """A worker's users in the order it spawned them, against the messages it received (the
    master's timestamp, the users it asked for in all): a message that replaced one the worker had not
    acted on yet does not hide the earlier dispatch of the users that one asked for; each message's
    lag behind the master's pace counts every round, those that asked this worker for nobody too."""
    spawns = [(10.0, 3), (11.0, 6), (12.5, 6), (13.25, 9), (13.5, 12)]  # 13.25's spawn replaced by 13.5's before it ran
    found = [dispatched_at(spawns, i, 1.0) for i in range(13)]
    assert found == [(10.0, 0.0)] * 3 + [(11.0, 0.0)] * 3 + [(13.25, 0.25)] * 3 + [(13.5, 0.0)] * 3 + [None]
    assert dispatched_at([], 0, 1.0) is None
    assert dispatch_wait(500.0) == 1.0 and dispatch_wait(2.5) == 0.8 and dispatch_wait(0.5) == 2.0  # Locust 2.47's UsersDispatcher


def test_a_masters_late_wake_ups_at_each_round_of_the_spawn_are_the_clients():
    """A master whose every wake-up of the spawn's pace is 9.5 ms late (under the lag monitor's
    period, so no long stretch) starts the 47th round 0.45 s late: a bound that counts only long
    stretches misses it, one that counts every late wake-up (dispatch_behind) holds the truth. (The
    window closes a second before the run's end, so that what the end's cut streams still had to
    bring, which counts their users' hold-backs its own way, does not cover the sends' for them.)"""
    users, rate = 120, 2.5
    wait, rounds = dispatch_wait(rate), -(-users // max(1, int(rate)))
    late = [(k * wait + (k - 1) * 0.0094 - 0.0001, 0.0095) for k in range(1, rounds)]  # each just as its round is due
    master = stalls_at(late, 400.0)
    error, bound, undispatched = paced_spawn([], [], users=users, rate=rate, master=master, ttft=8.0, closes_before_end=1.0)
    assert bound is not None and undispatched is not None and error > undispatched and error <= bound, (error, bound, undispatched)


def test_a_local_runners_late_wake_ups_at_each_round_of_the_spawn_are_the_clients():
    """The same late wake-ups in Locust's local runner, whose one process paces the rounds and spawns
    them: the records say which round started each user (rig.load.client's record_local_rounds), so the
    rounds' lateness counts, short wake-ups included; from the process's long stretches alone (the
    rule of records that do not say) the truth is outside the bound (0.77% under 0.27%; the window
    closes before the run's end as above)."""
    users, rate = 120, 2.5
    wait, rounds = dispatch_wait(rate), -(-users // max(1, int(rate)))
    loop = stalls_at([(k * wait + (k - 1) * 0.0094 - 0.0001, 0.0095) for k in range(1, rounds)], 400.0)
    error, bound, unrecorded = paced_spawn([], [], users=users, rate=rate, master=loop, ttft=8.0, local=True, closes_before_end=1.0)
    assert bound is not None and unrecorded is not None and unrecorded < error <= bound, (error, bound, unrecorded)


@pytest.mark.parametrize("case", ["a busy spawn, a quiet window", "the first round woken late"])
def test_a_local_users_first_send_is_counted_at_least_as_late_as_it_was(case):
    """The local runner's rounds: (1) during the spawn alone the loop runs 18.5 ms stretches every
    19.5 ms, each read by the monitor as 9.5 ms (no long stretch), and both of a user's opening
    wake-ups land at a stretch's start: credited as the server's up to twice the window's largest
    short sample (0.2 ms) plus a period, each user's hold-up would be under-counted by 16.7 ms;
    (2) an 18 ms stretch over the first round, read as 8 ms, moves every user and is counted by
    nothing after it (dispatch_behind counts from that round). Each user's first send is counted at
    least as late as it was."""
    if case == "a busy spawn, a quiet window":
        loop = stalls_at([(0.0005 + 0.0195 * i, 0.0185) for i in range(26)], 80.0)
        users, rate, connect, answer = 40, 20.0, 0.02, 0.0205
    else:
        loop, users, rate, connect, answer = stalls_at([(-0.0005, 0.0185)], 80.0), 40, 20.0, 0.0, 0.002
    samples = monitor(loop, 20.0)
    assert max(lag for _, lag in samples) <= PERIOD  # no long stretch: the monitor saw every one as short
    profile = LagProfile.of(ClientStats(process="p", lag=samples), START + 10.0, START + 19.0)
    assert profile.short().largest_s < 0.001  # the window is quiet
    firsts = local_first_sends(loop, users, rate, connect, answer)
    assert max(late for _, late in firsts) > 0.015, firsts
    for first, late in firsts:
        assert first_send_hold(first, profile, None).seconds >= late, (first, late)
    # records that do not say (the rule of long stretches) under-count them
    undated = [(first.model_copy(update={"t_dispatched": None, "dispatch_behind": None, "opening": None}), late) for first, late in firsts]
    assert any(first_send_hold(first, profile, None).seconds < late for first, late in undated)


@pytest.mark.parametrize("rounds", [False, True], ids=["records without rounds", "rounds recorded"])
@pytest.mark.parametrize("stall, connect", [(0.6, 0.05), (1.0, 0.2)])
def test_a_stall_during_the_spawn_moves_every_later_batch(stall, connect, rounds):
    """A stall over one batch's wake-up delays that batch and every later one, sends it never reached
    included (each user's opening call comes after the monitor's next sample); the window opens at
    spawning_complete and the run's end cuts the streams, as c3000's. Counting only a stretch that
    reaches the send misses the truth by far. Whether or not the records say which of the local runner's rounds started each user."""
    users, rate, seconds, tokens, ttft, itl, per_chunk = 60, 20.5, 10.0, 300, 1.5, 0.03, 4
    loop = stalls_at([(0.95, stall)], 80.0)
    dispatched, starts, spawned = distributed_batches(loop, loop, users, rate)
    assert (starts, spawned) == locust_batches(loop, users, rate)  # one process: the master's rounds are its own
    ideal_starts, _ = locust_batches(None, users, rate)
    end = spawned + seconds
    window = Window(start=START + spawned, end=START + end, run_start=START + spawned, run_end=START + end, steady=False,
                    opened_by="simulated: spawning_complete")
    records = cut_at(spawned_users(loop, starts, end + 1, tokens, ttft, itl, per_chunk, connect, dispatched if rounds else None),
                     START + end)
    truth = summarize(cut_at(spawned_users(None, ideal_starts, end + 1, tokens, ttft, itl, per_chunk, connect), START + end),
                      window).output_tok_s
    error = abs(truth / summarize(records, window).output_tok_s - 1)
    bound = client_bounds(records, window, [ClientStats(process="p", lag=monitor(loop, end + 1))], limit=0.01)["output_tok_s"]
    assert error > 0.005 and bound.bound is not None and error <= bound.bound, (error, bound)


def test_a_stall_of_the_master_during_the_spawn_is_the_clients():
    """In a distributed run the master dispatches the users' batches and sends nothing itself: a stall
    of its loop starts every later batch late while the worker's loop stays quiet. Its samples (the
    dispatcher's file) bound that; without them the truth is outside the bound."""
    users, rate, seconds, tokens, ttft, itl, per_chunk = 60, 20.5, 10.0, 300, 1.5, 0.03, 4
    master, worker = stalls_at([(0.95, 1.0)], 80.0), stalls_at([], 80.0)
    starts, spawned = locust_batches(master, users, rate)
    ideal_starts, _ = locust_batches(None, users, rate)
    end = spawned + seconds
    window = Window(start=START + spawned, end=START + end, run_start=START + spawned, run_end=START + end, steady=False,
                    opened_by="simulated: spawning_complete")
    records = cut_at(spawned_users(worker, starts, end + 1, tokens, ttft, itl, per_chunk, 0.05), START + end)
    truth = summarize(cut_at(spawned_users(None, ideal_starts, end + 1, tokens, ttft, itl, per_chunk, 0.05), START + end),
                      window).output_tok_s
    error = abs(truth / summarize(records, window).output_tok_s - 1)
    clients = [ClientStats(process="p", lag=monitor(worker, end + 1))]
    unmonitored = client_bounds(records, window, clients, limit=0.01)["output_tok_s"]
    bound = client_bounds(records, window, clients, 0.01, ClientStats(process="master", lag=monitor(master, end + 1)))["output_tok_s"]
    assert unmonitored.bound is not None and error > unmonitored.bound, (error, unmonitored)
    assert bound.bound is not None and error <= bound.bound, (error, bound)
