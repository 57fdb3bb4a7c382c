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


def test_every_point_and_interval_is_inside_the_frame(figure):
    analysis, drawn = figure
    low, high = drawn.axes[1].get_xlim()
    rows = effect_rows(analysis.scenarios["prose-c1"], "a")
    points = [x for _, _, c in rows if (shown := as_percent(c)) for x in (shown[0], *shown[1], *shown[2])]
    assert points and min(points) < -60  # the slowdown is drawn
    margin = 0.05 * (high - low)
    assert all(low + margin <= x <= high - margin for x in points), (low, high, points)  # none pressed on the border


def test_the_legend_explains_the_delta_its_interval_and_the_grey_noise_box(figure):
    _, drawn = figure
    legend = drawn.axes[1].get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert NOISE_LEGEND in texts and "b vs a: the change and its interval" in texts and "0: no change" in texts, texts
