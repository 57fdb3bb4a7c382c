"""R15: at a steady state the shifts before the window cancel between its edges (docs/client-error.md)."""

from __future__ import annotations

import pytest
from client_sim import START, cut_at, locust_batches, monitor, spawned_users, stalls_at

from rig.load.client_error import client_bounds
from rig.load.metrics import summarize
from rig.load.summary import Window
from rig.load.wire import ClientStats


@pytest.mark.slow  # two runs of 300 simulated users
def test_shifts_before_a_steady_window_cancel_between_its_edges():
    """300 users spawned in Locust's batches, with stalls of 0.6 s and 0.9 s during the spawn: every
    later batch runs up to 1.5 s behind the ideal client's for the whole run, as at 3000 streams on
    the H200 (shifts of 0.3-1.3 s). Traded at both edges those shifts read several percent; at a
    steady state a window shifted whole holds what the ideal's held (one was 14% where delivered /
    offered put the error near 0.3%), and what the stalls moved stays within the steady-state bound,
    which holds the 1% limit. A window that is not steady keeps the edges' bound."""
    users, rate, tokens, ttft, itl = 300, 100.5, 64, 0.2, 0.05
    loop = stalls_at([(0.7, 0.6), (2.1, 0.9)], 200.0)
    starts, spawned = locust_batches(loop, users, rate)
    ideal_starts, _ = locust_batches(None, users, rate)
    end = spawned + 25.0
    records = cut_at(spawned_users(loop, starts, end + 1, tokens, ttft, itl, 1, 0.05), START + end)
    ideal = cut_at(spawned_users(None, ideal_starts, end + 1, tokens, ttft, itl, 1, 0.05), START + end)
    bounds = {}
    for steady in (True, False):
        window = Window(start=START + spawned + ttft + tokens * itl + 0.5, end=START + end, run_start=START + spawned,
                        run_end=START + end, steady=steady, opened_by="simulated: a request's lifetime after spawning_complete")
        error = abs(summarize(ideal, window).output_tok_s / summarize(records, window).output_tok_s - 1)
        bounds[steady] = client_bounds(records, window, [ClientStats(process="p", lag=monitor(loop, end + 1))], limit=0.01)["output_tok_s"]
        assert bounds[steady].bound is not None and error <= bounds[steady].bound, (steady, error, bounds[steady])
    assert bounds[True].holds and bounds[False].bound > 0.05, bounds
