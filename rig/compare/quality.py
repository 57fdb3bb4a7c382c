"""Quality beside speed: did an arm move the model's outputs, by how much, and is it more than the
baseline moves between its own boots?

Three measurements, per boot:
- Logprob drift (engines whose registry row declares a scoring protocol: vLLM's `prompt_logprobs`,
  SGLang's `return_logprob`): once per comparison the first baseline boot's greedy continuation
  of every probe is recorded (token ids); every boot of every arm then scores that same sequence
  teacher-forced. Per arm, against the baseline boot of the same ABBA block: mean |delta logprob|
  per token, top-1 agreement, and a KL estimate over the tokens both top-k lists hold plus an
  "other" bucket (coarse-graining only lowers KL, so it is a lower bound). The noise floor is the
  same drift between two baseline boots; "outputs moved" needs the arm's drift to exceed it with a
  95% interval, paired by block like the throughput verdict.
- Where greedy outputs diverge: the first differing token per probe against the reference, and,
  where top-k logprobs came back, whether each side's token was in the other's top-k there
  (vLLM's check_logprobs_close idea): "diverges late, among near-ties" versus "at token 1".
- Coherence under load, from the load tests' own outputs: share of outputs with letters of scripts
  absent from the prompts (the seeds' "CJK 0"), repeated word 4-grams, empty and cut outputs, and
  the finish-reason mix, each against the baseline arm with a paired interval.
"""

from __future__ import annotations

import math
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import Field
from scipy import stats

from rig import client
from rig.compare.model import BootEntry, BootQuality, ComparePlan, Generation, Score
from rig.engines import ENGINES
from rig.load.records import read_records
from rig.load.scenarios import PROMPT_DIR
from rig.typed import Typed

Encode = Callable[[str], list[int]]

TOP_K = 5
PROBE_CHARS = 240  # each prompt-set probe is this long a cut of the set's text


# ---- probes and collection (one boot) --------------------------------------------------------

@dataclass(frozen=True)
class Probe:
    name: str
    text: str


