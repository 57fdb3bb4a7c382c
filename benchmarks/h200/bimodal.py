"""The within-boot bimodality experiment (issue 25, item 4): per-request decode speed of the runs of
one boot, and on which cores the server's processes ran during each run's window.

On the CPU-launch-bound `llama-h200` (8 x 1024, TP1, CUDA graphs) whole requests decoded at ITL
~1.6 ms or ~2.2 ms inside one boot (2026-11-30). `resolution.sh bimodal` runs prose-c1 three times on
one boot: as booted, with the API server and EngineCore pinned to separate cores, and unpinned again
(the order's control), the load client on cores of its own throughout; this reads them back:

    python benchmarks/h200/bimodal.py RESULTS_DIR [--cores cores.log]

Per run: the requests' time per output token (rig.load.request_metrics.tpot, the requests sent inside
the window), split in two by 1-D k-means (the two groups' means and the slow group's share describe
the modes), and the bimodality coefficient that says whether there are two (above 5/9). cores.log lines are `time pid psr` samples (`ps -o psr`).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rig.load.records import read_records  # noqa: E402
from rig.load.request_metrics import done_in_window, tpot  # noqa: E402
from rig.load.summary import RunSummary  # noqa: E402

BIMODAL = 5 / 9  # the bimodality coefficient of a uniform distribution: above it, two modes


def two_means(values: list[float]) -> tuple[list[float], list[float]]:
    """The split of sorted values into a low and a high group that minimises the within-group sum of
    squares (exact for one dimension: every cut point is tried)."""
    ordered = sorted(values)
    best, cut = math.inf, 1
    for k in range(1, len(ordered)):
        low, high = ordered[:k], ordered[k:]
        cost = sum((v - statistics.fmean(low)) ** 2 for v in low) + sum((v - statistics.fmean(high)) ** 2 for v in high)
        if cost < best:
            best, cut = cost, k
    return ordered[:cut], ordered[cut:]


def bimodality_coefficient(values: list[float]) -> float:
    """Sarle's bimodality coefficient with the sample-size correction (Pfister et al. 2013): (skew^2 + 1)
    / (excess kurtosis + 3 (n-1)^2 / ((n-2)(n-3))), both bias-corrected. 1/3 for a normal sample, 5/9
    for a uniform one; above 5/9 a sample is more likely two modes than one. (A distance between the
    two k-means groups is no such test: a single normal split at its mean already gives Ashman's D 2.65.)"""
    from scipy.stats import kurtosis, skew

    n = len(values)
    return float((skew(values, bias=False) ** 2 + 1) / (kurtosis(values, bias=False) + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3))))


def cores_in(samples: list[tuple[float, int, int]], start: float, end: float) -> dict[int, str]:
    """pid -> the cores it was seen on inside [start, end], the share on its most used one, and how
    often consecutive samples moved it."""
    out = {}
    for pid in sorted({pid for _, pid, _ in samples}):
        seen = [core for t, p, core in samples if p == pid and start <= t <= end]
        if not seen:
            continue
        top = max(set(seen), key=seen.count)
        moves = sum(a != b for a, b in zip(seen, seen[1:]))
        out[pid] = (f"{len(set(seen))} core(s) {sorted(set(seen))}, {100 * seen.count(top) / len(seen):.0f}% on {top}, "
                    f"{moves} move(s) in {len(seen)} samples")
    return out


def read_cores(path: Path | None) -> list[tuple[float, int, int]]:
    if path is None or not path.exists():
        return []
    samples = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            try:
                samples.append((float(parts[0]), int(parts[1]), int(parts[2])))
            except ValueError:
                continue  # a sample cut by the end of the run
    return samples


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="the experiment's RIG_RESULTS_DIR")
    parser.add_argument("--cores", type=Path, help="the `time pid psr` samples of the server's processes")
    args = parser.parse_args(argv)
    samples = read_cores(args.cores)
    runs = sorted((path.parent for path in args.results.rglob("summary.json")), key=lambda p: RunSummary.read(p).provenance.time)
    for run_dir in runs:
        summary = RunSummary.read(run_dir)
        window = summary.metrics.window
        per_token = [value for done in done_in_window(read_records(run_dir), window.start, window.end)
                     if (value := tpot(done)) is not None]
        label = f"{run_dir.relative_to(args.results)}{' (warmup)' if summary.warmup else ''}"
        if len(per_token) < 5:
            print(f"{label}: {len(per_token)} request(s), too few to split")
            continue
        quantiles = statistics.quantiles(per_token, n=10)
        low, high = two_means(per_token)
        coefficient = bimodality_coefficient(per_token)
        print(f"{label}: {len(per_token)} requests, time per token p10 {1000 * quantiles[0]:.3f} p50 "
              f"{1000 * statistics.median(per_token):.3f} p90 {1000 * quantiles[-1]:.3f} ms; two groups "
              f"{1000 * statistics.fmean(low):.3f} ms (n={len(low)}) and {1000 * statistics.fmean(high):.3f} ms "
              f"(n={len(high)}), slow share {100 * len(high) / len(per_token):.0f}%; bimodality coefficient {coefficient:.2f} "
              f"({'two modes' if coefficient > BIMODAL else 'one mode'} by the 5/9 rule); "
              f"headline {summary.headline_text()}")
        for pid, where in cores_in(samples, window.start, window.end).items():
            print(f"    pid {pid}: {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
