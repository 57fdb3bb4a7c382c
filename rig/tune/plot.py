"""tune.png: the race round by round. Each candidate's interval against the best of that look
(percent of the best's figure, at the race's confidence; the best a star at 0), the margin as a grey
band around 0, and a cross where a candidate left the race. A candidate whose interval sits wholly on the worse
side of 0 after the first look is one the rule eliminated."""

from __future__ import annotations

from pathlib import Path

from rig.png import save_png
from rig.tune.plan import RacePlan
from rig.tune.rule import FIRST_LOOK
from rig.tune.run import RaceState


def plot(plan: RacePlan, state: RaceState, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [c.name for c in plan.candidates]
    figure, axis = plt.subplots(figsize=(8, 1.2 + 0.45 * len(names) + 0.2 * max(1, len(state.looks))))
    step = 0.8 / max(1, len(state.looks))
    colors = plt.get_cmap("viridis")
    for look_index, made in enumerate(state.looks):
        color = colors(0.8 * look_index / max(1, len(state.looks) - 1))  # viridis' last fifth is yellow: unreadable on white
        label = f"after round {made.round + 1} (best: {made.best})"
        axis.plot(0, names.index(made.best) + look_index * step - 0.4, "*", color=color, markersize=8)  # the look's reference
        for standing in made.standings:
            if standing.ci_pct is None or standing.delta_pct is None:
                continue
            y = names.index(standing.candidate) + look_index * step - 0.4
            low, high = standing.ci_pct
            axis.errorbar(standing.delta_pct, y, xerr=[[standing.delta_pct - low], [high - standing.delta_pct]], fmt="o",
                          color=color, markersize=3, capsize=2, label=label)
            label = None
            if standing.candidate in made.eliminated:
                axis.plot(standing.delta_pct, y, "x", color="red", markersize=9)
        if label is not None:  # a look with no interval still gets its legend entry
            axis.plot([], [], "o", color=color, label=label)
    axis.axvspan(-plan.margin_pct, plan.margin_pct, color="0.85", zorder=0, label=f"margin +-{plan.margin_pct:g}%")
    axis.axvline(0, color="0.4", linewidth=0.8)
    axis.set_yticks(range(len(names)), names)
    axis.invert_yaxis()
    axis.set_xlabel(f"{plan.objective}: percent of the look's best (* : the best; looks decide from round {FIRST_LOOK})")
    axis.set_title(f"rig tune {plan.recipe} on {plan.scenario}: red cross = eliminated", fontsize=10)
    axis.legend(fontsize=7, loc="best")
    figure.tight_layout()
    save_png(figure, path)
    plt.close(figure)
