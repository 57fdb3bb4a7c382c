"""How a recomputed figure is printed, so it can be held to the figure a claim quotes, digit for
digit: each as rig's own reports print it (compare.md for comparisons, summary.md for runs).

A kind reads one sort of evidence and gives every figure it can name (Kind.compute); a claim quotes a
few of them by name. Names carry the scenario, and the arm only where a comparison has more than one
arm beside its baseline (a control is always named: `outputs control fp16`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from rig.compare.stats import RATIO, Comparison
from rig.load.client_error import share_text


class Kind(ABC):
    """One sort of evidence: how its figures are recomputed (`method`, for the docs), and the figures."""

    name: str
    method: str

    @abstractmethod
    def compute(self, directory: Path) -> dict[str, str]:
        """Every figure the unpacked evidence in `directory` gives, by name, as printed."""


def percent(value: float) -> str:
    return f"{value:+.2f}%"


def micro_or_milli(ms: float) -> str:
    """A time per token as compare.md prints it: in microseconds below a millisecond."""
    return f"{1000 * ms:+.1f} us" if abs(ms) < 1 else f"{ms:+.2f} ms"


def verdict_words(c: Comparison) -> str:
    """The verdict as a word: a direction ("slower", "higher (worse)"), or "no difference resolved"
    without the reason beside it."""
    return c.verdict if c.decided else c.verdict.split(" (", 1)[0]


def delta_text(c: Comparison) -> str | None:
    """A ratio comparison as compare.md prints it: delta, 95% interval, verdict."""
    if c.delta is None or c.ci is None or c.scale != RATIO:
        return None
    return f"{percent(c.delta)} [{percent(c.ci[0])}, {percent(c.ci[1])}] {verdict_words(c)}"


def step_text(c: Comparison) -> str | None:
    """A per-token comparison (milliseconds) as compare.md prints it."""
    if c.delta is None or c.ci is None:
        return None
    return f"{micro_or_milli(c.delta)} [{micro_or_milli(c.ci[0])}, {micro_or_milli(c.ci[1])}]"


def sd_text(value: float | None) -> str | None:
    if value is None:
        return None
    return "~0" if value == 0 else f"{value:.3g}%"


def table_number(value: float) -> str:
    """A figure as summary.md's table prints it."""
    return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"


def bound_text(bound: float | None) -> str:
    return "unbounded" if bound is None else share_text(bound)


def comparison_figures(prefix: str, c: Comparison) -> dict[str, str]:
    """A headline's figures: the delta with its verdict, the verdict alone, its pairs and noise."""
    out = {f"verdict {prefix}": verdict_words(c), f"pairs {prefix}": str(c.pairs)}
    for name, text in ((f"headline {prefix}", delta_text(c)), (f"boot sd {prefix}", sd_text(c.noise.boot_sd)),
                       (f"round sd {prefix}", sd_text(c.noise.round_sd))):
        if text is not None:
            out[name] = text
    return out


def named(base: str, scenario: str | None, arm: str, single: bool) -> str:
    """`base scenario [arm]`: the arm only where the comparison has more than one arm beside its baseline."""
    return " ".join(part for part in (base, scenario, None if single else arm) if part)
