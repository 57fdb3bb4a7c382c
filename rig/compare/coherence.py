"""Coherence under load, from the load tests' own outputs: the share of outputs with letters of
scripts absent from the prompts (a quality gate's "CJK 0"), repeated word 4-grams, empty and cut outputs,
and the finish-reason mix. Each boot's figures are computed when the boot ran (from its usable
rounds' records: `boot_coherence`), and each arm's against the baseline by an exact sign-flip test
over the blocks, Holm across the arm's figures (`coherence_report`)."""

from __future__ import annotations

import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from rig.compare.stats import PairedInterval, holm, min_pairs_for, sign_flip_p
from rig.load.records import read_records
from rig.typed import Typed


def scripts_of(text: str) -> set[str]:
    """The scripts of a text's letters (the first word of each letter's Unicode name: LATIN, CJK,
    CYRILLIC, HANGUL...); digits, punctuation and symbols belong to none."""
    found = set()
    for char in text:
        if unicodedata.category(char).startswith("L"):
            found.add(unicodedata.name(char, "UNKNOWN").split(" ")[0])
    return found


def prompt_scripts_of(prompt_sets: list[str]) -> set[str]:
    """The scripts of the letters in the named prompt sets (loadtests/prompts/NAME.txt)."""
    from rig.load.scenarios import PROMPT_DIR

    found: set[str] = set()
    for name in dict.fromkeys(prompt_sets):
        found |= scripts_of((PROMPT_DIR / f"{name}.txt").read_text())
    return found


def repetition(text: str, n: int = 4) -> float | None:
    """Share of repeated word n-grams (1 - distinct / total); None below 2n words."""
    words = text.split()
    if len(words) < 2 * n:
        return None
    grams = [tuple(words[i: i + n]) for i in range(len(words) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams)


class BootCoherence(Typed):
    """One boot's load-test outputs (figures: COHERENCE_FIGURES), against the scripts of its prompts."""

    outputs: int
    prompt_scripts: list[str] = Field(default_factory=list)
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
        return BootCoherence(outputs=0, prompt_scripts=sorted(prompt_scripts))
    foreign = 0
    for text in kept:
        extra = scripts_of(text) - prompt_scripts
        if extra:
            foreign += 1
            foreign_scripts.update(extra)
    reps = [r for r in (repetition(t) for t in kept) if r is not None]
    return BootCoherence(outputs=len(texts), with_text=len(kept), prompt_scripts=sorted(prompt_scripts),
                         foreign_script_share=foreign / len(kept) if kept else None, foreign_scripts=dict(foreign_scripts),
                         empty_share=sum(1 for t in kept if not t.strip()) / len(kept) if kept else None,
                         cut_share=cut / len(texts), repetition=float(np.mean(reps)) if reps else None,
                         finish_reasons=dict(finish))


COHERENCE_FIGURES = ("foreign_script_share", "empty_share", "cut_share", "repetition")


class ArmCoherence(Typed):
    means: dict[str, float | None]  # by figure, over the arm's boots
    finish_reasons: dict[str, int]
    foreign_scripts: dict[str, int]
    difference: dict[str, PairedInterval] | None = None  # by figure, against the baseline (None: the baseline itself)
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
                diffs[figure] = PairedInterval.of(values)
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
