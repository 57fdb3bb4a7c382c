"""The comparison's analysis (typed, compare.json), its markdown in the seeds' form, the boot-log
diff, and a plot a person reads at a glance."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rig.atomic import write_text_atomic
from rig.compare.model import COMPARE_SCHEMA, BootEntry, ComparePlan
from rig.compare.stats import DEFAULT_TARGET_PCT, Comparison, compare_boots, target_met
from rig.load.records import read_records
from rig.load.scenarios import load_scenario
from rig.load.summary import HEADLINE, LATENCY

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


def boot_log_diff(entries: list[BootEntry], arms: list[str]) -> dict[str, list[str]]:
    """Lines that appear in some boot of one arm and in no boot of any other arm."""
    per_arm = {arm: set().union(*[log_lines(e.log_path) for e in entries if e.arm == arm and not e.control] or [set()])
               for arm in arms}
    return {arm: sorted(lines - set().union(*[per_arm[o] for o in arms if o != arm]))[:50] for arm, lines in per_arm.items()}


def greedy_report(entries: list[BootEntry], arms: list[str], control: str | None) -> dict[str, Any]:
    """Identity proves something only where the server reproduces itself: within-arm identity first
    (else inconclusive), then across arms; the control is compared per prompt against every boot
    of the baseline, and discriminates only if the baseline was reproducible."""
    usable = [e for e in entries if not e.voided and e.greedy]
    main = [e for e in usable if not e.control]
    prompts = sorted({p for e in main for p in e.greedy})
    within = {arm: {p: len({e.greedy.get(p) for e in main if e.arm == arm}) == 1 for p in prompts}
              for arm in arms if any(e.arm == arm for e in main)}
    reproducible = {p: all(within[arm].get(p, False) for arm in within) for p in prompts}
    across = {p: len({e.greedy.get(p) for e in main}) == 1 for p in prompts}
    unmeasured = [arm for arm in arms if not any(e.arm == arm for e in main)]
    single = [arm for arm in arms if sum(e.arm == arm for e in main) == 1]
    if not prompts:
        status = "not measured (no usable boot)"
    elif unmeasured:
        status = f"not measured for {', '.join(unmeasured)} (no usable boot)"
    elif single:
        status = f"inconclusive: one usable boot of {', '.join(single)}, so reproducibility within the arm is unknown"
    elif not all(reproducible.values()):
        bad = [p for p, ok in reproducible.items() if not ok]
        status = f"inconclusive: the server is not reproducible within an arm ({', '.join(bad)})"
    elif all(across.values()):
        status = "identical"
    else:
        status = f"CHANGED: {sum(not v for v in across.values())}/{len(prompts)} prompts differ between arms"
    result: dict[str, Any] = {"prompts": prompts, "status": status, "identical_within_arm": within,
                              "identical_across_arms": across, "boots_per_arm": {arm: sum(e.arm == arm for e in main) for arm in arms}}
    controls = [e for e in usable if e.control]
    baseline = [e for e in main if e.arm == arms[0]]
    if control and controls and baseline:
        differing = [p for p in prompts if all(controls[0].greedy.get(p) != b.greedy.get(p) for b in baseline)]
        baseline_reproducible = all(within.get(arms[0], {}).values())
        result["control"] = {"arm": control, "differing_prompts": differing, "compared_with_boots": len(baseline),
                             "discriminates": bool(differing) and baseline_reproducible,
                             "note": None if baseline_reproducible else "the baseline is not reproducible within its boots"}
    elif control:
        result["control"] = {"arm": control, "differing_prompts": [], "discriminates": None,
                             "note": "the control boot (or every baseline boot) was voided"}
    return result


def batching_identity(entries: list[BootEntry], arms: list[str]) -> dict[str, Any]:
    """The load tests' own outputs at temperature 0: the same prompt (name and nonce, which repeat
    across arms round by round) compared across arms. Batch composition may legitimately change
    greedy output, so this is reported beside the c=1 identity, not as a verdict."""
    by_key: dict[tuple[str, str, str], dict[str, set[str]]] = {}
    for entry in entries:
        if entry.voided or entry.control:
            continue
        for round_results in entry.rounds:
            for name, result in round_results.items():
                if load_scenario(name).temperature != 0:
                    continue
                for record in read_records(Path(result.dir)):
                    if record.complete and record.text_sha256:
                        key = (name, record.prompt, record.prompt_nonce or "")
                        by_key.setdefault(key, {}).setdefault(entry.arm, set()).add(record.text_sha256)
    shared = {k: v for k, v in by_key.items() if len(v) >= 2}
    identical = sum(1 for v in shared.values() if len(set().union(*v.values())) == 1)
    return {"compared_prompts": len(shared), "identical": identical, "differing": len(shared) - identical,
            "arms": arms}


def fingerprint_report(entries: list[BootEntry], accepted: list[str]) -> dict[str, Any]:
    from rig.observe.fingerprint import fingerprint_differences, voiding_differences

    fingerprints = {f"{e.index:02d}-{e.arm}": e.fingerprint for e in entries if e.fingerprint and not e.voided}
    differences = fingerprint_differences(fingerprints) if len(fingerprints) > 1 else []
    voiding = voiding_differences(differences, accepted)
    return {"boots": len(fingerprints), "differences": differences, "voiding": voiding, "accepted": accepted}


@dataclass
class ScenarioResult:
    kind: str
    unit: str
    headline: str
    vs: dict[str, Comparison]  # arm -> headline comparison against the baseline
    latency: dict[str, dict[str, Comparison]]  # figure -> arm -> comparison
    goodput: dict[str, float | None]  # arm -> mean requests/s meeting the SLOs
    boots: dict[str, dict[int, list[float]]]  # arm -> block -> usable headline figures


@dataclass
class Analysis:
    plan: dict[str, Any]
    boots: dict[str, Any]  # planned, used, voided (with reasons), exclusions (rounds left out, with reasons)
    boot_to_healthy_s: dict[str, float | None]
    scenarios: dict[str, ScenarioResult]
    greedy: dict[str, Any]
    batching: dict[str, Any]
    fingerprints: dict[str, Any]
    boot_log_diff: dict[str, list[str]]
    target: dict[str, Any] | None
    void: str | None = None  # why no verdict stands (an unaccepted fingerprint difference)
    schema: int = COMPARE_SCHEMA
    timeline: list[dict[str, Any]] = field(default_factory=list)  # boots in time order, for the plot

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for name, scenario in self.scenarios.items():
            data["scenarios"][name]["vs"] = {arm: c.to_json() for arm, c in scenario.vs.items()}
            data["scenarios"][name]["latency"] = {f: {arm: c.to_json() for arm, c in arms.items()}
                                                  for f, arms in scenario.latency.items()}
        return data


def figure_boots(entries: list[BootEntry], scenario: str, figure: str) -> dict[str, dict[int, list[float]]]:
    boots: dict[str, dict[int, list[float]]] = {}
    for entry in entries:
        if entry.voided or entry.control:
            continue
        values = entry.usable_figures(scenario, figure)
        if values:
            boots.setdefault(entry.arm, {})[entry.block] = values
    return boots


def scenario_result(plan: ComparePlan, entries: list[BootEntry], name: str) -> ScenarioResult:
    arms = [a.name for a in plan.arms]
    baseline = arms[0]
    kind = load_scenario(name).kind
    headline = HEADLINE[kind]
    target = plan.target_pct or DEFAULT_TARGET_PCT
    boots = figure_boots(entries, name, headline.name)
    first = plan.first_stage if plan.target_pct is not None else None
    vs = {arm: compare_boots(boots.get(baseline, {}), boots.get(arm, {}), headline.name, headline.higher_is_better, target,
                             first_stage=first)
          for arm in arms[1:]}
    latency = {}
    for figure in LATENCY:
        per = figure_boots(entries, name, figure.name)
        latency[figure.name] = {arm: compare_boots(per.get(baseline, {}), per.get(arm, {}), figure.name, False, target,
                                                   first_stage=first) for arm in arms[1:]}
    goodput: dict[str, float | None] = {}
    for arm in arms:
        values = [r[name].goodput["requests_per_s"] for e in entries if e.arm == arm and not e.voided and not e.control
                  for r in e.rounds if name in r and r[name].usable and r[name].goodput]
        goodput[arm] = float(np.mean(values)) if values else None
    return ScenarioResult(kind=kind, unit=headline.unit, headline=headline.name, vs=vs, latency=latency, goodput=goodput,
                          boots=boots)


def planned_pairs(plan: ComparePlan, entries: list[BootEntry]) -> int:
    """Stein's second stage: the pairs every headline comparison's first-stage sd asks for, capped
    at max_boots (a comparison with no first-stage sd asks for the cap)."""
    cap = plan.max_boots or plan.boots
    wanted = [c.pairs_for_target for name in plan.scenarios for c in scenario_result(plan, entries, name).vs.values()]
    return min(cap, max([plan.boots] + [cap if w is None else w for w in wanted]))


def widest_half_width(plan: ComparePlan, entries: list[BootEntry]) -> float | None:
    """The widest headline interval (percent) over scenarios and arms; None while any has none."""
    widths = [c.half_width_pct for name in plan.scenarios for c in scenario_result(plan, entries, name).vs.values()]
    return None if not widths or any(w is None for w in widths) else max(widths)  # type: ignore[type-var]


def analyze(plan: ComparePlan, entries: list[BootEntry]) -> Analysis:
    arms = [a.name for a in plan.arms]
    usable = [e for e in entries if not e.voided and not e.control]
    scenarios = {name: scenario_result(plan, entries, name) for name in plan.scenarios}
    fingerprints = fingerprint_report(entries, plan.accept_fingerprint)
    void = None
    if fingerprints["voiding"]:
        fields = ", ".join(sorted({d["field"] for d in fingerprints["voiding"]}))
        void = f"the boots ran under different conditions ({fields}); accept with --accept-fingerprint FIELD if intended"
    target = None
    if plan.target_pct is not None:
        widest = widest_half_width(plan, entries)
        met = target_met(widest, plan.target_pct)
        target = {"target_pct": plan.target_pct, "widest_half_width_pct": widest, "pairs": plan.boots,
                  "first_stage": plan.first_stage, "planned_pairs": plan.planned_pairs, "max_boots": plan.max_boots, "met": met,
                  "status": (f"target met: widest interval +-{widest:.2f}% <= {plan.target_pct:g}% after {plan.boots} pair(s)" if met else
                             f"limit reached: widest interval {'unknown' if widest is None else f'+-{widest:.2f}%'} > "
                             f"{plan.target_pct:g}% after {plan.boots} pair(s) (--max-boots {plan.max_boots}; Stein's "
                             f"first stage of {plan.first_stage} pairs asked for {plan.planned_pairs})")}
    return Analysis(
        plan=plan.to_json(),
        boots={"planned": len(plan.order()), "used": len(usable),
               "voided": [{"index": e.index, "arm": e.arm, "attempt": e.attempt, "problems": e.problems} for e in entries if e.voided],
               "exclusions": [{"index": e.index, "arm": e.arm, "rounds": e.exclusions()} for e in entries if e.exclusions()],
               "imported": [{"index": e.index, "arm": e.arm, "block": e.block, "spec": e.spec, "boot_id": e.boot_id}
                            for e in entries if e.spec.startswith("imported:")]},
        boot_to_healthy_s={f"{e.index:02d}-{e.arm}": e.healthy_after_s for e in entries},
        scenarios=scenarios,
        greedy=greedy_report(entries, arms, plan.control.name if plan.control else None),
        batching=batching_identity(entries, arms),
        fingerprints=fingerprints,
        boot_log_diff=boot_log_diff(entries, arms),
        target=target,
        void=void,
        timeline=[{"index": e.index, "arm": e.arm, "block": e.block, "voided": e.voided, "control": e.control,
                   "rounds": {name: [r[name].figures.get(scenarios[name].headline) if r[name].usable else None
                                     for r in e.rounds if name in r] for name in plan.scenarios}}
                  for e in sorted(entries, key=lambda e: (e.started or 0, e.index))],
    )


def _noise(c: Comparison) -> str:
    parts = []
    if c.noise.boot_sd_pct is not None:
        parts.append(f"boot sd {c.noise.boot_sd_pct:.2f}%")
    if c.noise.round_sd_pct is not None:
        parts.append(f"round sd {c.noise.round_sd_pct:.2f}%")
    if c.pairs_for_target is not None:
        parts.append(f"{c.pairs_for_target} pairs resolve {c.target_pct:g}%")
    return ", ".join(parts)


def _line(name: str, label: str, unit: str, c: Comparison) -> str:
    head = f"{name:14} {label:22}"
    if c.delta_pct is None:
        return f"{head} {c.verdict}"
    means = f"{c.baseline_mean:10.2f} -> {c.arm_mean:10.2f} {unit:15}"
    interval = f"[{c.ci_pct[0]:+.2f}, {c.ci_pct[1]:+.2f}]" if c.ci_pct else "[no interval]"
    return f"{head} {means} {c.delta_pct:+7.2f}% {interval:18} {c.verdict}   ({c.pairs} pair(s); {_noise(c)})"


def markdown(analysis: Analysis) -> str:
    plan = analysis.plan
    arms = [a["name"] for a in plan["arms"]]
    planned = analysis.boots["planned"] - (1 if plan["control"] else 0)
    lines = [f"# rig compare {plan['recipe']}: {' vs '.join(arms)}",
             f"{plan['boots']} boot pair(s) (ABBA), {plan['rounds']} rounds per boot, each scenario's first run after "
             f"every boot discarded; {analysis.boots['used']} of {planned} boots used. Interval: paired t on boot-pair "
             "means (the boot is the unit of replication), 95%.", ""]
    if analysis.void:
        lines += [f"**VOID: {analysis.void}**", ""]
    lines.append("```")
    for name, result in analysis.scenarios.items():
        for arm, c in result.vs.items():
            lines.append(_line(name, f"{arms[0]} -> {arm}", result.unit, c))
        for figure, per_arm in result.latency.items():
            for arm, c in per_arm.items():
                if c.pairs:
                    lines.append(_line(name, f"  {figure} {arm}", "ms", c))
        if any(v is not None for v in result.goodput.values()):
            lines.append(f"{name:14} goodput (req/s meeting {plan['slos']}): "
                         + ", ".join(f"{arm} {v:.3f}" if v is not None else f"{arm} -" for arm, v in result.goodput.items()))
    lines.append("```")
    if analysis.target:
        lines.append(f"\n{analysis.target['status']}.")
    greedy = analysis.greedy
    if greedy["prompts"]:
        n = len(greedy["prompts"])
        across = sum(greedy["identical_across_arms"].values())
        lines.append(f"\nGreedy identity (temperature 0, c=1, {n} prompts): {greedy['status']}; across arms {across}/{n}; "
                     + "; ".join(f"within {arm} {sum(v.values())}/{n} over {greedy['boots_per_arm'][arm]} boots"
                                 for arm, v in greedy["identical_within_arm"].items()))
        control = greedy.get("control")
        if control:
            if control["discriminates"] is None:
                lines.append(f"Control {control['arm']}: not measured ({control.get('note')}).")
            elif control["discriminates"]:
                lines.append(f"Control {control['arm']}: {len(control['differing_prompts'])}/{n} prompts differ from every "
                             f"baseline boot: the check discriminates.")
            else:
                lines.append(f"Control {control['arm']}: the check does NOT discriminate "
                             f"({len(control['differing_prompts'])}/{n} differ; {control.get('note') or 'same outputs'}).")
    batching = analysis.batching
    if batching["compared_prompts"]:
        lines.append(f"Identity under batching (load-test outputs, same prompt and nonce across arms): "
                     f"{batching['identical']}/{batching['compared_prompts']} identical (batch composition may change them).")
    for imported in analysis.boots.get("imported", []):
        lines.append(f"\nImported boot {imported['index']} ({imported['arm']}, block {imported['block']}): {imported['spec']} "
                     f"({imported['boot_id']}): measured by another tool; rig did not check its client, boot or warmup.")
    for voided in analysis.boots["voided"]:
        lines.append(f"\nVoided boot {voided['index']} ({voided['arm']}, attempt {voided['attempt']}): "
                     + "; ".join(voided["problems"])[:500])
    for excluded in analysis.boots["exclusions"]:
        lines.append(f"\nRounds left out of boot {excluded['index']} ({excluded['arm']}): " + "; ".join(excluded["rounds"])[:500])
    differences = analysis.fingerprints["differences"]
    if differences:
        lines.append("\nFingerprint differences between boots: " + "; ".join(
            f"{d['field']} ({d['class']})" for d in differences[:20]))
    healthy = [f"{k} {v:.1f}s" for k, v in analysis.boot_to_healthy_s.items() if v]
    if healthy:
        lines.append("\nBoot to healthy: " + ", ".join(healthy))
    for arm, only in analysis.boot_log_diff.items():
        if only:
            lines.append(f"\nBoot-log lines only in {arm}:\n" + "\n".join(f"    {line[:200]}" for line in only[:20]))
    return "\n".join(lines) + "\n"


def plot(analysis: Analysis, path: Path) -> None:
    """Per scenario: boots in time order (x), coloured by arm, rounds as points and boot means as
    bars; beside it each arm's delta with its interval and the boot-noise band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    arms = [a["name"] for a in analysis.plan["arms"]]
    colours = {arm: f"C{i}" for i, arm in enumerate(arms)}
    scenarios = analysis.scenarios
    rows_per_scenario = (len(arms) - 1) * (1 + len(LATENCY))  # the effect panel lists headline and latency rows
    height = max(4.2, 0.3 * rows_per_scenario + 1.6)
    figure, axes = plt.subplots(len(scenarios), 2, figsize=(13, height * len(scenarios)), squeeze=False,
                                gridspec_kw={"width_ratios": [2.2, 1]}, layout="constrained")
    for (left, right), (name, result) in zip(axes, scenarios.items()):
        labels = []
        for x, boot in enumerate(analysis.timeline):
            values = [v for v in boot["rounds"].get(name, []) if v is not None]
            colour = "0.6" if boot["control"] else colours.get(boot["arm"], "0.4")
            if values:
                left.bar(x, float(np.mean(values)), color=colour, alpha=0.35, width=0.7)
                left.scatter([x] * len(values), values, color=colour, s=18, zorder=3)
            if boot["voided"]:
                left.text(x, 0.04, "voided", rotation=90, ha="center", va="bottom", fontsize=8, color="red",
                          transform=left.get_xaxis_transform())
            labels.append(f"{boot['index']}\n{boot['arm']}")
        left.set_xticks(range(len(labels)), labels, fontsize=7)
        left.set_xlabel("boots in time order (index, arm)")
        left.set_ylabel(result.unit)
        left.set_title(f"{name}: rounds (points) and boot means (bars)")
        means = [v for arm_boots in result.boots.values() for vs in arm_boots.values() for v in vs]
        if means:
            low, high = min(means), max(means)
            left.set_ylim(max(0.0, low - 0.15 * (high - low + 1e-9) - 0.05 * high), high + 0.15 * (high - low + 1e-9) + 0.02 * high)
        left.legend(handles=[Patch(color=colours[a], alpha=0.6, label=a) for a in arms], fontsize=7, loc="lower right")
        rows = [(f"{arm} vs {arms[0]}\n{result.headline}", arm, c) for arm, c in result.vs.items()]
        rows += [(f"{arm}: {name}\n(lower is better)", arm, c) for name, per_arm in result.latency.items()
                 for arm, c in per_arm.items() if c.delta_pct is not None]
        for y, (_, arm, c) in enumerate(rows):
            if c.delta_pct is None:
                right.text(0, y, " no data", va="center", fontsize=7, color="0.4")
                continue
            if c.ci_pct:
                right.errorbar([c.delta_pct], [y], xerr=[[c.delta_pct - c.ci_pct[0]], [c.ci_pct[1] - c.delta_pct]], fmt="o",
                               color=colours[arm], capsize=4)
            else:
                right.plot([c.delta_pct], [y], "o", color=colours[arm], mfc="none")
        headline_noise = [c.noise.boot_sd_pct for _, _, c in rows[: len(result.vs)] if c.noise.boot_sd_pct]
        if headline_noise:
            right.axvspan(-max(headline_noise), max(headline_noise), color="0.85", zorder=0)
        right.axvline(0, color="k", lw=0.8)
        right.set_yticks(range(len(rows)), [label for label, _, _ in rows], fontsize=7)
        right.set_ylim(len(rows) - 0.5, -0.5)
        right.set_xlabel("delta % (95% CI); grey: +-1 boot sd")
        right.set_title("effect: headline, then latency")
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_report(out: Path, analysis: Analysis) -> str:
    write_text_atomic(out / "compare.json", json.dumps(analysis.to_json(), indent=1, default=str))
    text = markdown(analysis)
    write_text_atomic(out / "compare.md", text)
    write_text_atomic(out / "boot-log-diff.txt", "\n".join(
        f"== only in {arm} ==\n" + "\n".join(lines) for arm, lines in analysis.boot_log_diff.items()) + "\n")
    plot(analysis, out / "compare.png")
    return text
