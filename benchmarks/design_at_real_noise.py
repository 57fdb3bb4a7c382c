"""The comparison design at the noise measured on a real engine: false verdicts, coverage,
precision and power for 2-8 boot pairs, simulated through compare_boots (rig/compare/calibration.py).

    .venv/bin/python benchmarks/design_at_real_noise.py [--simulations 1000] [--only TEXT]

Noise settings: the boot sd and round sd each claim's comparison measured (docs/validation.md; each
row names its claim), all on one H200 with an 8B model at TP1 with CUDA graphs: vLLM 0.24.0 at c=1
(vllm-c1-noise), a loaded decode of 32 users (vllm-loaded-noise) and SGLang 0.5.17 at c=1
(sglang-gpu-delay-40us). The rows below them give the margin: the noise rig/compare/design.py states
(quieter than any comparison kept under validation/), ten times that noise, a
CPU-launch-bound configuration (an 8 x 1024 model at TP2 without CUDA graphs, whose boots differed by
12% and rounds by 8-13%) and the calibration table's own settings.
"""

from __future__ import annotations

import argparse
import math

from rig.compare.calibration import Noise, cell
from rig.compare.stats import pairs_needed

GPU_BOUND = {"drift_sd": 0.001, "rounds": 2}  # 0.1% block drift, the default design's 2 rounds per boot
SETTINGS = {
    "vllm-c1-noise, quietest host: boot 0.016%, round 0.033%": Noise(boot_sd=0.00016, round_sd=0.00033, **GPU_BOUND),
    "vllm-c1-noise: boot 0.034%, round 0.036%": Noise(boot_sd=0.00034, round_sd=0.00036, **GPU_BOUND),
    "vllm-c1-noise, noisiest host: boot 0.065%, round 0.018%": Noise(boot_sd=0.00065, round_sd=0.00018, **GPU_BOUND),
    "vllm-loaded-noise, code-c1: boot 0.013%, round 0.040%": Noise(boot_sd=0.00013, round_sd=0.00040, **GPU_BOUND),
    "vllm-loaded-noise, decode-c32: boot 0.33%, round 0.66%": Noise(boot_sd=0.0033, round_sd=0.0066, **GPU_BOUND),
    "  decode-c32 with 6 rounds per boot": Noise(boot_sd=0.0033, round_sd=0.0066, drift_sd=0.001, rounds=6),
    "sglang-gpu-delay-40us: boot 0.051%, round 0.040%": Noise(boot_sd=0.00051, round_sd=0.00040, **GPU_BOUND),
    "rig/compare/design.py's: boot 0.01%, round 0.02%": Noise(boot_sd=0.0001, round_sd=0.0002, **GPU_BOUND),
    "  ten times that: boot 0.1%, round 0.2%": Noise(boot_sd=0.001, round_sd=0.002, **GPU_BOUND),
    "CPU-launch-bound TP2, boots apart: boot 12%, round 8%": Noise(boot_sd=0.12, round_sd=0.08, rounds=2),
    "CPU-launch-bound TP2, rounds apart: boot ~0%, round 13%": Noise(boot_sd=0.0, round_sd=0.13, rounds=2),
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
