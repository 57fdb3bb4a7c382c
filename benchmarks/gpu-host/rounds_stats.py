"""rig's own statistics on the rounds a comparison measured, including boots it voided afterwards.

`rig compare` uses a boot only when every step after its rounds worked too (greedy identity, quality
probes). When a later step failed in every boot for one reason that does not touch speed (SGLang's
/v1/tokenize), the rounds were still measured and written. This reads them back and
applies the same functions the report uses (rig.compare.stats.compare_boots on the ABBA pairs, and
rig.compare.report.per_token_boots for time per token), so the figures can be stated, labelled as
what they are: not a verdict of `rig compare`, which voided those boots.

    python benchmarks/gpu-host/rounds_stats.py RESULTS/compare/ID [--scenario prose-c1]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rig.compare.model import BURN_IN_BLOCK
from rig.compare.report import STEP_FIGURE, STEP_UNIT, per_token_boots
from rig.compare.stats import DIFFERENCE, compare_boots


def in_progress_place(compare_dir: Path, stem: str, marker: dict, plan: dict) -> tuple[int, str] | None:
    """(block, arm) of a boot the session left in progress (`NN-arm.in-progress.json`: the host went
    back before its later steps ran), or None when it would not have been a measured boot: the plan's
    burn-in or control position, or a boot whose engine log says it compiled (rig would have kept it
    as a burn-in; its boot record says so, under the results' boots/)."""
    block, arm = plan["order"][int(stem.split("-", 1)[0])]
    if block == BURN_IN_BLOCK or (plan.get("control") and arm == plan["control"]["name"]):
        print(f"{stem}: in progress at the plan's {'burn-in' if block == BURN_IN_BLOCK else 'control'} position: left out")
        return None
    record = compare_dir.parent.parent / "boots" / str(marker.get("boot_id")) / "boot.json"
    log = json.loads(record.read_text()).get("compile_cache", {}).get("log") if record.is_file() else None
    if log == "compiled" and not plan.get("cold_caches") and plan.get("boot_state_control", True):
        print(f"{stem}: in progress, and its engine log says it compiled (rig would have booted it again): left out")
        return None
    said = {"reused": "its caches reused", "compiled": "compiled, as every boot of this plan does"}.get(log, "its engine log cannot say what it compiled")
    print(f"{stem}: in progress when the session ended, {said} (its rounds so far are counted)")
    return block, arm


def headline_rounds(compare_dir: Path, scenario: str, plan: dict) -> dict[str, dict[int, list[float]]]:
    """arm -> ABBA block -> that boot's measured rounds (tok/s per user), burn-ins and controls left out;
    a boot left in progress counts with the rounds it finished where it would have been measured."""
    boots: dict[str, dict[int, list[float]]] = {}
    for entry_path in sorted((compare_dir / "boots").glob("*.json")):
        entry = json.loads(entry_path.read_text())
        if entry.get("burn_in") or entry.get("control"):
            continue
        stem = entry_path.name.removesuffix(".json")
        if stem.endswith(".in-progress"):
            stem = stem.removesuffix(".in-progress")
            place = in_progress_place(compare_dir, stem, entry, plan)
            if place is None:
                continue
            entry["block"], entry["arm"] = place
        runs = compare_dir / "runs" / stem / f"attempt-{entry['attempt']}"
        rounds = [json.loads(path.read_text())["metrics"]["user_decode_tok_s"]["token_weighted"]
                  for path in sorted(runs.glob(f"round-*/{scenario}/summary.json"))]
        boots.setdefault(entry["arm"], {})[entry["block"]] = [r for r in rounds if r]
    return boots


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("compare_dir", type=Path)
    parser.add_argument("--scenario", default="prose-c1")
    args = parser.parse_args(argv)
    plan = json.loads((args.compare_dir / "plan.json").read_text())
    baseline, *others = [arm["name"] for arm in plan["arms"]]
    boots = headline_rounds(args.compare_dir, args.scenario, plan)
    for arm, blocks in boots.items():
        for block, rounds in sorted(blocks.items()):
            print(f"{arm} block {block}: " + ", ".join(f"{r:.2f}" for r in rounds))
    per_token = per_token_boots(boots)
    for arm in others:
        rate = compare_boots(boots[baseline], boots[arm], f"{args.scenario} tok/s per user", names=(baseline, arm))
        print(f"{args.scenario} {baseline} -> {arm}: {rate.baseline_mean:.2f} -> {rate.arm_mean:.2f} tok/s per user "
              f"{rate.delta:+.2f}% [{rate.ci[0]:+.2f}%, {rate.ci[1]:+.2f}%] {rate.verdict} ({rate.method}; "
              f"boot sd {rate.noise.boot_sd:.4f}%, round sd {rate.noise.round_sd:.4f}%)")
        step = compare_boots(per_token[baseline], per_token[arm], STEP_FIGURE, False, scale=DIFFERENCE, unit=STEP_UNIT,
                             names=(baseline, arm))
        print(f"per token {1000 * step.delta:+.1f} us [{1000 * step.ci[0]:+.1f}, {1000 * step.ci[1]:+.1f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
