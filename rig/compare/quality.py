"""Quality beside speed: did an arm move the model's outputs, by how much, and is it more than the
baseline moves between its own boots?

Three measurements, per boot:
- Logprob drift (engines whose registry row declares a scoring protocol, SCORING: vLLM's
  `prompt_logprobs`, SGLang's `input_token_logprobs` from `logprob_start_len`): once per
  comparison the first baseline boot's greedy continuation of every probe is recorded (token ids);
  every boot of every arm then scores that same sequence teacher-forced. Per arm, against the
  baseline boot of the same ABBA block: mean |delta logprob| per token, top-1 agreement, and a KL
  estimate over the tokens both top-k lists hold plus an "other" bucket (coarse-graining only
  lowers KL, so it is a lower bound). The noise floor is the same drift between two baseline boots;
  "outputs moved" is exact where the baseline reproduces bitwise, and otherwise needs the arm's
  drift to exceed the floor in an exact sign-flip test paired by block (Holm across arms).
- Where greedy outputs diverge: the first differing token per probe against the reference, and,
  where top-k logprobs came back, whether each side's token was in the other's top-k there
  (vLLM's check_logprobs_close idea): "diverges late, among near-ties" versus "at token 1".
- Coherence under load, from the load tests' own outputs: share of outputs with letters of scripts
  absent from the prompts (a quality gate's "CJK 0"), repeated word 4-grams, empty and cut outputs, and
  the finish-reason mix, each against the baseline arm with a paired interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rig.compare.coherence import ArmCoherence, BootCoherence, coherence_report
from rig.compare.model import BootEntry, BootQuality, ComparePlan, Generation
from rig.compare.stats import PairedInterval, holm, min_pairs_for, sign_flip_p
from rig.typed import Typed

Encode = Callable[[str], list[int]]

# ---- statistics ------------------------------------------------------------------------------

class DriftFigures(Typed):
    """Between two boots: over the reference scored teacher-forced (prefill), mean |delta logprob| per
    token, top-1 agreement and KL(b || a) over the shared top-k plus an "other" bucket; over the
    common prefix of their own greedy continuations (decode), mean |delta logprob| of the chosen tokens."""

    mean_abs_dlogprob: float | None
    top1_agreement: float | None
    kl: float | None
    tokens: int = 0
    decode_mean_abs_dlogprob: float | None = None
    decode_tokens: int = 0

    @property
    def differs(self) -> bool:
        return bool(self.mean_abs_dlogprob) or bool(self.decode_mean_abs_dlogprob)


def drift(a: BootQuality, b: BootQuality) -> DriftFigures | None:
    """The drift between two boots; only scores of the same token sequence are compared. None when
    the two boots share no scored sequence."""
    names = sorted(n for n in set(a.scores) & set(b.scores) if a.scores[n].sequence == b.scores[n].sequence)
    deltas, agree, kls = [], [], []
    for name in names:
        for lp_a, lp_b, top_a, top_b in zip(a.scores[name].logprobs, b.scores[name].logprobs, a.scores[name].top,
                                           b.scores[name].top, strict=True):
            deltas.append(abs(lp_a - lp_b))
            agree.append(max(top_a, key=top_a.__getitem__) == max(top_b, key=top_b.__getitem__))
            kls.append(_kl_shared(top_b, top_a))
    if not deltas:
        return None
    decode = []
    for name in sorted(set(a.generations) & set(b.generations)):
        gen_a, gen_b = a.generations[name], b.generations[name]
        if not (gen_a.top and gen_b.top and gen_a.output_ids and gen_b.output_ids):
            continue
        for token_a, token_b, top_a, top_b in zip(gen_a.output_ids, gen_b.output_ids, gen_a.top, gen_b.top):
            if token_a != token_b:
                break
            if token_a in top_a and token_b in top_b:
                decode.append(abs(top_a[token_a] - top_b[token_b]))
    return DriftFigures(mean_abs_dlogprob=float(np.mean(deltas)), top1_agreement=float(np.mean(agree)),
                        kl=float(np.mean(kls)), tokens=len(deltas),
                        decode_mean_abs_dlogprob=float(np.mean(decode)) if decode else None, decode_tokens=len(decode))


def _kl_shared(p_top: dict[int, float], q_top: dict[int, float]) -> float:
    """KL(p || q) over the tokens both top-k lists hold plus one bucket for everything else."""
    shared = sorted(set(p_top) & set(q_top))
    p = [math.exp(p_top[t]) for t in shared]
    q = [math.exp(q_top[t]) for t in shared]
    p.append(max(0.0, 1.0 - sum(p)))
    q.append(max(0.0, 1.0 - sum(q)))
    floor = 1e-12
    return float(sum(pi * math.log(max(pi, floor) / max(qi, floor)) for pi, qi in zip(p, q) if pi > 0))


class DriftVerdict(Typed):
    verdict: str
    method: str  # how the verdict was reached: exact on a bitwise-reproducible baseline, or the sign-flip test
    p: float  # the sign-flip test's one-sided p-value (0/1 for an exact verdict), before Holm across arms
    excess: PairedInterval  # per block: the arm's drift from baseline boot 0 minus the block's baseline boot's
    arm: DriftFigures  # means over the arm's blocks (against the same block's baseline boot)
    noise: DriftFigures  # the baseline's own boot-to-boot drift, means over its pairs of boots
    tokens: int
    boots: int
    baseline_boots: int


FLIP_ALPHA = 0.05  # one-sided: "moved" means more drift than the baseline's own


def _mean(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def _means(rows: list[DriftFigures]) -> DriftFigures:
    return DriftFigures(mean_abs_dlogprob=_mean([r.mean_abs_dlogprob for r in rows]),
                        top1_agreement=_mean([r.top1_agreement for r in rows]), kl=_mean([r.kl for r in rows]),
                        tokens=sum(r.tokens for r in rows),
                        decode_mean_abs_dlogprob=_mean([r.decode_mean_abs_dlogprob for r in rows]),
                        decode_tokens=sum(r.decode_tokens for r in rows))


def drift_verdict(baseline: dict[int, BootQuality], arm: dict[int, BootQuality]) -> DriftVerdict:
    """Did the arm move the outputs more than the baseline moves between its own boots?

    - A baseline that reproduces bitwise over all its boots (drift exactly 0, as vLLM did on the
      H200s) has no noise to separate from: "outputs moved" when every arm boot differs from its
      block's baseline boot, "bitwise identical" when none does. Exact, not statistical.
    - Otherwise, with the first baseline boot B0 as a common reference, each other block j gives
      T_j = D(A_j, B0) - D(B_j, B0); A_j and B_j are exchangeable under "nothing changed", so T_j is
      symmetric about 0 and independent across blocks given B0, and an exact one-sided sign-flip
      test holds its 5% whatever the noise's shape (tests/compare/test_quality.py simulates it). It needs
      enough blocks to reach 5% at all (6 pairs); fewer say so."""
    blocks = sorted(set(baseline) & set(arm))
    order = sorted(baseline)
    arm_rows = [row for j in blocks if (row := drift(arm[j], baseline[j])) is not None]
    noise_rows = [row for i, a in enumerate(order) for b in order[i + 1:] if (row := drift(baseline[a], baseline[b])) is not None]
    verdict, method, p_value, excess = "not measured", "no arm boot scored the reference", 1.0, PairedInterval.of([])
    if arm_rows and not noise_rows:
        verdict, method = "no noise floor: one usable baseline boot", "needs two baseline boots"
    elif arm_rows and not any(r.differs for r in noise_rows):
        moved = all(r.differs for r in arm_rows)
        verdict = "outputs moved" if moved else ("bitwise identical" if not any(r.differs for r in arm_rows) else
                                                 "mixed: some arm boots differ from the bitwise-reproducible baseline, some do not")
        method, p_value = f"exact: the baseline reproduces bitwise over its {len(order)} boots", 0.0 if moved else 1.0
    elif arm_rows:
        reference = order[0]
        values = []
        for j in blocks:
            if j == reference:
                continue
            d_arm, d_base = drift(arm[j], baseline[reference]), drift(baseline[j], baseline[reference])
            if d_arm is not None and d_base is not None:
                values.append(d_arm.mean_abs_dlogprob - d_base.mean_abs_dlogprob)  # type: ignore[operator]
        needed = min_pairs_for(FLIP_ALPHA, one_sided=True)
        p_value, excess = sign_flip_p(values, one_sided=True), PairedInterval.of(values)
        method = f"exact one-sided sign-flip test over {len(values)} block(s), against baseline boot 0"
        if len(values) < needed:
            verdict = f"not enough boots: {needed + 1} pairs separate drift from boot noise at 5%"
        else:
            verdict = "outputs moved" if p_value <= FLIP_ALPHA else "within boot noise"
    return DriftVerdict(verdict=verdict, method=method, p=p_value, excess=excess, arm=_means(arm_rows), noise=_means(noise_rows),
                        tokens=int(sum(r.tokens for r in arm_rows)), boots=len(arm_rows), baseline_boots=len(order))


def _control_drift(baseline: dict[int, BootQuality], control: BootQuality) -> DriftVerdict:
    """The control's one boot against the first baseline boot. Exact where the baseline reproduces
    bitwise; otherwise one boot supports no test, and the verdict says whether its drift is above
    every drift between two baseline boots (descriptive)."""
    verdict = drift_verdict(baseline, {0: control})
    if not verdict.verdict.startswith("not enough boots") or verdict.arm.mean_abs_dlogprob is None:
        return verdict
    order = sorted(baseline)
    pairs = [d.mean_abs_dlogprob for i, a in enumerate(order) for b in order[i + 1:]
             if (d := drift(baseline[a], baseline[b])) is not None and d.mean_abs_dlogprob is not None]
    widest = max(pairs, default=0.0)
    verdict.verdict = ("outputs moved beyond every baseline pair" if verdict.arm.mean_abs_dlogprob > widest
                       else "within the baseline's boot-to-boot drift")
    verdict.method = (f"one control boot against baseline boot 0, beside the {len(pairs)} baseline pair(s) (widest "
                      f"{widest:.3g}): descriptive, one boot supports no test")
    return verdict


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
    scored_boots: int = 0  # measured boots that returned their quality probes (0: `scoring` is not known from them)


def analyze_quality(plan: ComparePlan, entries: list[BootEntry], encode: Encode | None = None) -> QualityReport:
    """Per arm: logprob drift against the baseline with its noise floor and verdict, where greedy
    outputs diverge from the reference, and coherence under load; `encode` re-tokenises text for
    engines that return no token ids."""
    arms = [a.name for a in plan.arms]
    baseline = arms[0]
    usable = [e for e in entries if e.measured]
    boots: dict[str, dict[int, BootQuality]] = {}
    for entry in sorted(usable, key=lambda e: e.index):
        if entry.quality:
            boots.setdefault(entry.arm, {})[entry.block] = entry.quality
    # the control (one boot, known to change outputs) shows that the divergence check discriminates
    controls = {e.arm: [e.quality] for e in entries if e.control and not e.voided and e.quality}
    reference_boot = next(iter(boots.get(baseline, {}).values()), None)
    scoring = next((q.scoring for arm_boots in boots.values() for q in arm_boots.values()), None)
    notes = sorted({q.note for arm_boots in boots.values() for q in arm_boots.values() if q.note})
    drift_by_arm = {arm: drift_verdict(boots.get(baseline, {}), boots.get(arm, {})) for arm in arms[1:]} if scoring else {}
    # several arms: "moved" holds its 5% over all of them together (Holm on the statistical verdicts)
    statistical = {arm: d.p for arm, d in drift_by_arm.items()
                   if d.method.startswith("exact one-sided") and d.verdict in ("outputs moved", "within boot noise")}
    for arm, rejected in holm(statistical, FLIP_ALPHA).items():
        drift_by_arm[arm].verdict = "outputs moved" if rejected else "within boot noise"
    if scoring:  # the control's drift beside the arms' (outside their family: it is known to move the outputs)
        for arm, (control_quality,) in controls.items():
            drift_by_arm[arm] = _control_drift(boots.get(baseline, {}), control_quality)
    divergence = divergence_report(reference_boot.generations, {**{arm: list(b.values()) for arm, b in boots.items()},
                                                                **controls}, encode) if reference_boot else {}
    if reference_boot is not None and encode is None and any(g.output_ids is None for g in reference_boot.generations.values()):
        notes.append("the served tokenizer could not be loaded here: greedy divergence is not located (only identity)")
    per_boot: dict[str, dict[int, BootCoherence]] = {}
    for entry in usable:
        if entry.coherence is not None:  # computed when the boot ran (rig.compare.coherence.boot_coherence)
            per_boot.setdefault(entry.arm, {})[entry.block] = entry.coherence
    prompt_scripts = sorted({script for boots in per_boot.values() for c in boots.values() for script in c.prompt_scripts})
    floor = next(iter(drift_by_arm.values())).noise if drift_by_arm else None  # the baseline's own boot-to-boot drift
    return QualityReport(scoring=scoring, notes=notes, reference_arm=baseline, drift=drift_by_arm,
                         baseline_noise=floor, divergence=divergence,
                         coherence=coherence_report(per_boot, baseline) if per_boot else {},
                         prompt_scripts=prompt_scripts, scored_boots=sum(len(b) for b in boots.values()))


def quality_line(quality: QualityReport, arm: str) -> str:
    """One line per arm, beside the throughput verdict."""
    parts = []
    drift_result = quality.drift.get(arm)
    if drift_result and drift_result.arm.mean_abs_dlogprob is not None:
        noise = drift_result.noise.mean_abs_dlogprob
        decode = drift_result.arm.decode_mean_abs_dlogprob
        parts.append(f"{drift_result.verdict}: prefill mean |dlogprob| {drift_result.arm.mean_abs_dlogprob:.3g} vs boot noise "
                     f"{'-' if noise is None else f'{noise:.3g}'}" + (f", decode {decode:.3g}" if decode is not None else "")
                     + f", top-1 agreement {100 * (drift_result.arm.top1_agreement or 0):.1f}%, KL {drift_result.arm.kl or 0:.2g} "
                     f"({drift_result.method})")
    elif quality.scored_boots == 0:  # every measured boot voided before its probes (each voided boot says why)
        parts.append("logprob drift not measured (no measured boot returned its quality probes)")
    elif quality.scoring is None:
        parts.append("logprob drift not measured (the engine returns no logprobs)")
    divergence = quality.divergence.get(arm)
    if divergence:
        parts.append(f"greedy: {divergence.summary}")
    coherence = quality.coherence.get(arm)
    if coherence and coherence.changed is not None:
        foreign = coherence.means.get("foreign_script_share")
        share = f"foreign-script share {'-' if foreign is None else f'{100 * foreign:.1f}%'}"
        pairs = max((d.pairs for d in (coherence.difference or {}).values()), default=0)
        if coherence.changed:
            parts.append("coherence CHANGED (" + ", ".join(coherence.changed) + f"; {share})")
        elif coherence.needs_pairs is not None and pairs < coherence.needs_pairs:
            parts.append(f"coherence: no change can be flagged below {coherence.needs_pairs} pairs ({share})")
        else:
            parts.append(f"coherence unchanged ({share})")
    return "; ".join(parts) or "not measured"


def quality_short(quality: QualityReport, arm: str) -> str:
    """The quality line shortened for the plot: verdict, drift and its floor, greedy divergence."""
    drift_result = quality.drift.get(arm)
    parts = []
    if drift_result and drift_result.arm.mean_abs_dlogprob is not None:
        noise = drift_result.noise.mean_abs_dlogprob
        parts.append(f"{drift_result.verdict[:30]}: |dlogprob| {drift_result.arm.mean_abs_dlogprob:.3g} "
                     f"(floor {'-' if noise is None else f'{noise:.2g}'}), top-1 {100 * (drift_result.arm.top1_agreement or 0):.1f}%")
    divergence = quality.divergence.get(arm)
    if divergence and divergence.compared:
        parts.append(f"greedy {divergence.diverged}/{divergence.compared} differ")
    return "; ".join(parts) or "quality not measured"
