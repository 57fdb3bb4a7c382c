"""The until-decided stopping rule (rig.compare.sequential): its error rates by simulation, and the
comparison loop that adds one boot pair per look and stops at a decision or at its most pairs.

Simulation model (as test_compare_calibration.py's): figure = mu_arm * exp(drift_block + boot +
round), block drift sd 2%, `rig demo`'s rounds per boot, and each round left out for the client's
timing with a fixed probability (a boot with no usable round pairs with nothing). The noise is what
`rig demo` met on a 2-core box with one core busy-looping beside it: boot sd 0-40%, round sd 6-24%,
up to half the rounds left out, the slowdown -52% to -65%. Every look goes through the function the
comparison uses (UntilDecided.judge, compare_boots at the rule's confidence).

Monte-Carlo error: 2000 sequential comparisons put the standard error of a 5% rate at 0.49 points;
the assertions allow 2.5 standard errors and never pass by seed choice.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest

from rig.compare import run as compare_run
from rig.compare.arms import parse_arm
from rig.compare.model import BootEntry, ComparePlan, RunResult
from rig.compare.sequential import DECISION_FILE, Decision, UntilDecided, look_line
from rig.compare.stats import CONFIDENCE, compare_boots
from rig.demo import DEMO_ROUNDS, DEMO_RULE

SIMULATIONS = 2000
MC_SLACK = 2.5 * math.sqrt(0.05 * 0.95 / SIMULATIONS)
DRIFT_SD = 0.02


@dataclass(frozen=True)
class BusyBox:
    boot_sd: float
    round_sd: float
    void_p: float  # the chance that a round is left out for the client's timing
    true_pct: float  # the slowdown the demo read


# as three demos with a core busy-looping read them (boot sd, round sd, rounds left out, the slowdown)
BUSY = [BusyBox(0.15, 0.10, 0.46, -55.0), BusyBox(0.24, 0.08, 0.25, -63.0), BusyBox(0.40, 0.24, 0.05, -65.0)]


def _boot(rng: np.random.Generator, box: BusyBox, log_mu: float, drift: float) -> list[float]:
    values = 100 * np.exp(log_mu + drift + rng.normal(0, box.boot_sd) + rng.normal(0, box.round_sd, DEMO_ROUNDS))
    return [float(v) for v in values if rng.random() >= box.void_p]


def sequential(rule: UntilDecided, box: BusyBox, true_pct: float, rng: np.random.Generator, naive: bool = False):
    """One comparison under the rule: (verdict given, interval at the stop covers the truth, pairs run,
    right sign). `naive`: every look at 95% instead, stopping at the first exclusion (for contrast)."""
    effect = math.log1p(true_pct / 100)
    baseline: dict[int, list[float]] = {}
    arm: dict[int, list[float]] = {}
    for block in range(rule.most):
        drift = rng.normal(0, DRIFT_SD)
        baseline[block], arm[block] = _boot(rng, box, 0.0, drift), _boot(rng, box, effect, drift)
        if block + 1 < rule.first:
            continue
        c = compare_boots(baseline, arm, confidence=CONFIDENCE) if naive else rule.judge(baseline, arm)
        if c.decided or block + 1 == rule.most:
            covered = c.ci is not None and c.ci[0] <= true_pct <= c.ci[1]
            right = c.decided and (c.delta or 0) * true_pct > 0
            return c.decided, covered, block + 1, right
    raise AssertionError("the rule looks at its most pairs")


@pytest.mark.slow
def test_the_rule_keeps_false_verdicts_at_5_percent_where_stopping_at_the_first_95_percent_exclusion_does_not():
    rng = np.random.default_rng(11)
    box = BUSY[0]
    runs = [sequential(DEMO_RULE, box, 0.0, rng) for _ in range(SIMULATIONS)]
    verdicts = sum(r[0] for r in runs) / SIMULATIONS
    covered = sum(r[1] for r in runs) / SIMULATIONS
    naive = [sequential(DEMO_RULE, box, 0.0, rng, naive=True) for _ in range(SIMULATIONS)]
    naive_verdicts = sum(r[0] for r in naive) / SIMULATIONS
    print(f"\nno change, looks after {DEMO_RULE.first}..{DEMO_RULE.most} pairs: {100 * verdicts:.2f}% verdicts under the rule "
          f"({100 * DEMO_RULE.confidence:.4g}% per look), {100 * naive_verdicts:.2f}% stopping at the first 95% exclusion")
    assert verdicts <= DEMO_RULE.alpha + MC_SLACK and covered >= 1 - DEMO_RULE.alpha - MC_SLACK, (verdicts, covered)
    assert naive_verdicts > DEMO_RULE.alpha + 2 * MC_SLACK, naive_verdicts  # why the rule pays for its looks


@pytest.mark.slow
@pytest.mark.parametrize("box", BUSY, ids=lambda b: f"boot{100 * b.boot_sd:.0f}-round{100 * b.round_sd:.0f}-void{100 * b.void_p:.0f}")
def test_the_demos_known_slowdown_is_decided_within_the_rules_pairs_and_covered(box):
    """At the noise the demo met on a busy box, the rule decides within its most pairs with the right
    sign in at least 98% of demos, and the interval at the stop covers the slowdown."""
    rng = np.random.default_rng(12)
    runs = [sequential(DEMO_RULE, box, box.true_pct, rng) for _ in range(SIMULATIONS // 2)]
    decided = sum(r[0] for r in runs) / len(runs)
    right = sum(r[3] for r in runs) / len(runs)
    covered = sum(r[1] for r in runs) / len(runs)
    pairs = np.asarray([r[2] for r in runs])
    print(f"\n{box}: decided {100 * decided:.2f}%, right sign {100 * right:.2f}%, covered {100 * covered:.1f}%, "
          f"pairs at the stop: median {np.median(pairs):.0f}, 90th percentile {np.percentile(pairs, 90):.0f}")
    assert right == decided >= 0.98 and covered >= 0.95 - 2.5 * math.sqrt(0.05 * 0.95 / len(runs)), (decided, right, covered)


def test_each_look_is_bonferroni_over_the_looks_fixed_in_advance():
    rule = UntilDecided(first=3, most=12)
    assert rule.looks == 10 and rule.confidence == pytest.approx(1 - 0.05 / 10)
    assert "each interval at 99.5%" in rule.statement() and "at most 5% false verdicts" in rule.statement()
    with pytest.raises(ValueError):
        UntilDecided(first=2, most=8)  # a look on 1 df at 99% decides nothing
    with pytest.raises(ValueError):
        UntilDecided(first=5, most=4)


def _fake_boots(monkeypatch, figure):
    """run_boot replaced: each boot's one round reads figure(index, arm) (None: its round is left out)."""
    def fake_boot(job, setup):
        index, block, arm, burn_in = job.index, job.block, job.arm, job.burn_in
        value = figure(index, arm.name)
        result = RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": value or 1.0},
                           problems=[] if value is not None else ["client INVALID: the client's timing could move it by 6% > 5%"])
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=1, burn_in=burn_in,
                         rounds=[{"prose-c1": result}])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    monkeypatch.setattr(compare_run, "check_scoring_tokenizer", lambda *a: None)


