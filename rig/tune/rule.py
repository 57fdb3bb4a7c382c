"""The racing rule: which candidates a look eliminates, and when the race stops.

F-race (Birattari et al., "A Racing Algorithm for Configuring Metaheuristics", GECCO 2002) races
candidates on repeated blocks and drops the ones a test shows worse. Here a block is a race round:
every surviving candidate booted once, in a position-balanced order (rig.tune.plan.round_order), so
a drift over the round falls on all of them alike, and the unit of replication is the boot, as in
`rig compare` (rig.compare.stats): each boot's figure is the mean of its usable rounds, on the log
scale.

The intervals. After each round every survivor is compared with the current best. As in F-race,
the noise is pooled over all survivors: the rounds are blocks of a two-way layout (candidate x
round, additive on the log scale, fitted by least squares), whose residuals estimate one boot's sd
on (k - 1)(r - 1) degrees of freedom for k survivors and r complete rounds. The best is the survivor
with the best fitted effect, and a candidate's interval against it is the difference of their
effects +- t * sd * its standard error (sqrt(2 / r) with every boot there): the paired t interval of
`rig compare` when k = 2, and with 8 candidates 14 degrees of freedom after 3 rounds where a lone
pair has 2, so a race can decide early. A boot with no usable figure is a missing cell, not a lost
round for everyone. It assumes one boot sd for all candidates (on the log scale), which the
calibration simulates. A block is a round on one GPU set (rig.tune.run.by_gpu): a race resumed on
another GPU mid-round splits that round, so a GPU's own speed never enters a difference. Only
candidates that blocks connect are compared (a difference is estimable only between them); the
others get no interval yet.

Error control. Over the whole race the comparisons made are among the candidates' pairs, at most
C(candidates, 2) per look, over `looks` = max_rounds - FIRST_LOOK + 1 looks, both fixed before any
boot. Each interval is made at 1 - alpha / (pairs x looks) (Bonferroni over pairs and looks), so
with probability at least 1 - alpha every interval the race can make covers its true difference at
once; an elimination happens only when an interval lies wholly on the worse side of 0, so then every
elimination is right: the chance of any false elimination in the race (the true best's included)
is at most alpha, whatever the data-dependent choice of the current best and whatever the dependence
between looks. The same intervals decide equivalence: the race stops early when every survivor's
interval against the best lies inside +-margin (no difference resolved above it). Calibrated by
simulation (rig.tune.calibration, tests/tune/test_tune_calibration.py).

FIRST_LOOK is 3 rounds: the fewest whose looks can decide anything at 1 - alpha / (pairs x looks)
when only two candidates are left (2 degrees of freedom).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rig.compare.stats import pct, t_quantile
from rig.typed import Typed

FIRST_LOOK = 3
ALPHA = 0.05
DEFAULT_MARGIN_PCT = 0.3
DEFAULT_MAX_ROUNDS = 6

RoundFigures = dict[int, list[float]]  # race round -> the usable round figures of the candidate's boot in it


@dataclass(frozen=True)
class RaceRule:
    """The race's design, fixed before its first boot."""

    candidates: int
    max_rounds: int = DEFAULT_MAX_ROUNDS
    margin_pct: float = DEFAULT_MARGIN_PCT
    alpha: float = ALPHA
    higher_is_better: bool = True

    @property
    def looks(self) -> int:
        return max(1, self.max_rounds - FIRST_LOOK + 1)

    @property
    def tests(self) -> int:
        """The intervals the race may make: every pair of candidates at every look."""
        return max(1, self.candidates * (self.candidates - 1) // 2) * self.looks

    @property
    def confidence(self) -> float:
        """Each interval's two-sided confidence: Bonferroni over every interval the race may make."""
        return 1 - self.alpha / self.tests

    def statement(self) -> str:
        return (f"a look after each round from {FIRST_LOOK} to {self.max_rounds}: each survivor's interval against the "
                f"best (boot noise pooled over the survivors) at {100 * self.confidence:.4g}% (Bonferroni over {self.tests // self.looks} pairs x {self.looks} looks), "
                f"so any elimination, the true best's included, is wrong at most {100 * self.alpha:.0f}% of the time")


class Standing(Typed):
    """A survivor's interval against the best at one look (percent of the best's figure)."""

    candidate: str
    delta_pct: float | None
    ci_pct: tuple[float, float] | None
    pairs: int


class Look(Typed):
    """What one look saw and decided."""

    round: int  # the race round after which it was made (0-based)
    best: str
    standings: list[Standing]
    eliminated: dict[str, str]  # candidate -> why (worse than the best, a constraint, failed boots)
    equivalent: bool  # every survivor left is within the margin of the best


def log_mean(figures: RoundFigures) -> float | None:
    """The mean over boots of ln(boot mean): what "best" is chosen by."""
    means = [float(np.mean(values)) for values in figures.values() if values and all(v > 0 for v in values)]
    return float(np.mean(np.log(means))) if means else None


def current_best(figures: dict[str, RoundFigures], survivors: list[str], higher_is_better: bool = True) -> str:
    """The survivor with the best mean log figure (the first survivor when none has one yet)."""
    scored = [(m, name) for name in survivors if (m := log_mean(figures.get(name, {}))) is not None]
    if not scored:
        return survivors[0]
    pick = max if higher_is_better else min
    return pick(scored)[1]


def boot_logs(figures: RoundFigures) -> dict[int, float]:
    """Race round -> ln(boot figure), the figure being the mean of the boot's usable rounds."""
    return {r: math.log(float(np.mean(v))) for r, v in figures.items() if v and all(x > 0 for x in v)}


def connected(names: list[str], logs: dict[str, dict[int, float]]) -> list[str]:
    """The largest group of `names` that shared blocks link, directly or through each other (ties:
    the one holding the earliest name): the candidates whose differences the additive fit estimates."""
    group = {name: name for name in names}

    def root(name: str) -> str:
        while group[name] != name:
            name = group[name]
        return name

    for block in {b for name in names for b in logs[name]}:
        members = [name for name in names if block in logs[name]]
        for other in members[1:]:
            group[root(other)] = root(members[0])
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(root(name), []).append(name)
    return max(groups.values(), key=lambda g: (len(g), -names.index(g[0]))) if groups else []


def intervals(rule: RaceRule, figures: dict[str, RoundFigures], racing: list[str]) -> tuple[str, list[Standing]]:
    """The best of the racing candidates and each other one's interval against it, in percent of
    the best's figure, from the additive candidate x round fit with the noise pooled over them (see
    the module's docstring). A boot with no figure is a missing cell of that fit, not a lost round;
    a candidate with no figure at all gets no interval."""
    logs = {name: boot_logs(figures.get(name, {})) for name in racing}
    fitted = connected([name for name in racing if logs[name]], logs)
    rounds = sorted({r for name in fitted for r in logs[name]})
    cells = [(i, rounds.index(r), value) for i, name in enumerate(fitted) for r, value in logs[name].items()]
    if len(fitted) < 2:
        best = fitted[0] if fitted else racing[0]
        return best, [Standing(candidate=name, delta_pct=None, ci_pct=None, pairs=0) for name in racing if name != best]
    k = len(fitted)
    design = np.zeros((len(cells), k + len(rounds) - 1))  # candidate effects, then rounds after the first
    for row, (i, j, _) in enumerate(cells):
        design[row, i] = 1.0
        if j:
            design[row, k + j - 1] = 1.0
    y = np.asarray([value for _, _, value in cells])
    effects, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    df = len(cells) - int(rank)
    sd = math.sqrt(float(((y - design @ effects) ** 2).sum()) / df) if df > 0 else None
    covariance = np.linalg.pinv(design.T @ design)
    pick = max if rule.higher_is_better else min
    best_index = pick(range(k), key=lambda i: effects[i])
    best = fitted[best_index]
    standings = []
    for name in racing:
        if name == best:
            continue
        if name not in fitted:
            standings.append(Standing(candidate=name, delta_pct=None, ci_pct=None, pairs=0))
            continue
        i = fitted.index(name)
        d = float(effects[i] - effects[best_index])
        pairs = len(set(logs[name]) & set(logs[best]))
        ci = None
        if sd is not None:
            half = t_quantile(df, rule.confidence) * sd * math.sqrt(max(0.0, covariance[i, i] + covariance[best_index, best_index]
                                                                             - 2 * covariance[i, best_index]))
            ci = (pct(d - half), pct(d + half))
        standings.append(Standing(candidate=name, delta_pct=pct(d), ci_pct=ci, pairs=pairs))
    return best, standings


def worse(rule: RaceRule, standing: Standing) -> bool:
    """The interval excludes 0 on the worse side of the best."""
    if standing.ci_pct is None:
        return False
    low, high = standing.ci_pct
    return high < 0 if rule.higher_is_better else low > 0


def look(rule: RaceRule, figures: dict[str, RoundFigures], survivors: list[str], round_index: int,
         excluded: dict[str, str] | None = None) -> Look:
    """The look after `round_index`: `excluded` (candidate -> why) are the survivors a constraint or
    failed boots rule out at this look; the rest are judged against the best. Before FIRST_LOOK rounds
    the intervals are shown and nothing is eliminated for speed."""
    excluded = dict(excluded or {})
    racing = [name for name in survivors if name not in excluded] or survivors[:1]
    eliminated = dict(excluded)
    judged = round_index + 1 >= FIRST_LOOK
    best, standings = intervals(rule, figures, racing)
    for standing in standings:
        if judged and worse(rule, standing):
            eliminated[standing.candidate] = f"worse than {best} after round {round_index + 1}"
    left = [s for s in standings if s.candidate not in eliminated]
    equivalent = judged and bool(left) and all(
        s.ci_pct is not None and -rule.margin_pct <= s.ci_pct[0] and s.ci_pct[1] <= rule.margin_pct for s in left)
    return Look(round=round_index, best=best, standings=standings, eliminated=eliminated, equivalent=equivalent)


def violates_bound(values: list[float], bound: float, rule: RaceRule) -> bool:
    """A latency percentile (one value per boot) shown above its bound: the lower end of its t
    interval at the rule's confidence is above it (one boot, or none, shows nothing)."""
    if len(values) < 2:
        return False
    mean, sd = float(np.mean(values)), float(np.std(values, ddof=1))
    return mean - t_quantile(len(values) - 1, rule.confidence) * sd / math.sqrt(len(values)) > bound
