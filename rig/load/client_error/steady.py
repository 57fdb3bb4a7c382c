"""The aggregate rate's bound at a steady state, read over every process at once (docs/client-error.md,
R15): a window shifted whole counts what the ideal client's counted, up to the fluctuation of the
users' tokens in intervals of their shifts; the hold-backs inside the window are lost tokens."""

from __future__ import annotations

from rig.load.client_error.aggregate import traded_at_the_edges
from rig.load.client_error.inputs import FigureInputs
from rig.load.client_error.terms import NO_BOUND, Bound, Term, share_of_reported
from rig.load.client_error.timeline import FirstChunks, Grid, Timeline, Traded, tokens_in
from rig.load.summary import Window

STEADY_GRID = 10_000  # where the shifted counts are read across the window (3 ms apart over 30 s)


def steady_state_moved(timelines: list[Timeline], window: Window, first_chunks: FirstChunks) -> float | None:
    """R15: tokens the users' hold-backs moved across the window's edges at a steady state. A user
    runs behind the ideal client by a_u at the window's start and a_u + d_u at its end, so the figure
    moves by F(W0) - G(W1), F(t) = the users' tokens in [t - a_u, t), G(t) over [t - a_u - d_u, t). At
    a steady state both are draws of the same sums at any time, read from the timelines across the
    window: the move lies within [min F - max G, max F - min G]. A user whose cycle outlasts the
    stretch read keeps its shift traded at both edges (R9). None where the timelines cannot show
    those sums over half the window, or for an arrival schedule (R8 reads it at the edges)."""
    if not timelines or any(line.scheduled for line in timelines):
        return None
    at_start = [line.held_by_s(window.start) for line in timelines]
    spans = [(before, line.held_by_s(window.end) - before) for line, before in zip(timelines, at_start)]
    last = window.run_end - max(before + inside for before, inside in spans)
    if last - window.start < window.seconds / 2:
        return None
    step = (last - window.start) / STEADY_GRID
    # Each point of the grid (from W0, before `last`) with the step after it. Between two points an
    # interval holds at most what the one a step longer from the first point holds, and at least
    # what the one a step shorter from the second holds.
    grid, after = Grid(window.start, step, STEADY_GRID), Grid(window.start, step, STEADY_GRID, lead_s=step)
    counted, outlasting = [], []
    for line, span in zip(timelines, spans):
        (outlasting if line.cycle_s(window.run_end) > last - window.start else counted).append((line, span))
    lines = [line for line, _ in counted]
    most_before, most_through = tokens_in(lines, grid, [before + step for _, (before, _) in counted],
                                          [before + inside + step for _, (before, inside) in counted])
    least_before, least_through = tokens_in(lines, after, [max(before - step, 0.0) for _, (before, _) in counted],
                                            [max(before + inside - step, 0.0) for _, (before, inside) in counted])
    moved = max(most_through.max() - least_before.min(), most_before.max() - least_through.min())
    return float(moved + traded_at_the_edges([line for line, _ in outlasting], first_chunks))


def steady_state_bound(inputs: list[FigureInputs]) -> Bound:
    """R15 over every process: the shifts' move across the window, plus what late reads trade at the
    edges (R9), over the tokens, plus the hold-back between requests (R13)."""
    parts = [i.aggregate for i in inputs]
    if not inputs or not inputs[0].window.steady or any(p is None or p.timelines is None for p in parts):
        return NO_BOUND
    window, first_chunks = inputs[0].window, inputs[0].first_chunks
    moved = steady_state_moved([line for p in parts for line in p.timelines], window, first_chunks)  # type: ignore[union-attr]
    if moved is None:
        return NO_BOUND
    traded = max(Traded.of([p.read_late_traded[k] for p in parts]).total(first_chunks) for k in (0, 1))  # type: ignore[union-attr]
    tokens = sum(p.tokens for p in parts)  # type: ignore[union-attr]
    between = max(p.between_share for p in parts)  # type: ignore[union-attr]
    return Bound(share_of_reported((moved + traded) / tokens + between),
                 (Term("R15", "steady_moved_tokens", moved), Term("R9", "read_late_traded_tokens", traded),
                  Term("R15", "window_tokens", tokens), Term("R13", "between_share", between)))
