"""The comparison design at the noise measured on a real engine: false verdicts, coverage,
precision and power for 2-8 boot pairs, simulated through compare_boots (rig/compare/calibration.py).

    .venv/bin/python benchmarks/design_at_real_noise.py [--simulations 1000]

Noise settings (benchmarks/RESULTS.md, "Real engine" and "Resolution"): vLLM 0.24.0 on H200s,
prose-c1 at c=1. The GPU-bound configuration (llama8b-h200: 8B widths, TP1, CUDA graphs, 2026-12-01)
is what the default design (rig/compare/design.py) is derived from: boot sd 0.01%, round sd 0.02%
over 8 warm boots (code-c1 and the loaded decode-c32, 32 users, 2026-12-03: read from the rounds of
an identical-arm comparison, benchmarks/h200-2026-12-03/rounds-stats.txt;
prose-c1's identical arms again on 2026-12-04, benchmarks/h200-2026-12-04/; SGLang 0.5.17 on the
same widths, benchmarks/h200-2026-12-04-sglang/); the row at ten times that noise (0.1%, the spread the issue saw between warm boots
of two machines) shows the margin. The CPU-launch-bound TP2 eager rows (2026-11-30) and the
calibration table's own settings are beside them for scale.
"""

from __future__ import annotations

import argparse
import math

from rig.compare.calibration import Noise, cell
from rig.compare.stats import pairs_needed

SETTINGS = {
    "H200 8B TP1 graphs (8 boots): boot 0.01%, round 0.02%": Noise(boot_sd=0.0001, round_sd=0.0002, drift_sd=0.001, rounds=2),
    "H200 8B TP1 graphs, evening (4 boots): boot 0.053%, round 0.033%": Noise(boot_sd=0.00053, round_sd=0.00033, drift_sd=0.001, rounds=2),
    "H200 8B TP1 graphs, night (8 boots): boot 0.065%, round 0.018%": Noise(boot_sd=0.00065, round_sd=0.00018, drift_sd=0.001, rounds=2),
    "H200 8B TP1 graphs, 2026-12-02 (8 boots): boot 0.034%, round 0.036%": Noise(boot_sd=0.00034, round_sd=0.00036, drift_sd=0.001,
                                                                               rounds=2),
    "H200 8B TP1 graphs, 2026-12-03 code-c1 (8 boots): boot 0.008%, round 0.040%": Noise(boot_sd=0.00008, round_sd=0.00040,
                                                                                      drift_sd=0.001, rounds=2),
    "H200 8B TP1 graphs, 2026-12-03 decode-c32 (8 boots): boot 0.27%, round 0.64%": Noise(boot_sd=0.0027, round_sd=0.0064,
                                                                                        drift_sd=0.001, rounds=2),
    "H200 8B TP1 graphs, 2026-12-04 prose-c1, identical arms (8 boots): boot 0.016%, round 0.033%": Noise(
        boot_sd=0.00016, round_sd=0.00033, drift_sd=0.001, rounds=2),
    "SGLang 0.5.17 8B TP1, 2026-12-04 prose-c1, gpu_delay off vs on (8 boots): boot 0.051%, round 0.040%": Noise(
        boot_sd=0.00051, round_sd=0.00040, drift_sd=0.001, rounds=2),
    "  2026-12-03 decode-c32 with 6 rounds per boot": Noise(boot_sd=0.0027, round_sd=0.0064, drift_sd=0.001, rounds=6),
    "  ten times that: boot 0.1%, round 0.2%": Noise(boot_sd=0.001, round_sd=0.002, drift_sd=0.001, rounds=2),
    "H200 session B (3 boots): boot 12%, round 8%": Noise(boot_sd=0.12, round_sd=0.08, rounds=2),
    "H200 session C (6 boots): boot ~0%, round 13%": Noise(boot_sd=0.0, round_sd=0.13, rounds=2),
    "calibration table: boot 3%, round 1%": Noise(boot_sd=0.03, round_sd=0.01, rounds=3),
}
PAIRS = (2, 3, 4, 6, 8)
EFFECTS_PCT = (-0.5, -1.0, -5.0, -20.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=1000)
    parser.add_argument("--only", default="", help="only the noise rows whose label contains this text")
    args = parser.parse_args()
    se = 100 * math.sqrt(0.05 * 0.95 / args.simulations)
    print(f"{args.simulations} simulated comparisons per cell (Monte-Carlo se of a 5% rate: {se:.2f} points); block drift "
          "0.1% for the GPU-bound rows, 2% for the others")
    width = max(len(label) for label in SETTINGS)
    print(f"{'noise':{width}} {'pairs':>5} | {'false':>6} {'cover':>6} {'precision':>9} | "
          + " ".join(f"{'power ' + format(e, '+g') + '%':>11}" for e in EFFECTS_PCT))
    seed = 100
    for label, noise in SETTINGS.items():
        if args.only not in label:
            continue
        for pairs in PAIRS:
            seed += 1
            null = cell(pairs, noise, 0.0, args.simulations, seed)
            powers = [cell(pairs, noise, effect, args.simulations, seed + 1000 * k).power for k, effect in enumerate(EFFECTS_PCT, 1)]
            print(f"{label:{width}} {pairs:5d} | {100 * null.verdicts:5.1f}% {100 * null.coverage:5.1f}% {null.precision_pct:8.1f}% | "
                  + " ".join(f"{100 * p:10.1f}%" for p in powers))
        pair_sd = math.sqrt(2 * (noise.boot_sd ** 2 + noise.round_sd ** 2 / noise.rounds))
        needed = {target: pairs_needed(pair_sd, target) for target in (0.5, 5.0, 20.0)}
        print(f"{'':{width}} pairs whose interval resolves +-0.5% / 5% / 20%: "
              + " / ".join(str(n) if n is not None else ">1000" for n in needed.values()))


if __name__ == "__main__":
    main()
