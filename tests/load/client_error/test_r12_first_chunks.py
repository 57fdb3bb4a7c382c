"""R12: no more first chunks past a steady run's end than twice the most that began as fast inside it (docs/client-error.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from client_sim import START, in_step_users, monitor, stalls_at

from rig.load.client_error import FirstChunks, Traded, client_bounds
from rig.load.metrics import steady_window, summarize
from rig.load.wire import ClientStats


@pytest.mark.parametrize("users", [16, 64])
def test_users_in_step_whose_streams_begin_past_a_steady_runs_end_are_counted(users):
    """Users in step (one round of the spawn, every request as long), a steady window as
    steady_window opens it, a 0.67 s stall over their sends inside it, and the run ends just as the
    ideal client, 0.67 s ahead, has read its next requests' tokens and the real one has read none:
    twice each user's own rate past the end falls far short. The first chunks the run began at once
    inside the window cap those past its end, and cover them."""

    cycle = 8.0 + 7 * 0.03
    end = 4 * cycle + 0.2
    loop = stalls_at([(2 * cycle + 0.001, 0.67)], end + 30)
    real = in_step_users(loop, users, end, 8.0, 0.03, 8)
    window = steady_window(real, {"spawning_complete": START + users * 0.0005, "stopping": START + end}, 0.0, users)
    assert window.steady
    truth = summarize(in_step_users(None, users, end, 8.0, 0.03, 8), window).output_tok_s
    error = abs(truth / summarize(real, window).output_tok_s - 1)
    bound = client_bounds(real, window, [ClientStats(process="p", lag=monitor(loop, end + 2))], 0.01)["output_tok_s"].bound
    assert error > 0.3 and bound is not None and error <= bound, (error, bound)


def test_no_more_streams_begin_past_a_steady_runs_end_than_twice_the_most_that_began_as_fast_inside_it():
    """A stream not begun at the run's end is charged its first chunk, but across the users no more
    than twice as many as began within a span as long inside a steady run: a server that begins
    streams one at a time does not begin them all past the end; one that begins a batch at once was
    seen doing so. Before a steady state, no cap."""
    one_by_one = FirstChunks(np.arange(0.0, 10.0, 0.1), 2.0, True)  # a stream begun every 100 ms, 2 tokens a first chunk
    assert one_by_one.most_within(0.05) == 2 * 1 * 2.0 and one_by_one.most_within(0.25) == 2 * 3 * 2.0
    batches = FirstChunks(np.sort(np.concatenate([np.full(50, 1.0), np.full(50, 5.0)])), 1.0, True)
    assert batches.most_within(0.01) == 2 * 50
    assert FirstChunks(np.arange(0.0, 10.0, 0.1), 2.0, False).most_within(0.05) == math.inf
    users = [Traded(3.0, 1.0, 0.05)] * 40  # 40 streams not begun, each 1 token in a first chunk
    assert Traded.of(users).total(one_by_one) == pytest.approx(40 * 3.0 + 2 * 1 * 2.0)
    assert Traded.of(users).total(batches) == pytest.approx(40 * 3.0 + 40 * 1.0)