def _plan(boots: int) -> ComparePlan:
    return ComparePlan(recipe="tiny-cpu", arms=[parse_arm("off:X=0"), parse_arm("on:X=1")], control=None, boots=boots,
                       rounds=1, scenarios=["prose-c1"], small=True)


def test_a_clear_change_stops_at_the_first_look(tmp_path, monkeypatch, capsys):
    _fake_boots(monkeypatch, lambda index, arm: (100.0 if arm == "off" else 50.0) + 0.1 * index)
    rule = UntilDecided(first=3, most=8)
    plan, entries = compare_run.run_compare(_plan(rule.first), tmp_path, progress=True, until=rule)
    decision = Decision.read(tmp_path)
    assert plan.boots == 3 and len(entries) == 6 and decision.decided and not decision.exhausted
    assert [look.pairs_run for look in decision.looks] == [3] and decision.last.comparisons[0].verdict == "slower"
    assert decision.last.comparisons[0].confidence == pytest.approx(rule.confidence)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("compare: look")]
    assert lines == [look_line(rule, decision.last)] and lines[0].endswith("decided: stopping")


def test_a_left_out_pair_costs_a_look_and_the_rule_adds_pairs_until_it_decides(tmp_path, monkeypatch):
    """Block 1's 'on' round is left out (the client): after 3 blocks only 2 pairs remain, whose 1 df
    decides nothing at 99.2%; the rule adds a block at a time and decides with 3 pairs, at its 2nd look."""
    _fake_boots(monkeypatch, lambda index, arm: None if (index, arm) == (2, "on") else (100.0 if arm == "off" else 50.0) + index)
    rule = UntilDecided(first=3, most=8)
    plan, _ = compare_run.run_compare(_plan(rule.first), tmp_path, progress=False, until=rule)
    decision = Decision.read(tmp_path)
    assert [(look.pairs_run, look.comparisons[0].pairs) for look in decision.looks] == [(3, 2), (4, 3)]
    assert decision.decided and plan.boots == 4
    assert json.loads((tmp_path / "plan.json").read_text())["boots"] == 4  # the plan says what ran


