"""A stopping rule for a comparison whose answer should be a direction: boot pairs are added one
at a time until every headline interval excludes 0, or until the most pairs the rule allows ran.

Looking at a 95% interval after every pair and stopping at the first that excludes 0 would inflate
the false-verdict rate: each look is one more chance for noise alone to exclude 0. The rule keeps
the stated 5% by Bonferroni over its looks. It looks after `first`, first + 1, ..., `most` pairs,
K = most - first + 1 looks fixed before any boot, each headline interval at 1 - 0.05 / K. The chance
that any of the K intervals misses the true change is then at most 5% whatever their dependence,
so the interval printed at the stop covers the true change at least 95% of the time, and with
nothing changed a verdict is printed at most 5% of the time (tests/compare/test_compare_sequential.py
simulates both). The price is width: each look's t quantile is that of 1 - 0.025 / K, which on 1 df
(two pairs) leaves nothing to decide, so the first look waits for `first` pairs (3 or more).

A look is made after every block the comparison runs, including one whose pair was left out (its
rounds voided by the client): a lost pair costs a look, so the number of looks never depends on the
data. Each headline keeps its own rate, as a fixed design's do (rig.compare.report).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from rig.atomic import write_text_atomic
from rig.compare.design import FIRST_LOOK, MAX_PAIRS
from rig.compare.figures import figure_boots
from rig.compare.model import BootEntry, ComparePlan
from rig.compare.stats import MIN_PAIRS, SEQUENTIAL_ALPHA, Comparison, compare_boots, per_look_confidence
from rig.load.figures import HEADLINE, USER_DECODE, Figure
from rig.load.scenarios import load_scenario
from rig.typed import Typed, Versioned

DECISION_FILE = "until-decided.json"  # the rule and every look it made, beside compare.json
DECISION_SCHEMA = 1


class UntilDecided(Typed):
    """The rule: the first look after `first` pairs, the last after `most`."""

    first: int = FIRST_LOOK
    most: int
    alpha: float = SEQUENTIAL_ALPHA  # the false-verdict rate over all looks together

    @model_validator(mode="after")
    def _bounded(self) -> UntilDecided:
        if not FIRST_LOOK <= self.first <= self.most <= MAX_PAIRS:
            raise ValueError(f"the looks run from {self.first} to {self.most} pairs: need {FIRST_LOOK} <= first <= most <= {MAX_PAIRS}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha {self.alpha} is not in (0, 1)")
        return self

    @property
    def looks(self) -> int:
        return self.most - self.first + 1

    @property
    def confidence(self) -> float:
        """Each look's interval: Bonferroni over the looks."""
        return per_look_confidence(self.looks, self.alpha)

    def statement(self) -> str:
        return (f"boot pairs added one at a time until the interval excludes 0: a look after each pair from {self.first} to "
                f"{self.most}, each interval at {100 * self.confidence:.4g}% (Bonferroni over the {self.looks} looks: at most "
                f"{100 * self.alpha:.0f}% false verdicts, and the interval at the stop covers the change at least "
                f"{100 - 100 * self.alpha:.0f}% of the time)")

    def judge(self, baseline: dict[int, list[float]], arm: dict[int, list[float]], figure: Figure = USER_DECODE,
              names: tuple[str, str] = ("baseline", "arm")) -> Comparison:
        """One headline's comparison at a look (compare_boots' arguments), at the rule's confidence."""
        return compare_boots(baseline, arm, figure.name, figure.higher_is_better, confidence=self.confidence, unit=figure.unit,
                             names=names)

    def look(self, plan: ComparePlan, entries: list[BootEntry], kinds: dict[str, str] | None = None) -> Look:
        """Every headline comparison of the pairs run so far, at the rule's confidence."""
        arms = [a.name for a in plan.arms]
        comparisons = []
        for name in plan.scenarios:
            headline = HEADLINE[(kinds or {}).get(name) or load_scenario(name).kind]
            boots = figure_boots(entries, name, headline.name)
            comparisons += [self.judge(boots.get(arms[0], {}), boots.get(arm, {}), headline, (arms[0], arm)) for arm in arms[1:]]
        return Look(number=plan.boots - self.first + 1, pairs_run=plan.boots, scenarios=list(plan.scenarios),
                    arms=arms, comparisons=comparisons)


class Look(Typed):
    """One look: the headline comparisons after `pairs_run` pairs, scenario by scenario, arm by arm."""

    number: int  # 1 for the look after `first` pairs
    pairs_run: int  # blocks run (a block whose pair was left out counts: the looks are fixed in advance)
    scenarios: list[str]
    arms: list[str]  # the baseline first
    comparisons: list[Comparison]  # scenario-major, one per arm after the baseline

    @property
    def decided(self) -> bool:
        return bool(self.comparisons) and all(c.decided for c in self.comparisons)

    def labelled(self) -> list[tuple[str, str, Comparison]]:
        """(scenario, arm, comparison) of every headline."""
        per_scenario = len(self.arms) - 1
        return [(self.scenarios[i // per_scenario], self.arms[1 + i % per_scenario], c) for i, c in enumerate(self.comparisons)]


class Decision(Versioned):
    """until-decided.json: the rule and every look it made, the last one deciding (or the last allowed)."""

    schema_version: int = Field(DECISION_SCHEMA, alias="schema")
    rule: UntilDecided
    looks: list[Look]

    @property
    def last(self) -> Look | None:
        return self.looks[-1] if self.looks else None

    @property
    def decided(self) -> bool:
        return self.last is not None and self.last.decided

    @property
    def exhausted(self) -> bool:
        """Every pair the rule allows ran and a headline interval still spans 0."""
        return not self.decided and self.last is not None and self.last.pairs_run >= self.rule.most

    def write(self, out: Path) -> None:
        write_text_atomic(out / DECISION_FILE, self.json_text())

    @classmethod
    def read(cls, out: Path) -> Decision:
        return cls.read_file(out / DECISION_FILE, 1 << 20)


def interval_text(c: Comparison) -> str:
    """'-52.10% [-70.31%, -16.02%]' (percent of the baseline), or why there is no interval."""
    if c.delta is None:
        return "no data"
    if c.ci is None:
        return f"{c.delta:+.2f}% (no interval)"
    return f"{c.delta:+.2f}% [{c.ci[0]:+.2f}%, {c.ci[1]:+.2f}%]"


def look_line(rule: UntilDecided, look: Look) -> str:
    """The progress line of one look: what each headline reads and whether the comparison goes on."""
    parts = [f"{scenario} {arm}: {interval_text(c)} over {c.pairs} usable pair(s): "
             + (c.verdict if c.decided else "spans 0" if c.ci is not None else f"{MIN_PAIRS} give an interval")
             for scenario, arm, c in look.labelled()]
    if look.decided:
        then = "decided: stopping"
    elif look.pairs_run >= rule.most:
        then = f"undecided after {rule.most} pairs, the most the rule allows: stopping"
    else:
        then = f"adding pair {look.pairs_run + 1}"
    return (f"compare: look {look.number} of at most {rule.looks}, after {look.pairs_run} pair(s), at "
            f"{100 * rule.confidence:.4g}%: {'; '.join(parts)}; {then}")
