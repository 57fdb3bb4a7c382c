"""How far the client's own timing could move each reported figure: validity in units of error.

The model is written as numbered rules in docs/client-error.md (R1-R16); each function here names the
rule it follows. A bound is a share of the reported figure: the truth lies within
reported * (1 +/- bound). A figure is usable when its bound is at most the scenario's
`client_error_limit` (1% by default).

- delays: a process's delays as its lag monitor met them (R1 short, R2 long stretches in time);
- per_request: summed durations (R4) and percentiles (R5), with each read's loop-pass wait (R3);
- holds: what holds a user's timeline back (R6 first send, R7 turnaround, R8 an arrival's send);
- timeline, aggregate: the aggregate rate by the window's edges (R9-R14);
- steady: the aggregate at a steady state, over every process at once (R15);
- inputs, build: what the bounds read of each process;
- figures: each figure's bound and the bound over the processes (R16).
"""

from __future__ import annotations

from rig.load.client_error.aggregate import AggregateParts, aggregate_parts
from rig.load.client_error.build import figure_inputs
from rig.load.client_error.delays import CLOCK_RESOLUTION_S, DelayLevel, LagProfile, ShortDelays, Stretch
from rig.load.client_error.figures import BOUNDS, POOLED, SPANS, bound, monitored
from rig.load.client_error.holds import first_send_hold, scheduled_holds, turnaround_hold
from rig.load.client_error.inputs import FigureInputs
from rig.load.client_error.steady import steady_state_bound, steady_state_moved
from rig.load.client_error.terms import NO_BOUND, UNBOUNDED, Bound, Hold, Term, share_of_reported, share_text
from rig.load.client_error.timeline import FirstChunks, Timeline, Traded, Unread
from rig.load.records import RequestRecord
from rig.load.summary import ClientBound, Window
from rig.load.wire import ClientStats

__all__ = [
    "BOUNDS", "CLOCK_RESOLUTION_S", "NO_BOUND", "POOLED", "SPANS", "UNBOUNDED", "AggregateParts", "Bound", "DelayLevel",
    "FigureInputs", "FirstChunks", "Hold", "LagProfile", "ShortDelays", "Stretch", "Term", "Timeline", "Traded", "Unread",
    "aggregate_parts", "bound", "client_bounds", "figure_inputs", "first_send_hold", "judged_bounds", "monitored",
    "scheduled_holds", "share_of_reported", "share_text", "steady_state_bound", "steady_state_moved", "turnaround_hold",
]


def client_bounds(records: list[RequestRecord], window: Window, clients: list[ClientStats],
                  limit: float, dispatcher: ClientStats | None = None, pause_s: float = 0.0) -> dict[str, ClientBound]:
    """Per figure, the most the client's timing could have moved it (a share of the figure), R16 over
    the Locust processes (`dispatcher`: the master's samples, R6; `pause_s`: a conversation's think
    time, R7). A figure with no samples has bound None, which never holds."""
    return judged_bounds(figure_inputs(records, window, clients, dispatcher, pause_s), limit)


def judged_bounds(inputs: list[FigureInputs], limit: float) -> dict[str, ClientBound]:
    """client_bounds from the processes' inputs (figure_inputs): each figure's bound held to `limit`."""
    unmonitored = not monitored(inputs)
    out = {}
    for name in BOUNDS:
        worst = bound(name, inputs).total
        if worst is None:
            reason = "no lag samples inside the window" if unmonitored else "no samples of it inside the window"
        elif worst > limit:
            reason = f"the client's timing could move it by {share_text(worst, limit)} > {share_text(limit)}"
        else:
            reason = None
        out[name] = ClientBound(bound=worst, limit=limit, holds=reason is None, reason=reason)
    return out