def probes(prompt_sets: list[str]) -> list[Probe]:
    """The greedy-identity prompts plus cuts of each scenario's prompt set, fixed for a comparison."""
    greedy = yaml.safe_load((PROMPT_DIR / "greedy.yaml").read_text())
    chosen = [Probe(p["name"], p["text"]) for p in greedy["prompts"]]
    for name in dict.fromkeys(prompt_sets):
        text = (PROMPT_DIR / f"{name}.txt").read_text()
        step = max(1, (len(text) - PROBE_CHARS) // 3)
        chosen += [Probe(f"{name}-{i}", text[i * step: i * step + PROBE_CHARS]) for i in range(4)]
    return chosen


def _token_id(key: str) -> int:
    """vLLM with return_tokens_as_token_ids names a top-logprob entry `token_id:123`."""
    return int(key.rsplit(":", 1)[-1])


def _vllm_generate(http: Any, base_url: str, model: str, probe: Probe, max_tokens: int, pinning: dict[str, Any]) -> Generation:
    body = {"model": model, "prompt": probe.text, "max_tokens": max_tokens, "temperature": 0, "logprobs": TOP_K,
            "return_token_ids": True, "return_tokens_as_token_ids": True, **pinning}
    response = http.post(f"{base_url}/v1/completions", json=body, timeout=120)
    response.raise_for_status()
    choice = response.json()["choices"][0]
    tops = [{_token_id(k): float(v) for k, v in (top or {}).items()} for top in (choice.get("logprobs") or {}).get("top_logprobs") or []]
    return Generation(prompt_ids=choice.get("prompt_token_ids"), output_ids=choice.get("token_ids"), text=choice.get("text") or "",
                      top=tops or None)


def _vllm_score(http: Any, base_url: str, model: str, reference: Generation) -> Score:
    ids = list(reference.prompt_ids or []) + list(reference.output_ids or [])
    body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": TOP_K}
    response = http.post(f"{base_url}/v1/completions", json=body, timeout=120)
    response.raise_for_status()
    entries = response.json()["choices"][0]["prompt_logprobs"]
    start = len(reference.prompt_ids or [])
    logprobs, tops = [], []
    for position, token in enumerate(reference.output_ids or [], start=start):
        entry = {int(k): float(v["logprob"]) for k, v in (entries[position] or {}).items()}
        logprobs.append(entry[token])
        tops.append(entry)
    return Score(logprobs=logprobs, top=tops)


def _text_generate(http: Any, base_url: str, model: str, probe: Probe, max_tokens: int, pinning: dict[str, Any]) -> Generation:
    body = {"model": model, "prompt": probe.text, "max_tokens": max_tokens, "temperature": 0, **pinning}
    response = http.post(f"{base_url}/v1/completions", json=body, timeout=120)
    response.raise_for_status()
    return Generation(prompt_ids=None, output_ids=None, text=response.json()["choices"][0].get("text") or "")


def collect(base_url: str, model: str, engine: str, chosen: list[Probe], max_tokens: int,
            reference: dict[str, Generation] | None) -> BootQuality:
    """This boot's greedy continuations and, where the engine scores, the reference scored."""
    row = ENGINES[engine]
    pinning = dict(row.length_pinning)
    quality = BootQuality(scoring=row.scoring)
    with client.session() as http:
        if row.scoring == "vllm-prompt-logprobs":
            for probe in chosen:
                quality.generations[probe.name] = _vllm_generate(http, base_url, model, probe, max_tokens, pinning)
            for name, generation in (reference or quality.generations).items():
                quality.scores[name] = _vllm_score(http, base_url, model, generation)
        else:
            for probe in chosen:
                quality.generations[probe.name] = _text_generate(http, base_url, model, probe, max_tokens, pinning)
            quality.note = (f"{engine} returns no logprobs: logprob drift is not measured; divergence is located in "
                            "the text (re-tokenised) only")
    return quality


# ---- statistics ------------------------------------------------------------------------------

class DriftFigures(Typed):
    """Between two boots' scores of the same reference: mean |delta logprob| per token, top-1
    agreement, KL(b || a) over the shared top-k plus an "other" bucket, and the tokens compared."""

    mean_abs_dlogprob: float | None
    top1_agreement: float | None
    kl: float | None
    tokens: int = 0


def drift(a: BootQuality, b: BootQuality) -> DriftFigures | None:
    """Mean |delta logprob| per token, top-1 agreement and KL(b || a) between two boots' scores of
    the same reference; None when either did not score it."""
    names = sorted(set(a.scores) & set(b.scores))
    deltas, agree, kls = [], [], []
    for name in names:
        for lp_a, lp_b, top_a, top_b in zip(a.scores[name].logprobs, b.scores[name].logprobs, a.scores[name].top,
                                           b.scores[name].top):
            deltas.append(abs(lp_a - lp_b))
            agree.append(max(top_a, key=top_a.get) == max(top_b, key=top_b.get))
            kls.append(_kl_shared(top_b, top_a))
    if not deltas:
        return None
    return DriftFigures(mean_abs_dlogprob=float(np.mean(deltas)), top1_agreement=float(np.mean(agree)),
                        kl=float(np.mean(kls)), tokens=len(deltas))


def _kl_shared(p_top: dict[int, float], q_top: dict[int, float]) -> float:
    """KL(p || q) over the tokens both top-k lists hold plus one bucket for everything else."""
    shared = sorted(set(p_top) & set(q_top))
    p = [math.exp(p_top[t]) for t in shared]
    q = [math.exp(q_top[t]) for t in shared]
    p.append(max(0.0, 1.0 - sum(p)))
    q.append(max(0.0, 1.0 - sum(q)))
    floor = 1e-12
    return float(sum(pi * math.log(max(pi, floor) / max(qi, floor)) for pi, qi in zip(p, q) if pi > 0))


class Interval(Typed):
    """A paired estimate over ABBA blocks: mean, 95% t interval (pairs - 1 df), per-block values."""

    mean: float | None
    ci: tuple[float, float] | None
    pairs: int
    values: list[float]

    @classmethod
    def of(cls, values: list[float]) -> Interval:
        if not values:
            return cls(mean=None, ci=None, pairs=0, values=[])
        mean = float(np.mean(values))
        if len(values) < 2:
            return cls(mean=mean, ci=None, pairs=len(values), values=values)
        half = float(stats.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values)))
        return cls(mean=mean, ci=(mean - half, mean + half), pairs=len(values), values=values)


