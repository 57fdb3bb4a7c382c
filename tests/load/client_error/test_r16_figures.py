"""R16: every reported figure has a bound, the worst process's or the pooled one; no samples, no bound. (docs/client-error.md)"""

from __future__ import annotations

from client_sim import FIGURES, START, closed_loop

from rig.load.client_error import BOUNDS, client_bounds
from rig.load.summary import HEADLINE, LATENCY, Window
from rig.load.wire import ClientStats


def test_every_reported_figure_has_a_bound():
    from rig.load.sweep import BOUNDED_COLUMNS

    reported = {f.name for f in HEADLINE.values()} | {f.name for f in LATENCY} | set(BOUNDED_COLUMNS.values())
    assert set(FIGURES) == set(BOUNDS) == reported


def test_no_lag_samples_is_no_bound():
    records, _ = closed_loop(None, 1, 6.0, 8, 0.1, 0.02)
    window = Window(start=START + 1, end=START + 5, run_start=START, run_end=START + 6, steady=True, opened_by="simulated")
    bounds = client_bounds(records, window, [ClientStats(process="p", lag=[])], limit=0.01)
    assert all(b.bound is None and not b.holds and b.reason == "no lag samples inside the window" for b in bounds.values())
    assert all(not b.holds for b in client_bounds(records, window, [], limit=0.01).values())