def test_no_change_runs_every_pair_the_rule_allows_and_says_undecided(tmp_path, monkeypatch):
    from rig.compare.command import exit_status
    from rig.compare.report import analyze
    from rig.exits import Exit

    _fake_boots(monkeypatch, lambda index, arm: 100.0 + (3.0 if (index // 2) % 2 else -3.0) * (1 if arm == "on" else -1))
    rule = UntilDecided(first=3, most=5)
    plan, entries = compare_run.run_compare(_plan(rule.first), tmp_path, progress=False, until=rule)
    decision = Decision.read(tmp_path)
    assert [look.pairs_run for look in decision.looks] == [3, 4, 5] and decision.exhausted and plan.boots == 5
    assert "undecided after 5 pairs" in look_line(rule, decision.last)
    analysis = analyze(plan, entries)
    assert exit_status(analysis, decision) == Exit.UNDECIDED and exit_status(analysis) == Exit.OK
    assert (tmp_path / DECISION_FILE).exists()


def test_the_report_reads_the_headline_at_the_rules_level_not_at_a_fixed_designs_95_percent(tmp_path, monkeypatch):
    """A stop the data chose covers the change only at the level the rule spent on each look: the
    report's headline interval (compare.md, compare.json, compare.png) is the deciding look's, wider
    than a fixed design's 95% over the same pairs."""
    from rig.compare.markdown import markdown
    from rig.compare.report import analyze

    _fake_boots(monkeypatch, lambda index, arm: (100.0 if arm == "off" else 60.0) * (1 + 0.04 * ((index * 7) % 5 - 2) / 2))
    rule = UntilDecided(first=3, most=8)
    plan = _plan(rule.first).model_copy(update={"stopping_rule": (rule.first, rule.most)})
    plan, entries = compare_run.run_compare(plan, tmp_path, progress=False, until=rule)
    look = Decision.read(tmp_path).last.comparisons[0]
    reported = analyze(plan, entries).scenarios["prose-c1"].vs["on"]
    assert reported.confidence == pytest.approx(rule.confidence) and reported.ci == pytest.approx(look.ci)
    fixed = analyze(plan.model_copy(update={"stopping_rule": None}), entries).scenarios["prose-c1"].vs["on"]
    assert fixed.ci[0] > reported.ci[0] and fixed.ci[1] < reported.ci[1]
    assert f"{100 * rule.confidence:.4g}% for each of the 1 headline" in markdown(analyze(plan, entries))
    assert ComparePlan.read(tmp_path).confidence == rule.confidence


def test_rig_compare_runs_the_rule_with_until_decided_and_exits_7_when_it_stays_open(monkeypatch, results_dir):
    """`rig compare --boots 3 --until-decided 4`: looks after 3 and 4 pairs; with nothing changed the
    rule runs both and exits 7 (the demo's code for the same answer), its looks in until-decided.json."""
    from conftest import free_port

    from rig.cli import main
    from rig.exits import Exit

    _fake_boots(monkeypatch, lambda index, arm: 100.0 + (3.0 if (index // 2) % 2 else -3.0) * (1 if arm == "on" else -1))
    code = main(["compare", "tiny-cpu", "--arm", "off:RIG_TOKEN_DELAY_MS=0", "--arm", "on:RIG_TOKEN_DELAY_MS=0",
                 "--boots", "3", "--until-decided", "4", "--rounds", "1", "--small", "--port", str(free_port())])
    assert code == Exit.UNDECIDED
    (out,) = (path.parent for path in (results_dir / "compare").glob(f"*/{DECISION_FILE}"))
    decision = Decision.read(out)
    assert [look.pairs_run for look in decision.looks] == [3, 4] and decision.exhausted
    assert ComparePlan.read(out).stopping_rule == (3, 4)


@pytest.mark.parametrize("boots,most", [("2", "8"), ("5", "4")])
def test_a_rule_whose_looks_cannot_run_is_refused_before_anything_boots(boots, most, capsys):
    from rig.cli import main

    assert main(["compare", "tiny-cpu", "--arm", "a:RIG_TOKEN_DELAY_MS=0", "--arm", "b:RIG_TOKEN_DELAY_MS=1",
                 "--boots", boots, "--until-decided", most]) == 2
    assert "--until-decided" in capsys.readouterr().err


def test_an_interrupted_rule_resumes_with_its_looks_and_makes_each_look_once(monkeypatch, results_dir):
    """Ctrl-C in pair 4, after look 1 (3 pairs) said to go on: `--resume DIR` carries the saved rule
    on, keeps look 1, makes looks 2 and 3, and exits 7 as an uninterrupted run would."""
    from conftest import free_port

    from rig.cli import main
    from rig.exits import Exit

    cut = {"at": 7}

    def figure(index, arm):
        if index == cut["at"]:
            raise KeyboardInterrupt
        return 100.0 + (3.0 if (index // 2) % 2 else -3.0) * (1 if arm == "on" else -1)

    _fake_boots(monkeypatch, figure)
    command = ["compare", "tiny-cpu", "--arm", "off:RIG_TOKEN_DELAY_MS=0", "--arm", "on:RIG_TOKEN_DELAY_MS=0",
               "--rounds", "1", "--small", "--port", str(free_port())]
    assert main([*command, "--boots", "3", "--until-decided", "5"]) == Exit.INTERRUPTED
    (out,) = (path.parent for path in (results_dir / "compare").glob(f"*/{DECISION_FILE}"))
    assert [look.pairs_run for look in Decision.read(out).looks] == [3]
    cut["at"] = -1
    assert main([*command, "--resume", str(out)]) == Exit.UNDECIDED
    assert [look.pairs_run for look in Decision.read(out).looks] == [3, 4, 5]
    assert main([*command, "--resume", str(out), "--boots", "3", "--until-decided", "6"]) == Exit.BAD_INPUT  # not this plan's rule


@pytest.mark.parametrize("rule,target", [([2, 8], None), ([5, 4], None), ([3, 65], None), ([3, 8], 1.0)])
def test_an_edited_plans_stopping_rule_is_refused_when_read(tmp_path, rule, target):
    from rig.errors import RigError

    plan = json.loads(_plan(3).json_text())
    plan.update(stopping_rule=rule, target_pct=target)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(RigError):
        ComparePlan.read(tmp_path)