class DriftVerdict(Typed):
    verdict: str
    excess: Interval  # the arm's drift minus the baseline's own, per block
    arm: DriftFigures  # means over the arm's blocks
    noise: DriftFigures  # the baseline's boot-to-boot drift, means
    tokens: int


def drift_verdict(baseline: dict[int, BootQuality], arm: dict[int, BootQuality]) -> DriftVerdict:
    """Per block j: the arm's drift from baseline boot j, minus the drift between baseline boot j and
    the next baseline boot (cyclically): the excess over the baseline's own boot-to-boot drift.
    "moved" when the 95% interval of the mean excess lies above zero."""
    blocks = sorted(set(baseline) & set(arm))
    order = sorted(baseline)
    excess, arm_drift, noise = [], [], []
    for block in blocks:
        other = order[(order.index(block) + 1) % len(order)]
        d_arm = drift(arm[block], baseline[block])
        d_noise = drift(baseline[other], baseline[block]) if other != block else None
        if d_arm is None:
            continue
        arm_drift.append(d_arm)
        if d_noise is not None:
            noise.append(d_noise)
            excess.append(d_arm.mean_abs_dlogprob - d_noise.mean_abs_dlogprob)  # type: ignore[operator]
    interval = Interval.of(excess)
    if not arm_drift:
        verdict = "not measured"
    elif len(order) < 2:
        verdict = "no noise floor: one usable baseline boot"
    elif interval.ci is None:
        verdict = "not enough boots: 1 more pair needed"
    elif interval.ci[0] > 0:
        verdict = "outputs moved"
    else:
        verdict = "within boot noise"
    def means(rows: list[DriftFigures]) -> DriftFigures:
        return DriftFigures(mean_abs_dlogprob=_mean([r.mean_abs_dlogprob for r in rows]),
                            top1_agreement=_mean([r.top1_agreement for r in rows]), kl=_mean([r.kl for r in rows]),
                            tokens=sum(r.tokens for r in rows))

    return DriftVerdict(verdict=verdict, excess=interval, arm=means(arm_drift), noise=means(noise),
                        tokens=int(sum(r.tokens for r in arm_drift)))


class Divergence(Typed):
    index: int | None  # the first differing token (None: identical)
    near_tie: bool | None  # each side's token was in the other's top-k there (None: unknown)


def first_divergence(reference: Generation, other: Generation, encode: Encode | None = None) -> Divergence | None:
    """The first position where `other`'s greedy output leaves the reference's, and whether each
    side's token there was in the other's top-k (a near-tie) where both returned logprobs."""
    ref_ids, ids = reference.output_ids, other.output_ids
    if ref_ids is None or ids is None:
        if encode is None:
            return None
        ref_ids, ids = encode(reference.text), encode(other.text)
    length = min(len(ref_ids), len(ids))
    index = next((i for i in range(length) if ref_ids[i] != ids[i]), None)
    if index is None and len(ref_ids) == len(ids):
        return Divergence(index=None, near_tie=None)
    index = length if index is None else index
    near_tie = None
    if reference.top and other.top and index < min(len(reference.top), len(other.top)) and index < length:
        near_tie = ids[index] in reference.top[index] and ref_ids[index] in other.top[index]
    return Divergence(index=index, near_tie=near_tie)


class DivergenceSummary(Typed):
    compared: int
    diverged: int
    first_index: list[int]
    median_index: float | None
    at_token_1: int
    near_ties: int
    ties_known: int
    summary: str


