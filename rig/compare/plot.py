"""compare.png: per scenario, the boots in time order beside each comparison's delta.

The delta axis is linear in percent of the baseline, so a reader can read a change off it at a
glance. It spans every delta and each headline's interval; a latency or goodput interval far wider
than those is cut at the edge, with an arrow and its end value (effect_limits). The grey box behind
each delta is the noise of that delta: the interval it would have if it were centred on zero (the
same t, sd and pairs, at the row's own confidence). A point outside its box is a resolved change;
inside, the design cannot tell it from no change. The legend says so.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from rig.compare.analysis import Analysis, ScenarioResult
from rig.compare.quality import quality_short
from rig.compare.stats import RATIO, Comparison
from rig.png import save_png


def as_percent(c: Comparison) -> tuple[float, tuple[float, float], tuple[float, float]] | None:
    """(delta, interval, zero-centred noise box) in percent of the baseline; None without an interval.
    A difference (goodput) is scaled by the paired baseline mean, and has no percent when that is 0."""
    if c.delta is None or c.ci is None:
        return None
    if c.scale == RATIO:
        half = math.log1p(c.precision_pct / 100) if c.precision_pct is not None else 0.0
        return c.delta, c.ci, (100 * math.expm1(-half), 100 * math.expm1(half))
    if not c.baseline_mean:
        return None
    scale = 100 / c.baseline_mean
    half = (c.ci[1] - c.ci[0]) / 2
    return c.delta * scale, (c.ci[0] * scale, c.ci[1] * scale), (-half * scale, half * scale)


class EffectRow(NamedTuple):
    """One row of the effect panel: its label, the arm, the comparison, and whether it is a headline."""

    label: str
    arm: str
    comparison: Comparison
    headline: bool


def effect_rows(result: ScenarioResult, baseline: str) -> list[EffectRow]:
    rows = [EffectRow(f"{arm} vs {baseline}\n{result.headline}", arm, c, True) for arm, c in result.vs.items()]
    rows += [EffectRow(f"{arm}: {name}\n(lower is better)", arm, c, False) for name, per_arm in result.latency.items()
             for arm, c in per_arm.items() if c.delta is not None]
    rows += [EffectRow(f"{arm}: goodput\n(difference, % of baseline)", arm, c, False) for arm, c in result.goodput.items()]
    return rows


def effect_limits(rows: list[EffectRow]) -> tuple[float, float]:
    """The effect panel's x axis (linear, in percent). It always holds 0, every delta, and each
    headline's interval and noise box. A latency or goodput interval (or box) reaches past that by at
    most the same span again: one far, wide secondary interval (two pairs, a tail percentile) would
    otherwise squeeze the headline into a dot; what it cuts off is drawn to the edge with an arrow
    and its end value. A margin of a tenth of the span on each side keeps every point off the frame."""
    core, extra = [0.0], []
    for row in rows:
        if (shown := as_percent(row.comparison)) is None:
            continue
        core.append(shown[0])
        (core if row.headline else extra).extend((*shown[1], *shown[2]))
    core = [x for x in core if math.isfinite(x)]
    low, high = min(core), max(core)
    span = max(high - low, 4.0)
    reach = [x for x in extra if math.isfinite(x)]
    low, high = max(min([low, *reach]), low - span), min(max([high, *reach]), high + span)
    margin = max(0.1 * (high - low), 2.0)  # 2 points: an axis even where nothing but 0 is drawn
    return low - margin, high + margin


CLIPPED_LEGEND = "the interval runs on past the axis (its end beside the arrow)"
NOISE_LEGEND = "noise: the delta's interval centred on 0\n(a delta outside its grey box is a resolved change)"


def draw(analysis: Analysis) -> Any:
    """The figure: per scenario, the boots in time order (left) and each comparison's delta with its
    interval and its noise box (right, a linear percent axis with a legend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    arms = [a.name for a in analysis.plan.arms]
    colours = {arm: f"C{i}" for i, arm in enumerate(arms)}
    scenarios = analysis.scenarios
    rows_per_scenario = max(len(effect_rows(result, arms[0])) for result in scenarios.values()) if scenarios else 1
    height = max(4.6, 0.3 * rows_per_scenario + 2.4)
    figure, axes = plt.subplots(len(scenarios), 2, figsize=(13, height * len(scenarios)), squeeze=False,
                                gridspec_kw={"width_ratios": [2.2, 1]}, layout="constrained")
    for (left, right), (name, result) in zip(axes, scenarios.items()):
        labels = []
        for x, boot in enumerate(analysis.timeline):
            values = [v for v in boot.rounds.get(name, []) if v is not None]
            colour = "0.6" if boot.control else colours.get(boot.arm, "0.4")
            if values:
                # a line, not a bar: the axis is zoomed to the boots' range, where a bar's length would mislead
                left.hlines(float(np.mean(values)), x - 0.35, x + 0.35, color=colour, linewidth=2.5, zorder=2)
                left.scatter([x] * len(values), values, color=colour, s=18, zorder=3)
            if boot.voided:
                left.text(x, 0.04, "voided", rotation=90, ha="center", va="bottom", fontsize=8, color="red",
                          transform=left.get_xaxis_transform())
            labels.append(f"{boot.index}\n{boot.arm}")
        left.set_xticks(range(len(labels)), labels, fontsize=7)
        left.set_xlabel("boots in time order (index, arm)")
        left.set_ylabel(result.unit)
        left.set_title(f"{name}: rounds (points) and boot means (lines)")
        means = [v for arm_boots in result.boots.values() for vs in arm_boots.values() for v in vs]
        if means:
            low, high = min(means), max(means)
            left.set_ylim(max(0.0, low - 0.15 * (high - low + 1e-9) - 0.05 * high), high + 0.15 * (high - low + 1e-9) + 0.02 * high)
        left.legend(handles=[Patch(color=colours[a], alpha=0.6, label=a) for a in arms], fontsize=7, loc="lower right")
        rows = effect_rows(result, arms[0])
        x_low, x_high = effect_limits(rows)
        cut = False  # an interval runs on past the axis: the legend says what its arrow means
        for y, (_, arm, c, _) in enumerate(rows):
            shown = as_percent(c)
            if shown is None:  # at the panel's left, whatever the axis: never cut off at its edge
                right.text(0.02, y, f"{'no data' if c.delta is None else 'no interval'}", va="center", fontsize=7,
                           color="0.4", transform=right.get_yaxis_transform())
                continue
            delta, (low, high), (noise_low, noise_high) = shown
            right.fill_betweenx([y - 0.35, y + 0.35], max(noise_low, x_low), min(noise_high, x_high), color="0.87", zorder=0)
            ends = [(end, edge, marker, side) for end, edge, marker, side in ((low, x_low, "<", "left"), (high, x_high, ">", "right"))
                    if (end < edge if side == "left" else end > edge)]
            right.errorbar([delta], [y], xerr=[[delta - max(low, x_low)], [min(high, x_high) - delta]], fmt="o",
                           color=colours[arm], capsize=0 if ends else 4)
            right.annotate(f"{delta:+.1f}%", (delta, y), xytext=(0, 7), textcoords="offset points", ha="center", fontsize=7)
            for end, edge, marker, side in ends:
                right.plot([edge], [y], marker=marker, color=colours[arm], markersize=6, clip_on=False)
                right.annotate(f"{end:+,.0f}%", (edge, y), xytext=(3 if side == "left" else -3, -9), textcoords="offset points",
                               ha=side, fontsize=6, color=colours[arm])
            cut = cut or bool(ends)
        right.axvline(0, color="k", lw=0.8)
        right.set_xlim(x_low, x_high)
        right.xaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
        right.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:+,.0f}%" if x else "0"))
        right.grid(axis="x", color="0.9", lw=0.6)
        right.set_yticks(range(len(rows)), [row.label for row in rows], fontsize=7)
        right.set_ylim(len(rows) - 0.5, -0.5)
        right.set_xlabel(f"change, % of {arms[0]}\n(headline {100 * analysis.plan.confidence:.4g}%, others {100 * analysis.family.confidence:.4g}% each)")
        handles = [Line2D([], [], color=colours[arm], marker="o", label=f"{arm} vs {arms[0]}: the change and its interval")
                   for arm in arms[1:]]
        handles += [Patch(color="0.87", label=NOISE_LEGEND), Line2D([], [], color="k", lw=0.8, label="0: no change")]
        if cut:
            handles.append(Line2D([], [], color="0.3", marker=">", ls="none", label=CLIPPED_LEGEND))
        right.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                     frameon=False)
        # the answer first: each headline's verdict, then what the outputs did
        lines = [f"{row.arm} vs {arms[0]}: {row.comparison.verdict}" for row in rows if row.headline]
        quality = analysis.quality
        lines += [f"{arm}: {quality_short(quality, arm)}" for arm in arms[1:]] if quality else []
        right.set_title("\n".join(lines) or "effect: headline, latency, goodput", fontsize=8)
    return figure


def plot(analysis: Analysis, path: Path) -> None:
    import matplotlib.pyplot as plt

    figure = draw(analysis)
    save_png(figure, path)
    plt.close(figure)
