"""Each measured boot's figures of one scenario, by arm and ABBA block, as the report's
comparisons take them: the headline's usable rounds, goodput, the decode rate as time per token,
latency percentiles pooled over a boot's requests, and the client bounds behind them."""

from __future__ import annotations

from rig.compare.analysis import ArmBoots, PercentileBoots, ScenarioFigures
from rig.compare.model import BootEntry, ComparePlan
from rig.compare.percentiles import pooled_percentile
from rig.load.client_error import UNBOUNDED
from rig.load.figures import LATENCY, LatencyFigure
from rig.load.summary import HEADLINE


def measured(entries: list[BootEntry]) -> list[BootEntry]:
    return [e for e in entries if e.measured]


def figure_boots(entries: list[BootEntry], scenario: str, figure: str) -> ArmBoots:
    boots: ArmBoots = {}
    for entry in measured(entries):
        values = entry.usable_figures(scenario, figure)
        if values:
            boots.setdefault(entry.arm, {})[entry.block] = values
    return boots


def goodput_boots(entries: list[BootEntry], scenario: str) -> ArmBoots:
    """Each usable round's goodput, zeros kept: a round where no request met the SLOs measured 0."""
    boots: ArmBoots = {}
    for entry in measured(entries):
        values = [float(r.goodput.requests_per_s) for r in entry.usable_results(scenario) if r.goodput]
        if values:
            boots.setdefault(entry.arm, {})[entry.block] = values
    return boots


def per_token_boots(headline_boots: ArmBoots) -> ArmBoots:
    """Each usable round's decode rate as milliseconds per token (a round without tokens has none)."""
    return {arm: {block: [1000.0 / v for v in values if v > 0] for block, values in blocks.items()}
            for arm, blocks in headline_boots.items()}


def percentile_boots(entries: list[BootEntry], scenario: str, figure: LatencyFigure) -> PercentileBoots:
    result = PercentileBoots(figure=figure, values={}, counts={})
    for entry in measured(entries):
        rounds = [r.latency[figure.samples] for r in entry.usable_results(scenario, figure.name) if figure.samples in r.latency]
        result.client_left_out.setdefault(entry.arm, []).extend(
            r.client_bounds.get(figure.name) or UNBOUNDED for r in entry.usable_results(scenario) if not r.usable_for(figure.name))
        if not rounds:
            continue
        pooled = pooled_percentile(rounds, figure.quantile)
        result.counts.setdefault(entry.arm, {})[entry.block] = pooled.count
        if pooled.value is not None:
            result.values.setdefault(entry.arm, {})[entry.block] = [pooled.value]
    return result


def scenario_figures(plan: ComparePlan, entries: list[BootEntry], name: str, kind: str) -> ScenarioFigures:
    headline = HEADLINE[kind]
    return ScenarioFigures(kind=kind, headline=headline, headline_boots=figure_boots(entries, name, headline.name),
                           latency=[percentile_boots(entries, name, figure) for figure in LATENCY],
                           goodput=goodput_boots(entries, name) if plan.slos else None,
                           client_bounds=client_bounds_used(entries, name, [headline.name, *(f.name for f in LATENCY)]))


def client_bounds_used(entries: list[BootEntry], scenario: str, names: list[str]) -> dict[str, float]:
    """Per figure, the largest client bound over the rounds it was read from (rounds of rigs before
    the bound, or imported ones, carry none and add nothing)."""
    out = {}
    for name in names:
        figure = None if name not in {f.name for f in LATENCY} else name
        bounds = [b for e in measured(entries) for r in e.usable_results(scenario, figure) if (b := r.client_bounds.get(name)) is not None]
        if bounds:
            out[name] = max(bounds)
    return out
