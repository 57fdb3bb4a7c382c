"""`rig demo`'s answer: its verdict line from the comparison's analysis and the stopping rule's looks,
and the exit code that goes with it. Simulated comparisons (tests/simulated_runs.py) go through the
code `rig compare` runs; the demo end to end is `make demo`."""

from __future__ import annotations

import math

import numpy as np
from simulated_runs import Design, simulate_comparison

from rig.compare.command import exit_status
from rig.compare.report import analyze
from rig.compare.sequential import Decision, UntilDecided
from rig.demo import DEMO_RULE, details, verdict_line
from rig.exits import Exit


def _demo(design: Design, rule: UntilDecided, seed: int):
    plan, entries = simulate_comparison(np.random.default_rng(seed), design, slos=None)
    analysis = analyze(plan, entries)
    decision = Decision(rule=rule, looks=[rule.look(plan, entries)])
    return analysis, decision, exit_status(analysis, decision)


def test_a_decided_slowdown_is_the_first_words_of_the_answer():
    analysis, decision, code = _demo(Design(pairs=3, step_change=math.log(2.0)), UntilDecided(first=3, most=10), seed=5)
    line = verdict_line(analysis, decision, code)
    assert code == Exit.OK and line.startswith("verdict: slower: token_delay b vs a: tok/s per user -"), line
    assert "(99.38% interval, 3 usable boot pair(s) of 3 run): the known slowdown, resolved" in line, line


def test_no_change_after_the_most_pairs_says_the_machine_is_too_busy_and_exits_7():
    rule = UntilDecided(first=3, most=3)
    analysis, decision, code = _demo(Design(pairs=3, boot_sd=0.2), rule, seed=6)
    line = verdict_line(analysis, decision, code)
    assert decision.exhausted and code == Exit.UNDECIDED, (decision.last, code)
    assert line.startswith("verdict: undecided after 3 boot pairs, the most the demo runs") and "too busy" in line, line


def test_no_usable_pair_is_no_data_and_a_void_comparison_says_why():
    analysis, decision, _ = _demo(Design(pairs=3, step_change=math.log(2.0)), DEMO_RULE, seed=7)
    assert verdict_line(analysis, decision, Exit.UNUSABLE).startswith("verdict: no data: no boot pair had a usable figure")
    void = analysis.model_copy(update={"void": "the boots ran under different conditions (cpu.model)"})
    assert verdict_line(void, decision, exit_status(void, decision)) == "verdict: void: the boots ran under different conditions (cpu.model)"


def test_the_lines_between_the_two_verdicts_say_how_the_rule_stopped():
    analysis, decision, _ = _demo(Design(pairs=3, step_change=math.log(2.0)), DEMO_RULE, seed=8)
    lines = details(analysis, decision, 190.0)
    assert lines[0] == "took 3.2 min; 1 look(s) of the stopping rule, the last after 3 pair(s)", lines
