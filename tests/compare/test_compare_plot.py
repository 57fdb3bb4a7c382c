"""compare.png reads at a glance: a linear percent axis with ticks a reader can read a change off,
every delta inside the frame, and a legend that says what the grey noise box is."""

from __future__ import annotations

import math

import numpy as np
import pytest
from simulated_runs import Design, simulate_comparison

from rig.compare.plot import NOISE_LEGEND, as_percent, draw, effect_rows
from rig.compare.report import analyze


@pytest.fixture(scope="module")
def figure():
    import matplotlib.pyplot as plt

    # a 3.4x slowdown over two pairs: a far delta with a wide interval beside narrow ones
    plan, entries = simulate_comparison(np.random.default_rng(4), Design(pairs=2, step_change=math.log(3.4), boot_sd=0.1))
    analysis = analyze(plan, entries)
    drawn = draw(analysis)
    drawn.canvas.draw()
    yield analysis, drawn
    plt.close(drawn)


def test_the_effect_axis_is_linear_in_percent_with_readable_ticks(figure):
    _, drawn = figure
    right = drawn.axes[1]
    assert right.get_xscale() == "linear"
    labels = [t.get_text() for t in right.get_xticklabels() if t.get_text()]
    assert len(labels) >= 3 and all(label == "0" or (label[0] in "+-" and label.endswith("%")) for label in labels), labels
    ticks = [t for t in right.get_xticks() if right.get_xlim()[0] <= t <= right.get_xlim()[1]]
    assert len(set(np.round(np.diff(ticks), 6))) == 1, ticks  # evenly spaced: linear, not symlog decades


def test_every_delta_and_headline_interval_is_inside_the_frame(figure):
    analysis, drawn = figure
    low, high = drawn.axes[1].get_xlim()
    rows = effect_rows(analysis.scenarios["prose-c1"], "a")
    points = [x for row in rows if (shown := as_percent(row.comparison))
              for x in ((shown[0], *shown[1], *shown[2]) if row.headline else (shown[0],))]
    assert points and min(points) < -60  # the slowdown is drawn
    margin = 0.05 * (high - low)
    assert all(low + margin <= x <= high - margin for x in points), (low, high, points)  # none pressed on the border


def test_a_far_secondary_interval_is_cut_at_the_edge_with_its_end_value():
    """Two pairs of a 2.5x slowdown: a tail percentile's interval runs to thousands of percent. The
    axis stays on the scale of the deltas and the headline; the cut end is drawn as an arrow with its
    value, and the legend says what the arrow means."""
    import matplotlib.pyplot as plt

    from rig.compare.plot import CLIPPED_LEGEND, effect_limits

    for seed in range(40):
        plan, entries = simulate_comparison(np.random.default_rng(seed), Design(pairs=2, step_change=math.log(2.5), boot_sd=0.3))
        analysis = analyze(plan, entries)
        rows = effect_rows(analysis.scenarios["prose-c1"], "a")
        low, high = effect_limits(rows)
        cut = [shown[1] for row in rows if (shown := as_percent(row.comparison)) and (shown[1][0] < low or shown[1][1] > high)]
        if cut:
            break
    assert cut, "no simulated comparison with a secondary interval past the axis"
    drawn = draw(analysis)
    try:
        texts = [t.get_text() for t in drawn.axes[1].texts]
        ends = [end for interval in cut for end in interval if not low <= end <= high]
        assert all(f"{end:+,.0f}%" in texts for end in ends), (ends, texts)
        assert CLIPPED_LEGEND in [t.get_text() for t in drawn.axes[1].get_legend().get_texts()]
        assert high - low < 10 * max(abs(x) for row in rows if (shown := as_percent(row.comparison)) for x in (shown[0], 1.0))
    finally:
        plt.close(drawn)


def test_the_title_leads_with_each_headlines_verdict(figure):
    analysis, drawn = figure
    verdict = analysis.scenarios["prose-c1"].vs["b"].verdict
    assert drawn.axes[1].get_title().splitlines()[0] == f"b vs a: {verdict}"


def test_the_legend_explains_the_delta_its_interval_and_the_grey_noise_box(figure):
    _, drawn = figure
    legend = drawn.axes[1].get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert NOISE_LEGEND in texts and "b vs a: the change and its interval" in texts and "0: no change" in texts, texts
