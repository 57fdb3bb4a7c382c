"""R2: a long stretch is placed in time and counts at the recorded times it reached (docs/client-error.md)."""

from __future__ import annotations

from client_sim import START, closed_loop

from rig.load.client_error import client_bounds
from rig.load.summary import Window
from rig.load.wire import ClientStats


def test_a_long_stretch_just_outside_the_window_still_bounds_every_figure():
    """A stall a moment after the window closes reaches the last chunks of requests sent inside it:
    its delay bounds them, whatever the samples inside the window say."""
    records, _ = closed_loop(None, 2, 8.0, 16, 0.1, 0.02)
    window = Window(start=START + 1, end=START + 5, run_start=START, run_end=START + 8, steady=True, opened_by="simulated")
    lag = [(START + 1 + 0.012 * k, 0.0005) for k in range(400)] + [(START + 5.2, 0.25)]
    bounds = client_bounds(records, window, [ClientStats(process="p", lag=lag)], limit=0.01)
    assert all(b.bound is not None for b in bounds.values()), bounds
    assert bounds["itl_p99_ms"].bound > 1 and not bounds["itl_p99_ms"].holds
