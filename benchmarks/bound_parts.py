"""What the aggregate's client bound (output_tok_s) of a run is made of, from the run's own files:
per Locust process the edges' rule (each user's shift traded at both edges) and its parts, then the
pooled steady-state rule (the shifts' move across the window, the late reads traded at the edges),
and the users' shifts at the window's start: the first send's hold-up and the turnarounds before it.

    python benchmarks/bound_parts.py RUN_DIR        # a run directory: records-*.jsonl, client-*.json, summary.json

Prints figures; changes nothing. The bound it recomputes is the current rule's, which may differ from
the one the run's summary.json recorded."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rig.load import client_error  # noqa: E402
from rig.load.records import read_records  # noqa: E402
from rig.load.summary import RunSummary  # noqa: E402
from rig.loadrun.writeup import read_clients, read_dispatcher  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    args = parser.parse_args()
    window = RunSummary.read(args.run).metrics.window
    records, clients, dispatcher = read_records(args.run), read_clients(args.run), read_dispatcher(args.run)
    bounds = client_error.client_bounds(records, window, clients, 0.01, dispatcher)
    print("bounds: " + ", ".join(f"{name} {'-' if b.bound is None else f'{100 * b.bound:.3f}%'}" for name, b in bounds.items()))
    inputs = client_error.figure_inputs(records, window, clients, dispatcher)
    parts = []
    for i in inputs:
        part = i.aggregate
        if part is None or part.timelines is None:
            print(f"{i.profile.process}: no bound")
            continue
        parts.append(part)
        start, end = (client_error.Traded.of([line.traded[k] for line in part.timelines]).total(i.first_chunks) / part.tokens
                      for k in (0, 1))
        print(f"{i.profile.process}: {part.tokens:,.0f} tokens; edges' rule {100 * part.by_edges_share:.3f}% (shifts traded at the start "
              f"{100 * start:.3f}%, at the end {100 * end:.3f}%; between requests {100 * part.between_share:.3f}%)")
    lines = [line for part in parts for line in part.timelines]
    if not lines:
        return 1
    tokens = sum(part.tokens for part in parts)
    first_chunks = inputs[0].first_chunks
    moved = client_error.steady_state_moved(lines, window, first_chunks)
    traded = max(client_error.Traded.of([p.read_late_traded[k] for p in parts]).total(first_chunks) for k in (0, 1))
    print("steady-state rule: " + ("none (no steady window, or shifts as long as the window)" if moved is None else
                                   f"shifts moved {100 * moved / tokens:.3f}%, late reads traded {100 * traded / tokens:.3f}%"))
    first = np.array([line.holds[0].seconds for line in lines]) * 1e3
    before = np.array([line.held_by_s(window.start) for line in lines]) * 1e3
    inside = np.array([line.held_by_s(window.end) for line in lines]) * 1e3 - before
    print(f"users' shift at the window's start: p50 {np.median(before):.1f} ms, max {before.max():.1f} ms; of it the first send's "
          f"hold-up p50 {np.median(first):.1f} ms, max {first.max():.1f} ms; held back inside the window p50 {np.median(inside):.1f} ms, "
          f"max {inside.max():.1f} ms ({len(lines)} users)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