def divergence_report(reference: dict[str, Generation], boots: dict[str, list[BootQuality]],
                      encode: Encode | None = None) -> dict[str, DivergenceSummary]:
    """Per arm: how many probes diverge from the reference in each boot, where, and among near-ties."""
    out = {}
    for arm, entries in boots.items():
        rows = []
        for quality in entries:
            for name, generation in quality.generations.items():
                if name in reference:
                    found = first_divergence(reference[name], generation, encode)
                    if found is not None:
                        rows.append(found)
        diverged = [r for r in rows if r.index is not None]
        indices = sorted(r.index for r in diverged if r.index is not None)
        ties = [r.near_tie for r in diverged if r.near_tie is not None]
        out[arm] = DivergenceSummary(compared=len(rows), diverged=len(diverged), first_index=indices,
                                     median_index=float(np.median(indices)) if indices else None,
                                     at_token_1=sum(1 for i in indices if i == 0), near_ties=sum(ties), ties_known=len(ties),
                                     summary=_divergence_summary(len(rows), indices, ties))
    return out


def _divergence_summary(compared: int, indices: list[int], ties: list[bool]) -> str:
    if not compared:
        return "not measured"
    if not indices:
        return f"identical to the reference ({compared} probe outputs)"
    where = "diverges at token 1" if indices[0] == 0 and np.median(indices) < 1 else f"diverges late (median token {np.median(indices):.0f})"
    tie = f", {sum(ties)}/{len(ties)} among near-ties" if ties else ""
    return f"{len(indices)}/{compared} outputs differ; {where}{tie}"


# ---- coherence under load --------------------------------------------------------------------

def scripts_of(text: str) -> set[str]:
    """The scripts of a text's letters (the first word of each letter's Unicode name: LATIN, CJK,
    CYRILLIC, HANGUL...); digits, punctuation and symbols belong to none."""
    found = set()
    for char in text:
        if unicodedata.category(char).startswith("L"):
            found.add(unicodedata.name(char, "UNKNOWN").split(" ")[0])
    return found


