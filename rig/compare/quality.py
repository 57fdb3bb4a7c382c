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
    return Score(logprobs=logprobs, top=tops, sequence=sequence_digest(reference))


def _sglang_post(http: Any, base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    response = http.post(f"{base_url}/generate", json={**body, "return_logprob": True, "top_logprobs_num": TOP_K}, timeout=120)
    response.raise_for_status()
    return response.json()


def _sglang_top(entries: list[list[Any]] | None) -> dict[int, float]:
    """One position's top-k as SGLang returns it: [[logprob, token id, text], ...]."""
    return {int(entry[1]): float(entry[0]) for entry in entries or []}


def _sglang_generate(http: Any, base_url: str, model: str, probe: Probe, max_tokens: int, pinning: dict[str, Any]) -> Generation:
    """SGLang's native /generate (sglang 0.5.17 io_struct.GenerateReqInput): the prompt's ids come back
    as `input_token_logprobs` from logprob_start_len 0, the continuation as `output_ids`."""
    body = _sglang_post(http, base_url, {"text": probe.text, "logprob_start_len": 0,
                                         "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0, **pinning}})
    meta = body["meta_info"]
    return Generation(prompt_ids=[int(entry[1]) for entry in meta["input_token_logprobs"]],
                      output_ids=[int(i) for i in body["output_ids"]], text=body.get("text") or "",
                      top=[_sglang_top(position) for position in meta.get("output_top_logprobs") or []] or None)


def _sglang_score(http: Any, base_url: str, model: str, reference: Generation) -> Score:
    """Teacher-forced: input_token_logprobs from logprob_start_len L start with token L (no logprob:
    sglang 0.5.17 prepends None and drops the sampled token), so entry j scores token L + j given the
    tokens before it. L = len(prompt) - 1 puts the continuation's tokens at entries 1..n."""
    prompt, output = list(reference.prompt_ids or []), list(reference.output_ids or [])
    body = _sglang_post(http, base_url, {"input_ids": prompt + output, "logprob_start_len": len(prompt) - 1,
                                         "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
    meta = body["meta_info"]
    entries, tops = meta["input_token_logprobs"][1:], (meta.get("input_top_logprobs") or [])[1:]
    if [int(entry[1]) for entry in entries] != output:
        raise ValueError("SGLang scored other tokens than the reference continuation (logprob_start_len semantics changed?)")
    return Score(logprobs=[float(entry[0]) for entry in entries], top=[_sglang_top(position) for position in tops],
                 sequence=sequence_digest(reference))


Generate = Callable[[Any, str, str, Probe, int, dict[str, Any]], Generation]
ScoreFn = Callable[[Any, str, str, Generation], Score]
# The engine registry's `scoring` values: how a server generates with token ids and scores a given
# sequence teacher-forced.
SCORING: dict[str, tuple[Generate, ScoreFn]] = {
    "vllm-prompt-logprobs": (_vllm_generate, _vllm_score),
    "sglang-input-logprobs": (_sglang_generate, _sglang_score),
}


def sequence_digest(generation: Generation) -> str:
    import hashlib

    ids = list(generation.prompt_ids or []) + [-1] + list(generation.output_ids or [])
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def _text_generate(http: Any, base_url: str, model: str, probe: Probe, max_tokens: int, pinning: dict[str, Any]) -> Generation:
    body = {"model": model, "prompt": probe.text, "max_tokens": max_tokens, "temperature": 0, **pinning}
    response = http.post(f"{base_url}/v1/completions", json=body, timeout=120)
    response.raise_for_status()
    return Generation(prompt_ids=None, output_ids=None, text=response.json()["choices"][0].get("text") or "")


def collect(base_url: str, model: str, engine: str, chosen: list[Probe], max_tokens: int,
            reference: dict[str, Generation] | None, defines_reference: bool = True) -> BootQuality:
    """This boot's greedy continuations and, where the engine scores, the reference scored. Without a
    reference yet, only a boot that may define it (the baseline's) scores its own continuations."""
    row = ENGINES[engine]
    pinning = dict(row.length_pinning)
    quality = BootQuality(scoring=row.scoring)
    with client.session() as http:
        if row.scoring is not None:
            generate, score = SCORING[row.scoring]
            for probe in chosen:
                quality.generations[probe.name] = generate(http, base_url, model, probe, max_tokens, pinning)
            scored = reference if reference is not None else (quality.generations if defines_reference else {})
            for name, generation in scored.items():
                quality.scores[name] = score(http, base_url, model, generation)
            if not scored:
                quality.note = "no reference continuation yet (no baseline boot had scored): this boot's drift is not measured"
        else:
            for probe in chosen:
                quality.generations[probe.name] = _text_generate(http, base_url, model, probe, max_tokens, pinning)
            quality.note = (f"{engine} returns no logprobs: logprob drift is not measured; divergence is located in "
                            "the text (re-tokenised) only")
    return quality


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
    method: str  # how the verdict was reached: exact on a bitwise-reproducible baseline, or the sign-flip test
    p: float  # the sign-flip test's one-sided p-value (0/1 for an exact verdict), before Holm across arms
    excess: Interval  # per block: the arm's drift from baseline boot 0 minus the block's baseline boot's
    arm: DriftFigures  # means over the arm's blocks (against the same block's baseline boot)
    noise: DriftFigures  # the baseline's own boot-to-boot drift, means over its pairs of boots
    tokens: int
    boots: int
    baseline_boots: int


FLIP_ALPHA = 0.05  # one-sided: "moved" means more drift than the baseline's own


def sign_flip_p(values: list[float], one_sided: bool) -> float:
    """Exact sign-flip permutation p-value of mean(values) against 0 (values symmetric under the null);
    the smallest it can be is 1 / 2^n (one-sided) or 2 / 2^n (two-sided)."""
    import itertools

    if not values:
        return 1.0
    observed = float(np.mean(values))
    means = [float(np.mean([s * v for s, v in zip(signs, values)])) for signs in itertools.product((1, -1), repeat=len(values))]
    tolerance = 1e-12 * max(1.0, abs(observed))
    if one_sided:
        return sum(m >= observed - tolerance for m in means) / len(means)
    return sum(abs(m) >= abs(observed) - tolerance for m in means) / len(means)


def min_pairs_for(alpha: float, one_sided: bool) -> int:
    """The fewest values a sign-flip test needs before any result can reach `alpha`."""
    n = 1
    while (1 if one_sided else 2) / 2 ** n > alpha:
        n += 1
    return n


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
      test holds its 5% whatever the noise's shape (tests/test_quality.py simulates it). It needs
      enough blocks to reach 5% at all (6 pairs); fewer say so."""
    blocks = sorted(set(baseline) & set(arm))
    order = sorted(baseline)
    arm_rows = [row for j in blocks if (row := drift(arm[j], baseline[j])) is not None]
    noise_rows = [row for i, a in enumerate(order) for b in order[i + 1:] if (row := drift(baseline[a], baseline[b])) is not None]
    verdict, method, p_value, excess = "not measured", "no arm boot scored the reference", 1.0, Interval.of([])
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
        p_value, excess = sign_flip_p(values, one_sided=True), Interval.of(values)
        method = f"exact one-sided sign-flip test over {len(values)} block(s), against baseline boot 0"
        if len(values) < needed:
            verdict = f"not enough boots: {needed + 1} pairs separate drift from boot noise at 5%"
        else:
            verdict = "outputs moved" if p_value <= FLIP_ALPHA else "within boot noise"
    return DriftVerdict(verdict=verdict, method=method, p=p_value, excess=excess, arm=_means(arm_rows), noise=_means(noise_rows),
                        tokens=int(sum(r.tokens for r in arm_rows)), boots=len(arm_rows), baseline_boots=len(order))


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
    p: dict[str, float] | None = None  # by figure: the exact two-sided sign-flip p-value over blocks
    changed: list[str] | None = None  # figures Holm's procedure over the arm's figures rejects equality for
    needs_pairs: int | None = None  # below this many pairs no figure can be flagged at all


def coherence_report(per_boot: dict[str, dict[int, BootCoherence]], baseline: str) -> dict[str, ArmCoherence]:
    """Per arm and figure: the paired difference from the baseline over blocks, with a descriptive 95%
    interval; "changed" only where an exact two-sided sign-flip test over the blocks, held family-wise
    by Holm over the arm's figures, rejects "nothing changed". Shares of outputs are discrete and
    often tie between blocks, so a t test on them is far from its nominal rate; the sign-flip test is
    exact, and with Holm over four figures it needs 8 pairs before anything can be flagged (said in
    `needs_pairs`)."""
    out: dict[str, ArmCoherence] = {}
    base = per_boot.get(baseline, {})
    needed = min_pairs_for(0.05 / len(COHERENCE_FIGURES), one_sided=False)  # Holm's first step over the figures

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
                diffs[figure] = Interval.of(values)
                if values:
                    p_values[figure] = sign_flip_p(values, one_sided=False)
            changed = holm(p_values)
            entry.difference = diffs
            entry.p = p_values
            entry.changed = [figure for figure, flag in changed.items() if flag]
            entry.needs_pairs = needed
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
    divergence = divergence_report(reference_boot.generations, {**{arm: list(b.values()) for arm, b in boots.items()},
                                                                **controls}, encode) if reference_boot else {}
    if reference_boot is not None and encode is None and any(g.output_ids is None for g in reference_boot.generations.values()):
        notes.append("the served tokenizer could not be loaded here: greedy divergence is not located (only identity)")
    prompt_scripts: set[str] = set()
    for name in plan.scenarios:
        prompt_scripts |= scripts_of((PROMPT_DIR / f"{load_scenario(name).prompt_set}.txt").read_text())
    per_boot: dict[str, dict[int, BootCoherence]] = {}
    for entry in usable:
        dirs = [Path(r.dir) for round_results in entry.rounds for r in round_results.values() if r.usable]
        if dirs:
            per_boot.setdefault(entry.arm, {})[entry.block] = boot_coherence(dirs, prompt_scripts)
    floor = next(iter(drift_by_arm.values())).noise if drift_by_arm else None  # the baseline's own boot-to-boot drift
    return QualityReport(scoring=scoring, notes=notes, reference_arm=baseline, drift=drift_by_arm,
                         baseline_noise=floor, divergence=divergence,
                         coherence=coherence_report(per_boot, baseline) if per_boot else {},
                         prompt_scripts=sorted(prompt_scripts))


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
