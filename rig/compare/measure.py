"""What a comparison measures and keeps of one boot: each round's result, the greedy identity
hashes, the quality probes and the load test's coherence, the adapters' own statistics, and each
arm's recipes resolved once (rig.compare.run.run_boot calls these)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

from pydantic import JsonValue

from rig.atomic import write_text_atomic
from rig.boot.record import BootRecord
from rig.chat import stream_chat
from rig.compare.arms import Arm
from rig.compare.coherence import BootCoherence, boot_coherence, prompt_scripts_of
from rig.compare.model import ENTRY_MAX_BYTES, BootEntry, BootQuality, ComparePlan, QualityReference, RunResult
from rig.compare.percentiles import LatencyHistogram
from rig.deploy.recipe import Resolved
from rig.load.figures import LATENCY, LATENCY_SAMPLES
from rig.load.goodput import goodput
from rig.load.metrics import latency_samples
from rig.load.records import RequestRecord
from rig.load.request_metrics import done_in_window
from rig.load.scenarios import greedy_prompts, load_scenario
from rig.load.summary import RunSummary


def greedy_identity(base_url: str, model: str, small: bool) -> dict[str, str]:
    """Each fixed prompt at temperature 0 and concurrency 1, hashed."""
    prompts, max_tokens = greedy_prompts(small)
    hashes = {}
    for prompt in prompts:
        text = stream_chat(base_url, model, prompt.text, max_tokens, out=io.StringIO()).text
        hashes[prompt.name] = hashlib.sha256(text.encode()).hexdigest()
    return hashes


QUALITY_REFERENCE = "quality-reference.json"


def boot_quality(plan: ComparePlan, out: Path, resolved: Resolved, record: BootRecord, baseline: bool) -> BootQuality:
    """This boot's greedy continuations of the probe set and its scores of the comparison's reference
    continuation; the first baseline boot's continuations become that reference."""
    from rig.compare.scoring import collect, probes

    path = out / QUALITY_REFERENCE
    reference = QualityReference.read_file(path, ENTRY_MAX_BYTES).generations if path.exists() else None
    chosen = probes([load_scenario(name).prompt_set for name in plan.scenarios])
    _, max_tokens = greedy_prompts(plan.small)
    quality = collect(record.base_url, record.served_model or "", resolved.recipe.engine.name, chosen, max_tokens, reference,
                      defines_reference=baseline)
    if reference is None and baseline:
        generations = {name: g.model_copy(update={"top": None}) for name, g in quality.generations.items()}
        write_text_atomic(path, QualityReference(generations=generations).json_text(indent=None))
    return quality


def boot_coherence_of(plan: ComparePlan, entry: BootEntry) -> BootCoherence | None:
    """The boot's load-test outputs over its usable rounds (None: no usable round)."""
    dirs = [Path(r.dir) for round_results in entry.rounds for r in round_results.values() if r.usable]
    scripts = prompt_scripts_of([load_scenario(name).prompt_set for name in plan.scenarios])
    return boot_coherence(dirs, scripts) if dirs else None


def run_result(summary: RunSummary, records: list[RequestRecord], out_dir: Path, slos: dict[str, float] | None) -> RunResult:
    """What a comparison keeps of one round: its headline, why it may not be used, its goodput,
    and its window's per-request latencies (ms) for the boot's pooled percentiles."""
    window = summary.metrics.window
    samples = latency_samples(done_in_window(records, window.start, window.end))
    latency = {name: LatencyHistogram.of(1000 * value for value in getattr(samples, name)) for name in LATENCY_SAMPLES}
    telemetry = summary.observations.gpu if summary.observations else None
    gpu = {index: t for index, t in telemetry.gpus.items() if t.serving} if telemetry and telemetry.gpus else None
    return RunResult(scenario=summary.name, dir=str(out_dir), figures=summary.figures(), problems=summary.problems(),
                     goodput=goodput(records, summary, slos) if slos else None, latency=latency, gpu=gpu,
                     window=(window.start, window.end),
                     problems_by_figure={figure.name: summary.problems(figure.name) for figure in LATENCY},
                     client_bounds={name: bound.bound for name, bound in summary.client.figures.items()})


# Statistics whose processes' values combine by their extreme, not their mean: the last process
# to finish measuring is when the measurement ended (each TP rank measures its own).
_LATEST, _EARLIEST = {"measured_until"}, {"measuring_from"}


def merged_adapter_stats(manifests: list[dict]) -> dict[str, JsonValue]:
    """adapter -> statistic -> {count, sum, mean} over every engine process's manifest (each TP rank
    records its own): counts and sums add up; a time of the measurement's end is the latest."""
    merged: dict[str, dict[str, dict[str, float]]] = {}
    for manifest in manifests:
        for name, adapter in manifest.get("adapters", {}).items():
            for stat, value in (adapter.get("stats") or {}).items():
                if not isinstance(value, dict) or not isinstance(value.get("mean"), (int, float)):
                    continue
                into = merged.setdefault(name, {}).setdefault(stat, {"count": 0, "sum": 0.0, "mean": float(value["mean"])})
                into["count"] += int(value.get("count", 1))
                into["sum"] += float(value.get("sum", value["mean"]))
                if stat in _LATEST or stat in _EARLIEST:
                    pick = max if stat in _LATEST else min
                    into["mean"] = pick(into["mean"], float(value["mean"]))
                else:
                    into["mean"] = into["sum"] / into["count"]
    return merged  # type: ignore[return-value]


def _stat(stats: object, name: str) -> float | None:
    value = stats.get(name) if isinstance(stats, dict) else None
    mean = value.get("mean") if isinstance(value, dict) else None
    return float(mean) if isinstance(mean, (int, float)) else None


def leave_out_rounds_measured_during(entry: BootEntry) -> None:
    """An adapter that measures its own effect in place (gpu_delay alternates with and without its
    spin over its first steps) records when it began (`measuring_from`) and until when
    (`measured_until`); a round whose window began before the end saw the alternation, not the arm,
    and is left out with the reason; every round, when the measurement never ended."""
    for name, stats in entry.adapter_stats.items():
        if _stat(stats, "measuring_from") is None and _stat(stats, "measured_until") is None:
            continue
        until_s = _stat(stats, "measured_until")
        for round_results in entry.rounds:
            for result in round_results.values():
                if until_s is None:
                    result.problems.append(f"{name} was still measuring its effect (with and without it, alternately) "
                                           "when the boot ended: too few engine steps for its measurement")
                elif result.window is not None and result.window[0] < until_s:
                    result.problems.append(f"{name} was still measuring its effect (with and without it, alternately) "
                                           f"until {until_s - result.window[0]:.1f} s into this round's window")


class ResolvedArms:
    """Each arm's recipe, resolved once per comparison: the variant it boots and the recipe as the arm
    runs it (rig.compare.arms.Arm.base / resolve)."""

    def __init__(self, plan: ComparePlan) -> None:
        arms = plan.arms + ([plan.control] if plan.control else [])
        self.by_name = {arm.name: (arm.base(plan.recipe), arm.resolve(plan.recipe)) for arm in arms}

    def __getitem__(self, arm: Arm) -> tuple[Resolved, Resolved]:
        return self.by_name[arm.name]