def repetition(text: str, n: int = 4) -> float | None:
    """Share of repeated word n-grams (1 - distinct / total); None below 2n words."""
    words = text.split()
    if len(words) < 2 * n:
        return None
    grams = [tuple(words[i: i + n]) for i in range(len(words) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams)


class BootCoherence(Typed):
    """One boot's load-test outputs (figures: COHERENCE_FIGURES)."""

    outputs: int
    with_text: int = 0
    foreign_script_share: float | None = None
    foreign_scripts: dict[str, int] = Field(default_factory=dict)
    empty_share: float | None = None
    cut_share: float | None = None
    repetition: float | None = None
    finish_reasons: dict[str, int] = Field(default_factory=dict)


def boot_coherence(run_dirs: list[Path], prompt_scripts: set[str]) -> BootCoherence:
    """One boot's load-test outputs: shares of foreign-script, empty and cut outputs, mean repetition,
    finish reasons. Outputs are the texts the load test kept (bounded, `--no-keep-text` opts out)."""
    texts, cut, finish = [], 0, Counter()
    foreign_scripts: Counter = Counter()
    for run_dir in run_dirs:
        for record in read_records(run_dir):
            if record.error in ("cut_by_window",):
                continue
            if record.error == "stream_cut":
                cut += 1
            finish[record.finish_reason or "none"] += 1
            texts.append(record.text)
    kept = [t for t in texts if t is not None]
    if not texts:
        return BootCoherence(outputs=0)
    foreign = 0
    for text in kept:
        extra = scripts_of(text) - prompt_scripts
        if extra:
            foreign += 1
            foreign_scripts.update(extra)
    reps = [r for r in (repetition(t) for t in kept) if r is not None]
    return BootCoherence(outputs=len(texts), with_text=len(kept),
                         foreign_script_share=foreign / len(kept) if kept else None, foreign_scripts=dict(foreign_scripts),
                         empty_share=sum(1 for t in kept if not t.strip()) / len(kept) if kept else None,
                         cut_share=cut / len(texts), repetition=float(np.mean(reps)) if reps else None,
                         finish_reasons=dict(finish))


COHERENCE_FIGURES = ("foreign_script_share", "empty_share", "cut_share", "repetition")


def holm(p_values: dict[str, float], alpha: float = 0.05) -> dict[str, bool]:
    """Holm's step-down: which hypotheses are rejected with the family-wise error held at alpha."""
    rejected = {}
    for rank, (name, p) in enumerate(sorted(p_values.items(), key=lambda item: item[1])):
        if p > alpha / (len(p_values) - rank):
            break
        rejected[name] = True
    return {name: rejected.get(name, False) for name in p_values}


class ArmCoherence(Typed):
    means: dict[str, float | None]  # by figure, over the arm's boots
    finish_reasons: dict[str, int]
    foreign_scripts: dict[str, int]
    difference: dict[str, Interval] | None = None  # by figure, against the baseline (None: the baseline itself)
    changed: list[str] | None = None  # figures Holm's procedure over the arm's figures rejects equality for


def coherence_report(per_boot: dict[str, dict[int, BootCoherence]], baseline: str) -> dict[str, ArmCoherence]:
    """Per arm and figure: the paired difference from the baseline over blocks with a 95% interval;
    "changed" only where Holm's procedure over the arm's figures rejects equality."""
    out: dict[str, ArmCoherence] = {}
    base = per_boot.get(baseline, {})

    def figure_of(boot: BootCoherence, figure: str) -> float | None:
        return getattr(boot, figure)

    for arm, boots in per_boot.items():
        means = {figure: _mean([figure_of(b, figure) for b in boots.values()]) for figure in COHERENCE_FIGURES}
        entry = ArmCoherence(
            means=means,
            finish_reasons=dict(sum((Counter(b.finish_reasons) for b in boots.values()), Counter())),
            foreign_scripts=dict(sum((Counter(b.foreign_scripts) for b in boots.values()), Counter())))
        if arm != baseline:
            diffs, p_values = {}, {}
            for figure in COHERENCE_FIGURES:
                values = [figure_of(boots[j], figure) - figure_of(base[j], figure)  # type: ignore[operator]
                          for j in sorted(set(boots) & set(base))
                          if figure_of(boots[j], figure) is not None and figure_of(base[j], figure) is not None]
                interval = Interval.of(values)
                diffs[figure] = interval
                if len(values) >= 2:
                    sd = float(np.std(values, ddof=1))
                    p_values[figure] = 1.0 if sd == 0 and interval.mean == 0 else (
                        0.0 if sd == 0 else float(2 * stats.t.sf(abs(interval.mean or 0) / (sd / math.sqrt(len(values))), len(values) - 1)))
            changed = holm(p_values)
            entry.difference = diffs
            entry.changed = [figure for figure, flag in changed.items() if flag]
        out[arm] = entry
    return out


def _mean(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


# ---- the comparison's quality section ----------------------------------------------------------

class QualityReport(Typed):
    """The comparison's quality section (analyze_quality)."""

    scoring: str | None
    notes: list[str]
    reference_arm: str
    drift: dict[str, DriftVerdict]  # arm -> its drift against the baseline
    baseline_noise: DriftFigures | None  # the baseline's own boot-to-boot drift
    divergence: dict[str, DivergenceSummary]
    coherence: dict[str, ArmCoherence]
    prompt_scripts: list[str]


def analyze_quality(plan: ComparePlan, entries: list[BootEntry], encode: Encode | None = None) -> QualityReport:
    """Per arm: logprob drift against the baseline with its noise floor and verdict, where greedy
    outputs diverge from the reference, and coherence under load; `encode` re-tokenises text for
    engines that return no token ids."""
    from rig.load.scenarios import load_scenario

    arms = [a.name for a in plan.arms]
    baseline = arms[0]
    usable = [e for e in entries if not e.voided and not e.control]
    boots: dict[str, dict[int, BootQuality]] = {}
    for entry in sorted(usable, key=lambda e: e.index):
        if entry.quality:
            boots.setdefault(entry.arm, {})[entry.block] = entry.quality
    reference_boot = next(iter(boots.get(baseline, {}).values()), None)
    scoring = next((q.scoring for arm_boots in boots.values() for q in arm_boots.values()), None)
    notes = sorted({q.note for arm_boots in boots.values() for q in arm_boots.values() if q.note})
    drift_by_arm = {arm: drift_verdict(boots.get(baseline, {}), boots.get(arm, {})) for arm in arms[1:]} if scoring else {}
    # the baseline's own boot-to-boot drift, the floor every arm is held against
    floor = drift_verdict(boots.get(baseline, {}), {block: boots[baseline][other] for block, other in
                                                     _next_blocks(sorted(boots.get(baseline, {})))}) if scoring else None
    divergence = divergence_report(reference_boot.generations, {arm: list(b.values()) for arm, b in boots.items()},
                                   encode) if reference_boot else {}
    prompt_scripts: set[str] = set()
    for name in plan.scenarios:
        prompt_scripts |= scripts_of((PROMPT_DIR / f"{load_scenario(name).prompt_set}.txt").read_text())
    per_boot: dict[str, dict[int, BootCoherence]] = {}
    for entry in usable:
        dirs = [Path(r.dir) for round_results in entry.rounds for r in round_results.values() if r.usable]
        if dirs:
            per_boot.setdefault(entry.arm, {})[entry.block] = boot_coherence(dirs, prompt_scripts)
    return QualityReport(scoring=scoring, notes=notes, reference_arm=baseline, drift=drift_by_arm,
                         baseline_noise=floor.arm if floor else None, divergence=divergence,
                         coherence=coherence_report(per_boot, baseline) if per_boot else {},
                         prompt_scripts=sorted(prompt_scripts))


def _next_blocks(blocks: list[int]) -> list[tuple[int, int]]:
    return [(block, blocks[(i + 1) % len(blocks)]) for i, block in enumerate(blocks)] if len(blocks) > 1 else []


def quality_line(quality: QualityReport, arm: str) -> str:
    """One line per arm, beside the throughput verdict."""
    parts = []
    drift_result = quality.drift.get(arm)
    if drift_result and drift_result.arm.mean_abs_dlogprob is not None:
        noise = quality.baseline_noise.mean_abs_dlogprob if quality.baseline_noise else None
        excess = drift_result.excess
        interval = f" [{excess.ci[0]:+.2g}, {excess.ci[1]:+.2g}]" if excess.ci else ""
        parts.append(f"{drift_result.verdict}: mean |dlogprob| {drift_result.arm.mean_abs_dlogprob:.3g} vs boot noise "
                     f"{'-' if noise is None else f'{noise:.3g}'} (excess{interval}), top-1 agreement "
                     f"{100 * (drift_result.arm.top1_agreement or 0):.1f}%, KL {drift_result.arm.kl or 0:.2g}")
    elif quality.scoring is None:
        parts.append("logprob drift not measured (the engine returns no logprobs)")
    divergence = quality.divergence.get(arm)
    if divergence:
        parts.append(f"greedy: {divergence.summary}")
    coherence = quality.coherence.get(arm)
    if coherence and coherence.changed is not None:
        foreign = coherence.means.get("foreign_script_share")
        parts.append(("coherence CHANGED (" + ", ".join(coherence.changed) + ")") if coherence.changed else
                     f"coherence unchanged (foreign-script share {'-' if foreign is None else f'{100 * foreign:.1f}%'})")
    return "; ".join(parts) or "not measured"


def quality_short(quality: QualityReport, arm: str) -> str:
    """The quality line shortened for the plot: verdict, drift and its floor, greedy divergence."""
    drift_result = quality.drift.get(arm)
    parts = []
    if drift_result and drift_result.arm.mean_abs_dlogprob is not None:
        noise = quality.baseline_noise.mean_abs_dlogprob if quality.baseline_noise else None
        parts.append(f"{drift_result.verdict}: |dlogprob| {drift_result.arm.mean_abs_dlogprob:.3g} "
                     f"(floor {'-' if noise is None else f'{noise:.2g}'}), top-1 {100 * (drift_result.arm.top1_agreement or 0):.1f}%")
    divergence = quality.divergence.get(arm)
    if divergence and divergence.compared:
        parts.append(f"greedy {divergence.diverged}/{divergence.compared} differ")
    return "; ".join(parts) or "quality not measured"
