"""The comparison design at the noise measured on a real engine: false verdicts, coverage,
precision and power for 2-8 boot pairs, simulated through compare_boots (rig/compare/calibration.py).

    .venv/bin/python benchmarks/design_at_real_noise.py [--simulations 1000]

Noise settings (benchmarks/RESULTS.md, "Real engine"): vLLM 0.24.0, TP2 eager, the generated 8 x 1024
Llama on H200s, prose-c1 at c=1; a CPU-launch-bound configuration. The calibration table's own
settings (boot sd 1% and 3%, round sd 1%) are beside them for scale. A GPU-bound model's noise was
not measured (device time), so the default design is not re-derived from it here.
"""

from __future__ import annotations

import argparse
import math

from rig.compare.calibration import Noise, cell
from rig.compare.stats import pairs_needed

SETTINGS = {
    "H200 session B (3 boots): boot 12%, round 8%": Noise(boot_sd=0.12, round_sd=0.08, rounds=2),
    "H200 session C (6 boots): boot ~0%, round 13%": Noise(boot_sd=0.0, round_sd=0.13, rounds=2),
    "calibration table: boot 3%, round 1%": Noise(boot_sd=0.03, round_sd=0.01, rounds=3),
}
PAIRS = (2, 4, 6, 8)
EFFECTS_PCT = (-5.0, -10.0, -20.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=1000)
    args = parser.parse_args()
    se = 100 * math.sqrt(0.05 * 0.95 / args.simulations)
    print(f"{args.simulations} simulated comparisons per cell (Monte-Carlo se of a 5% rate: {se:.2f} points); block drift 2%")
    print(f"{'noise':46} {'pairs':>5} | {'false':>6} {'cover':>6} {'precision':>9} | "
          + " ".join(f"{'power ' + format(e, '+.0f') + '%':>11}" for e in EFFECTS_PCT))
    seed = 100
    for label, noise in SETTINGS.items():
        for pairs in PAIRS:
            seed += 1
            null = cell(pairs, noise, 0.0, args.simulations, seed)
            powers = [cell(pairs, noise, effect, args.simulations, seed + 1000 * k).power for k, effect in enumerate(EFFECTS_PCT, 1)]
            print(f"{label:46} {pairs:5d} | {100 * null.verdicts:5.1f}% {100 * null.coverage:5.1f}% {null.precision_pct:8.1f}% | "
                  + " ".join(f"{100 * p:10.1f}%" for p in powers))
        pair_sd = math.sqrt(2 * (noise.boot_sd ** 2 + noise.round_sd ** 2 / noise.rounds))
        needed = {target: pairs_needed(pair_sd, target) for target in (5.0, 10.0, 20.0)}
        print(f"{'':46} pairs whose interval resolves +-5% / 10% / 20%: "
              + " / ".join(str(n) if n is not None else ">1000" for n in needed.values()))


if __name__ == "__main__":
    main()
