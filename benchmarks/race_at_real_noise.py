"""The race of `rig tune` at the boot noise measured on real engines: how often a race eliminates
the true best (or, with every candidate equal, anything), how often it names the true best alone,
and the boots it spends against `rig compare`'s default ABBA of every pair, simulated through the
rule `rig tune` runs (rig/tune/calibration.py).

    .venv/bin/python benchmarks/race_at_real_noise.py [--simulations 300] [--candidates 8]

Noise settings: the boot and round sd of the claims in docs/validation.md (vllm-c1-noise on its
quietest and noisiest host, vllm-loaded-noise's decode-c32), with rig compare's 2 rounds per boot.
"""

from __future__ import annotations

import argparse

from rig.compare.calibration import Noise
from rig.tune.calibration import pairwise_abba_boots, race_cell
from rig.tune.rule import DEFAULT_MAX_ROUNDS, RaceRule

GPU_BOUND = {"drift_sd": 0.001, "rounds": 2}
SETTINGS = {
    "vllm-c1-noise, quietest host: boot 0.016%, round 0.033%": Noise(boot_sd=0.00016, round_sd=0.00033, **GPU_BOUND),
    "vllm-c1-noise, noisiest host: boot 0.065%, round 0.018%": Noise(boot_sd=0.00065, round_sd=0.00018, **GPU_BOUND),
    "vllm-loaded-noise, decode-c32: boot 0.33%, round 0.66%": Noise(boot_sd=0.0033, round_sd=0.0066, **GPU_BOUND),
}


# tiny-cpu's token_delay space on a busy 2-core box (docs/validation.md: boot noise 2-26% there):
# 0, 1, 2 and 3 ms per step cost about 0, 14, 22 and 47% of its decode rate, each crossed with a
# setting that changes nothing (the e2e test's space).
TINY = ("tiny-cpu on a busy 2-core box: boot 8%, round 5%", Noise(boot_sd=0.08, round_sd=0.05, drift_sd=0.02, rounds=1),
        "token delay 0-3 ms x a no-op", [0.0, 0.0, -14.0, -14.0, -22.0, -22.0, -47.0, -47.0])


def truths(candidates: int) -> dict[str, list[float]]:
    return {"all equal": [0.0] * candidates,
            "best by 0.5%": [0.0] + [-0.5] * (candidates - 1),
            "best by 1%": [0.0] + [-1.0] * (candidates - 1),
            "spread 0.5-5%": [0.0] + [-0.5 - 4.5 * i / max(1, candidates - 2) for i in range(candidates - 1)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simulations", type=int, default=300)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS)
    args = parser.parse_args()
    rule = RaceRule(candidates=args.candidates, max_rounds=args.max_rounds)
    print(f"{args.candidates} candidates, at most {args.max_rounds} rounds, {args.simulations} races per row; "
          f"{rule.statement()}")
    print(f"ABBA of every pair at rig compare's default: {pairwise_abba_boots(args.candidates)} boots; "
          f"every candidate every round: {args.candidates * args.max_rounds} boots\n")
    print("| noise | truth | true best eliminated | any eliminated | true best named alone | winner is a true best "
          "| boots (mean) | stops |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, noise in SETTINGS.items():
        for name, truth in truths(args.candidates).items():
            cell = race_cell(truth, noise, rule, args.simulations, seed=7)
            stops = ", ".join(f"{stop} {100 * share:.0f}%" for stop, share in sorted(cell.stops.items()))
            print(f"| {label} | {name} | {100 * cell.best_eliminated:.1f}% | {100 * cell.any_eliminated:.1f}% | "
                  f"{100 * cell.named_alone:.1f}% | {100 * cell.winner_is_best:.1f}% | {cell.boots_mean:.1f} | {stops} |",
                  flush=True)
    if args.candidates == len(TINY[3]):
        label, noise, name, truth = TINY
        rule3 = RaceRule(candidates=args.candidates, max_rounds=3)
        cell = race_cell(truth, noise, rule3, args.simulations, seed=7)
        stops = ", ".join(f"{stop} {100 * share:.0f}%" for stop, share in sorted(cell.stops.items()))
        print(f"| {label}, at most 3 rounds | {name} | {100 * cell.best_eliminated:.1f}% | {100 * cell.any_eliminated:.1f}% | "
              f"{100 * cell.named_alone:.1f}% | {100 * cell.winner_is_best:.1f}% | {cell.boots_mean:.1f} | {stops} |")


if __name__ == "__main__":
    main()
