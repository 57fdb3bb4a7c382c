"""Redraw the timeline pictures of load-test runs from the files each run wrote.

A run's `timeline.png` is drawn from its request records, server-metrics.jsonl and gpu-samples.jsonl
(rig.loadrun.writeup.draw_timeline); archives of raw results leave the PNGs out (they are most of an
archive's bytes and compress to nothing), so this puts them back, e.g. for a load run kept as evidence:

    mkdir -p /tmp/raw && xz -dc validation/vllm-c3000-frontends4/second-run.tar.xz | tar -C /tmp/raw -xf -
    .venv/bin/python benchmarks/redraw_timelines.py /tmp/raw [--force]

Every run directory (one with a summary.json) whose summary names a timeline and lacks it is drawn
again; --force redraws those that have one. Prints one line per run; a run written by another version
of rig is named and left (exit 1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rig.load.records import read_records  # noqa: E402
from rig.load.summary import RunSummary  # noqa: E402
from rig.loadrun.writeup import TIMELINE, draw_timeline, timeline_title  # noqa: E402
from rig.typed import StoredRecordError  # noqa: E402


def redraw(run_dir: Path, force: bool) -> str:
    summary = RunSummary.read(run_dir)
    if summary.observations is None or summary.observations.timeline is None:
        return "no timeline (the run drew none)"
    if (run_dir / TIMELINE).exists() and not force:
        return "kept (it has one)"
    provenance = summary.provenance
    # The boot's ref as rig.boot.state and rig.loadrun.attach write it: recipe[:variant], or the URL of a
    # server attached without a recipe.
    if provenance.driver == "attached" and provenance.recipe in (None, "attached") and provenance.variant is None:
        ref = provenance.base_url or "attached"
    else:
        ref = provenance.recipe + (f":{provenance.variant}" if provenance.variant else "")
    picture = draw_timeline(run_dir, read_records(run_dir), summary.metrics.window,
                            timeline_title(summary.name, ref, provenance.boot_id))
    return f"drew {picture.name}" if picture else "nothing to draw"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a directory of runs (searched recursively)")
    parser.add_argument("--force", action="store_true", help="redraw pictures that exist too")
    args = parser.parse_args(argv)
    runs = sorted(path.parent for path in args.results.rglob("summary.json"))
    if not runs:
        print(f"{args.results}: no run directory (summary.json) under it", file=sys.stderr)
        return 2
    unreadable = 0
    for run_dir in runs:
        try:
            outcome = redraw(run_dir, args.force)
        except StoredRecordError as error:  # written by another version of rig: its picture stays as archived
            outcome, unreadable = f"not drawn: {error}", unreadable + 1
        print(f"{run_dir.relative_to(args.results)}: {outcome}")
    return 1 if unreadable else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
