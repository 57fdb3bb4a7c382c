"""R16: every reported figure has a bound, the worst process's or the pooled one; no samples, no bound (docs/client-error.md)."""

from __future__ import annotations

import random

from client_sim import FIGURES, PROFILES, START, busy_loop, closed_loop, monitor

from rig.load.client_error import BOUNDS, bound, client_bounds, figure_inputs
from rig.load.figures import HEADLINE, LATENCY
from rig.load.summary import Window
from rig.load.wire import ClientStats


def test_every_reported_figure_has_a_bound():
    from rig.loadrun.sweep import BOUNDED_COLUMNS

    reported = {f.name for f in HEADLINE.values()} | {f.name for f in LATENCY} | set(BOUNDED_COLUMNS.values())
    assert set(FIGURES) == set(BOUNDS) == reported


def test_no_lag_samples_is_no_bound():
    records, _ = closed_loop(None, 1, 6.0, 8, 0.1, 0.02)
    window = Window(start=START + 1, end=START + 5, run_start=START, run_end=START + 6, steady=True, opened_by="simulated")
    bounds = client_bounds(records, window, [ClientStats(process="p", lag=[])], limit=0.01)
    assert all(b.bound is None and not b.holds and b.reason == "no lag samples inside the window" for b in bounds.values())
    assert all(not b.holds for b in client_bounds(records, window, [], limit=0.01).values())


def test_a_bound_shows_the_terms_that_made_it():
    """bound(figure, inputs) returns the total client_bounds reports and the terms of the bound taken,
    each named by its rule: R4's seconds add up to what moved the decode rate, R5's level is a
    candidate of R1, and the aggregate's are the edges' (R9, R13, R14) or the steady state's (R15)."""
    rng = random.Random(0)
    loop = busy_loop(rng, 19.0, *PROFILES["busy"])
    records, _ = closed_loop(loop, 8, 16.0, 64, 0.2, 0.02)
    window = Window(start=START + 3.0, end=START + 14.0, run_start=START, run_end=START + 16.0, steady=True, opened_by="simulated")
    clients = [ClientStats(process="p", lag=monitor(loop, 16.0))]
    inputs = figure_inputs(records, window, clients)
    reported = client_bounds(records, window, clients, 0.01)
    for name in BOUNDS:
        assert bound(name, inputs).total == reported[name].bound, name
    decode = bound("user_decode_tok_s", inputs)
    terms = {t.name: t for t in decode.terms}
    moved_s = sum(terms[n].value for n in ("bias_s", "spread_s", "largest_short_s", "long_stretches_s", "loop_pass_waits_s"))
    assert decode.total == moved_s / (terms["durations_s"].value - moved_s)
    assert {t.rule for t in decode.terms} >= {"R2", "R3", "R4"}
    [level] = [t.value for t in bound("itl_p50_ms", inputs).terms if t.name == "level_s"]
    assert level in [lv.level_s for lv in inputs[0].profile.levels()]
    assert {t.rule for t in bound("output_tok_s", inputs).terms} & {"R9", "R15"}
    edges = {t.rule: t.value for t in BOUNDS["output_tok_s"](inputs[0]).terms if t.name == "longest_user_hold_s"}
    assert set(edges) == {"R6", "R7"} and edges["R7"] > 0  # closed-loop users: a first send and turnarounds
