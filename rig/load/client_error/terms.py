"""What a bound is made of (docs/client-error.md): the hold-backs of a user's timeline, each from one
source and rule, and a figure's bound with the terms that made it, so a report can show them."""

from __future__ import annotations

from dataclasses import dataclass

UNBOUNDED = 1e3  # the client could have moved the figure by more than the figure itself


@dataclass(frozen=True)
class Hold:
    """A user's timeline held back by `seconds` from start_s on, by the rule that names its source."""

    start_s: float
    seconds: float
    rule: str


@dataclass(frozen=True)
class Term:
    """One part of a bound: its rule, a name that carries its unit, and its value."""

    rule: str
    name: str
    value: float


@dataclass(frozen=True)
class Bound:
    """A figure's bound as a share of the reported figure (None: not measurable), and its terms."""

    total: float | None
    terms: tuple[Term, ...] = ()


NO_BOUND = Bound(None)


def share_of_reported(share_of_truth: float) -> float:
    """R16: a bound stated as a share of the truth, restated as one of the reported figure."""
    return share_of_truth / (1 - share_of_truth) if share_of_truth < 1 else UNBOUNDED


def share_text(bound: float, limit: float | None = None) -> str:
    """A bound as the reports print it: a share of the figure; from 100% on, the client could have
    made the figure up, and a larger number says nothing more. Beside its `limit`, with the digits
    that tell them apart (5.04% over a 5% limit, not "5%")."""
    if bound >= 1:
        return "over 100%"
    digits = 2
    while limit is not None and digits < 6 and bound != limit and f"{100 * bound:.{digits}g}" == f"{100 * limit:.{digits}g}":
        digits += 1
    return f"{100 * bound:.{digits}g}%"
