"""The racing rule and the round order, on synthetic figures (no boots)."""

from __future__ import annotations

from rig.tune.plan import round_order
from rig.tune.rule import FIRST_LOOK, RaceRule, current_best, intervals, look


def _figures(means: dict[str, float], rounds: int, wobble: float = 0.001) -> dict[str, dict[int, list[float]]]:
    """Each candidate's boots at its mean, moved by a fixed pattern (+-wobble) so pairs have spread."""
    return {name: {r: [mean * (1 + wobble * ((r * 7 + i) % 3 - 1))] for r in range(rounds)}
            for i, (name, mean) in enumerate(means.items())}


def test_every_survivor_boots_in_every_position_over_two_rounds_per_survivor():
    survivors = ["a", "b", "c", "d"]
    orders = [round_order(survivors, r) for r in range(2 * len(survivors))]
    assert orders[0][0] == "a" and all(sorted(o) == survivors for o in orders)
    assert all({o[p] for o in orders} == set(survivors) for p in range(len(survivors)))
    assert orders[1] == list(reversed(orders[0]))  # consecutive rounds mirror each other (ABBA-like)


def test_a_clearly_worse_candidate_leaves_at_the_first_look_and_not_before():
    rule = RaceRule(candidates=3, max_rounds=6)
    figures = _figures({"a": 100.0, "b": 99.9, "c": 80.0}, FIRST_LOOK)
    early = look(rule, figures, ["a", "b", "c"], FIRST_LOOK - 2)
    assert early.eliminated == {}
    made = look(rule, figures, ["a", "b", "c"], FIRST_LOOK - 1)
    assert made.best == "a" and set(made.eliminated) == {"c"} and "worse than a" in made.eliminated["c"]


def test_survivors_within_the_margin_of_the_best_stop_the_race_as_equivalent():
    rule = RaceRule(candidates=2, max_rounds=6, margin_pct=5.0)
    made = look(rule, _figures({"a": 100.0, "b": 100.0}, 5, wobble=0.01), ["a", "b"], 4)
    assert made.equivalent and made.eliminated == {}


def test_lower_is_better_picks_the_lowest_and_a_constraint_rules_out_even_the_best():
    rule = RaceRule(candidates=3, higher_is_better=False)
    figures = _figures({"a": 10.0, "b": 12.0, "c": 20.0}, 4)
    assert current_best(figures, ["a", "b", "c"], higher_is_better=False) == "a"
    made = look(rule, figures, ["a", "b", "c"], 3, excluded={"a": "ttft_p99_ms above 5 ms"})
    assert made.best == "b" and made.eliminated["a"] == "ttft_p99_ms above 5 ms" and "c" in made.eliminated


def test_the_confidence_is_bonferroni_over_every_pair_and_look():
    rule = RaceRule(candidates=4, max_rounds=6, alpha=0.05)
    assert rule.looks == 6 - FIRST_LOOK + 1 and rule.tests == 6 * rule.looks
    assert abs(rule.confidence - (1 - 0.05 / rule.tests)) < 1e-12


def test_a_boot_without_a_figure_is_a_missing_cell_not_a_lost_round():
    """With every boot there the fit is the two-way layout's; one boot gone leaves every other
    candidate's interval in place and only widens the one it touches."""
    rule = RaceRule(candidates=3, max_rounds=6)
    figures = _figures({"a": 100.0, "b": 99.0, "c": 98.0}, 5, wobble=0.003)
    best, whole = look(rule, figures, ["a", "b", "c"], 4).best, {s.candidate: s for s in look(rule, figures, ["a", "b", "c"], 4).standings}
    del figures["b"][2]
    made = look(rule, figures, ["a", "b", "c"], 4)
    cut = {s.candidate: s for s in made.standings}
    assert made.best == best == "a" and cut["b"].pairs == 4 and cut["c"].pairs == 5
    width = {name: s.ci_pct[1] - s.ci_pct[0] for name, s in whole.items()}
    assert cut["b"].ci_pct[1] - cut["b"].ci_pct[0] > width["b"] * 0.99 and cut["c"].ci_pct is not None


def test_candidates_no_block_links_to_the_best_get_no_interval():
    """a and b share blocks 0-2; c's boots are each alone in blocks of their own (every other boot of
    those rounds failed, or ran on another GPU): its difference from a is not estimable."""
    figures = {"a": {0: [100.0], 1: [101.0], 2: [99.5]}, "b": {0: [90.0], 1: [91.0], 2: [90.2]},
               "c": {3: [150.0], 4: [151.0], 5: [149.0]}}
    best, standings = intervals(RaceRule(candidates=3, max_rounds=6), figures, ["a", "b", "c"])
    by_name = {s.candidate: s for s in standings}
    assert best == "a" and by_name["b"].ci_pct is not None and by_name["b"].ci_pct[1] < 0
    assert by_name["c"].ci_pct is None and by_name["c"].delta_pct is None and by_name["c"].pairs == 0
