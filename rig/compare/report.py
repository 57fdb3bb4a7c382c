"""The comparison report: JSON, markdown in the seeds' form, the boot-log diff, a PNG plot."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rig.compare.run import ComparePlan
from rig.compare.stats import compare_scenario
from rig.load.scenarios import load_scenario

UNIT_BY_KIND = {"decode": "tok/s per user", "prefill": "prefill tok/s", "concurrency": "tok/s aggregate"}
_VOLATILE = [
    (re.compile(r"\b\d{1,3}(\.\d{1,3}){3}:\d+"), "<ip>:<port>"),
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d([.,]\d+)?"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d([.,]\d+)?\b"), "<time>"),
    (re.compile(r"\[\d+\]"), "[<pid>]"),
    (re.compile(r"\b(pid|PID)[ =:]\d+"), r"\1=<pid>"),
    (re.compile(r"\b\d+\.\d+(\s*(s|ms|us|it/s|%|GB|MB|tok/s))?"), "<num>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f-]{27}\b"), "<uuid>"),
    (re.compile(r"\d{8}-\d{6}-[\w.-]+-[0-9a-f]{4}"), "<boot>"),
]


def normalize(line: str) -> str:
    for pattern, replacement in _VOLATILE:
        line = pattern.sub(replacement, line)
    return line.strip()


def log_lines(path: str | None) -> set[str]:
    if not path or not Path(path).exists():
        return set()
    return {normalize(line) for line in Path(path).read_text(errors="replace").splitlines() if line.strip()}


def boot_log_diff(entries: list[dict[str, Any]], arms: list[str]) -> dict[str, list[str]]:
    """Lines that appear in some boot of one arm and in no boot of any other arm."""
    per_arm = {arm: set().union(*[log_lines(e["log_path"]) for e in entries if e["arm"] == arm and not e["control"]] or [set()])
               for arm in arms}
    return {arm: sorted(lines - set().union(*[per_arm[o] for o in arms if o != arm]))[:50] for arm, lines in per_arm.items()}


def greedy_report(entries: list[dict[str, Any]], arms: list[str], control: str | None) -> dict[str, Any]:
    usable = [e for e in entries if not e["voided"] and e["greedy"]]
    main = [e for e in usable if not e["control"]]
    prompts = sorted({p for e in main for p in e["greedy"]})
    within = {}
    for arm in arms:
        boots = [e["greedy"] for e in main if e["arm"] == arm]
        within[arm] = {p: len({b.get(p) for b in boots}) == 1 for p in prompts} if boots else {}
    across = {p: len({e["greedy"].get(p) for e in main}) == 1 for p in prompts}
    result: dict[str, Any] = {"prompts": prompts, "identical_within_arm": within, "identical_across_arms": across}
    controls = [e for e in usable if e["control"]]
    if control and controls and main:
        reference = next(e for e in main if e["arm"] == arms[0])["greedy"] if any(e["arm"] == arms[0] for e in main) else main[0]["greedy"]
        differing = [p for p in prompts if controls[0]["greedy"].get(p) != reference.get(p)]
        result["control"] = {"arm": control, "differing_prompts": differing, "discriminates": bool(differing)}
    elif control:
        result["control"] = {"arm": control, "differing_prompts": [], "discriminates": None, "note": "the control boot was voided"}
    return result


def analyze(plan: ComparePlan, entries: list[dict[str, Any]]) -> dict[str, Any]:
    arms = [a.name for a in plan.arms]
    baseline = arms[0]
    usable = [e for e in entries if not e["voided"] and not e["control"]]
    scenarios = {}
    for name in plan.scenarios:
        rounds: dict[tuple[str, int], list[float]] = {}
        for entry in usable:
            values = [r[name]["figure"] for r in entry["rounds"] if name in r and r[name]["figure"] is not None]
            if values:
                rounds[(entry["arm"], entry["block"])] = values
        kind = load_scenario(name).kind
        scenarios[name] = {
            "kind": kind, "unit": UNIT_BY_KIND[kind],
            "vs": {arm: compare_scenario(baseline, arm, rounds) for arm in arms[1:]},
            "rounds": {f"{arm}@{block}": values for (arm, block), values in sorted(rounds.items())},
        }
    return {
        "plan": plan.to_json(),
        "boots": {"planned": len(plan.order()), "used": len(usable), "voided": [
            {"index": e["index"], "arm": e["arm"], "problems": e["problems"]} for e in entries if e["voided"]]},
        "boot_to_healthy_s": {f"{e['index']:02d}-{e['arm']}": e["healthy_after_s"] for e in entries},
        "scenarios": scenarios,
        "greedy": greedy_report(entries, arms, plan.control.name if plan.control else None),
        "boot_log_diff": boot_log_diff(entries, arms),
    }


def markdown(analysis: dict[str, Any]) -> str:
    plan = analysis["plan"]
    arms = [a["name"] for a in plan["arms"]]
    lines = [f"# rig compare {plan['recipe']}: {' vs '.join(arms)}",
             f"{plan['boots']} boots per arm (ABBA), {plan['rounds']} rounds per boot, first run after each boot discarded; "
             f"{analysis['boots']['used']} of {analysis['boots']['planned'] - (1 if plan['control'] else 0)} boots used", "",
             "```"]
    for name, result in analysis["scenarios"].items():
        for arm, stats in result["vs"].items():
            if stats.get("pairs", 0) == 0:
                lines.append(f"{name:14} {arms[0]} -> {arm}: no paired rounds")
                continue
            floor = stats["noise_floor_pct"]
            if stats["ci_pct"] is None:
                lines.append(f"{name:14} {stats['baseline_mean']:10.2f} -> {stats['arm_mean']:10.2f} {result['unit']:16} "
                             f"{stats['delta_pct']:+7.2f}%   {stats['verdict']}")
                continue
            lines.append(
                f"{name:14} {stats['baseline_mean']:10.2f} -> {stats['arm_mean']:10.2f} {result['unit']:16} "
                f"{stats['delta_pct']:+7.2f}% [{stats['ci_pct'][0]:+.1f}, {stats['ci_pct'][1]:+.1f}]   {stats['verdict']}"
                + (f"   (noise floor {floor:.2f}%)" if floor is not None else "   (no same-arm repeat: noise floor unknown)"))
    lines.append("```")
    greedy = analysis["greedy"]
    if greedy["prompts"]:
        n = len(greedy["prompts"])
        across = sum(greedy["identical_across_arms"].values())
        lines.append(f"\nGreedy identity (temperature 0, c=1, {n} prompts): identical across arms {across}/{n}; "
                     + "; ".join(f"within {arm} {sum(v.values())}/{n}" for arm, v in greedy["identical_within_arm"].items()))
        control = greedy.get("control")
        if control:
            if control["discriminates"] is None:
                lines.append(f"Control {control['arm']}: not measured ({control.get('note')}).")
            elif control["discriminates"]:
                lines.append(f"Control {control['arm']}: {len(control['differing_prompts'])}/{n} prompts differ: the check discriminates.")
            else:
                lines.append(f"Control {control['arm']}: 0/{n} prompts differ: THE IDENTITY CHECK IS BLIND for this prompt set.")
    for voided in analysis["boots"]["voided"]:
        lines.append(f"\nVoided boot {voided['index']} ({voided['arm']}): " + "; ".join(voided["problems"])[:500])
    lines.append("\nBoot to healthy: " + ", ".join(f"{k} {v:.1f}s" for k, v in analysis["boot_to_healthy_s"].items() if v))
    for arm, only in analysis["boot_log_diff"].items():
        if only:
            lines.append(f"\nBoot-log lines only in {arm}:\n" + "\n".join(f"    {line[:200]}" for line in only[:20]))
    return "\n".join(lines) + "\n"


def plot(analysis: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = analysis["scenarios"]
    figure, axes = plt.subplots(len(scenarios), 1, figsize=(8, 3 * len(scenarios)), squeeze=False)
    markers = "osD^v<>"
    for axis, (name, result) in zip(axes[:, 0], scenarios.items()):
        position = 0
        arms = sorted({key.split("@")[0] for key in result["rounds"]})
        for key, values in result["rounds"].items():
            arm, block = key.split("@")
            color = f"C{arms.index(arm)}"
            xs = list(range(position, position + len(values)))
            axis.plot(xs, values, marker=markers[int(block) % len(markers)], color=color, label=f"{arm} boot {block}")
            position += len(values) + 1
        axis.set_title(name)
        axis.set_ylabel(result["unit"])
        axis.set_xticks([])
        axis.legend(fontsize=7, loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_report(out: Path, analysis: dict[str, Any]) -> str:
    (out / "compare.json").write_text(json.dumps(analysis, indent=1, default=str))
    text = markdown(analysis)
    (out / "compare.md").write_text(text)
    (out / "boot-log-diff.txt").write_text("\n".join(
        f"== only in {arm} ==\n" + "\n".join(lines) for arm, lines in analysis["boot_log_diff"].items()) + "\n")
    plot(analysis, out / "compare.png")
    return text
