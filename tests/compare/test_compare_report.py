"""What a comparison report prints is what its statistics computed: paired means, asymmetric
intervals, the precision `--target` plans for and is judged against, percentile counts and
refusals, goodput as a paired difference with its zeros, exclusions, the secondary family's
confidence, and the plot's noise band."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from simulated_runs import SCENARIO, Design, simulate_comparison

from rig.boot.record import CacheState
from rig.compare.arms import Arm
from rig.compare.effects import KnownEffect
from rig.compare.markdown import comparison_line, known_effect_line, markdown
from rig.compare.model import BootEntry, ComparePlan, RunResult
from rig.compare.output import write_report
from rig.compare.percentiles import LatencyHistogram
from rig.compare.plot import as_percent
from rig.compare.report import analyze
from rig.compare.stats import (
    CONFIDENCE,
    compare_boots,
    family_confidence,
    pairs_needed,
    pct,
    precision_pct,
    stein_pairs,
    t_quantile,
    target_met,
)
from rig.load.figures import LATENCY
from rig.load.goodput import Goodput

HEADLINE = "user_decode_tok_s"
NUMBER = r"([+-]?\d+(?:\.\d+)?)"


def plan_for(boots: int, slos: dict[str, float] | None = None) -> ComparePlan:
    return ComparePlan(recipe="tiny-cpu", arms=[Arm(name="a"), Arm(name="b")], control=None, boots=boots, rounds=3,
                       scenarios=[SCENARIO], small=True, slos=slos)


def entry(index: int, block: int, arm: str, headline: list[float], goodput: list[float] | None = None,
          voided: bool = False) -> BootEntry:
    rounds = [{SCENARIO: RunResult(scenario=SCENARIO, dir="/nonexistent", figures={HEADLINE: value}, problems=[],
                                   goodput=Goodput(slos_s={}, requests_per_s=goodput[i], met=0, completed=0, share=None) if goodput else None,
                                   latency={"ttft": LatencyHistogram.of([100.0 + i, 120.0, 140.0] * 3)})}
              for i, value in enumerate(headline)]
    return BootEntry(index=index, block=block, arm=arm, spec="", control=False, attempt=1, voided=voided,
                     problems=["boot check failed"] if voided else [], rounds=[] if voided else rounds)


def printed(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if label in line)


def test_means_are_of_the_paired_boots_and_their_ratio_is_the_delta():
    """b's block-1 boot was voided: a's block-1 boot (an outlier at 200) must not enter the means."""
    entries = [entry(0, 0, "a", [100.0, 101.0, 99.0]), entry(1, 0, "b", [102.0, 103.0, 101.0]),
               entry(2, 1, "b", [0.0], voided=True), entry(3, 1, "a", [200.0, 200.0, 200.0]),
               entry(4, 2, "a", [98.0, 99.0, 100.0]), entry(5, 2, "b", [99.0, 100.0, 101.0])]
    analysis = analyze(plan_for(3), entries)
    c = analysis.scenarios[SCENARIO].vs["b"]
    assert c.pairs == 2
    assert c.baseline_mean == pytest.approx(math.sqrt(100.0 * 99.0)) and c.arm_mean == pytest.approx(math.sqrt(102.0 * 100.0))
    assert c.delta == pytest.approx(100 * (c.arm_mean / c.baseline_mean - 1))
    line = printed(markdown(analysis), "a -> b")
    base, arm, delta, low, high = map(float, re.search(
        rf"{NUMBER} -> +{NUMBER} .*? {NUMBER}% \[{NUMBER}%, {NUMBER}%\]", line).groups())
    assert (base, arm) == (round(c.baseline_mean, 2), round(c.arm_mean, 2))
    assert (delta, low, high) == (round(c.delta, 2), round(c.ci[0], 2), round(c.ci[1], 2))
    assert "200" not in line and "95% interval" in line


def test_a_wide_interval_is_printed_asymmetric_as_it_is():
    baseline = {0: [100.0], 1: [100.0], 2: [100.0]}
    arm = {0: [60.0], 1: [95.0], 2: [75.0]}
    c = compare_boots(baseline, arm, unit="tok/s")
    diffs = np.log([0.6, 0.95, 0.75])
    half = t_quantile(2) * diffs.std(ddof=1) / math.sqrt(3)
    assert c.ci == pytest.approx((pct(diffs.mean() - half), pct(diffs.mean() + half)))
    assert c.ci[1] - c.delta > 1.2 * (c.delta - c.ci[0])  # the ratio scale is asymmetric in percent
    line = comparison_line(SCENARIO, "a -> b", c)
    assert f"[{c.ci[0]:+.2f}%, {c.ci[1]:+.2f}%]" in line and "+-" not in line
    assert c.precision_pct == pytest.approx(100 * math.expm1(half))


@pytest.mark.parametrize("sd", [0.004, 0.01, 0.03, 0.08])
@pytest.mark.parametrize("target", [0.5, 1.0, 2.0, 5.0])
def test_target_plans_for_and_is_judged_against_the_same_precision(sd, target):
    """pairs_needed and Stein's stein_pairs give the fewest pairs whose interval's precision_pct
    (the quantity target_met compares) is at most the target."""
    def precision(n: int, df: int) -> float:
        return precision_pct(t_quantile(df) * sd / math.sqrt(n))

    n = pairs_needed(sd, target)
    assert n is not None and target_met(precision(n, n - 1), target)
    assert n == 2 or not target_met(precision(n - 1, n - 2), target)
    stein = stein_pairs(sd, 4, target)
    assert target_met(precision(stein, 3), target) and (stein == 4 or not target_met(precision(stein - 1, 3), target))


def test_stein_comparison_meets_the_target_at_the_pairs_it_planned():
    rng = np.random.default_rng(4)
    baseline = {b: [100 * math.exp(rng.normal(0, 0.01))] for b in range(4)}
    arm = {b: [100 * math.exp(rng.normal(0, 0.01))] for b in range(4)}
    first = compare_boots(baseline, arm, target_pct=1.0, first_stage=4)
    for block in range(4, first.pairs_for_target):
        baseline[block], arm[block] = [100 * math.exp(rng.normal(0, 0.01))], [100 * math.exp(rng.normal(0, 0.01))]
    final = compare_boots(baseline, arm, target_pct=1.0, first_stage=4)
    assert final.pairs == max(4, first.pairs_for_target) and target_met(final.precision_pct, 1.0)
    assert final.precision_pct == pytest.approx(precision_pct(t_quantile(3) * first.pair_sd / 100 / math.sqrt(final.pairs)))


@pytest.fixture(scope="module")
def simulated():
    plan, entries = simulate_comparison(np.random.default_rng(23), Design())
    return plan, entries, analyze(plan, entries)


def test_percentiles_pool_each_boots_rounds_and_print_their_counts(simulated):
    plan, entries, analysis = simulated
    text = markdown(analysis)
    result = analysis.scenarios[SCENARIO]
    for figure in LATENCY:
        c = result.latency[figure.name]["b"]
        for e in entries:
            pooled = LatencyHistogram.merged(r.latency[figure.samples] for r in e.usable_results(SCENARIO))
            assert c.support.counts[e.arm][e.block] == pooled.count
        low, high = c.support.count_range()
        line = printed(text, f"{figure.name} b")
        if high < c.support.needed:
            assert f"refused, not part of the family: a {c.support.percentile} needs >= {c.support.needed} samples per boot, " \
                   f"these boots had {low}-{high}" in line
        else:
            assert f"{c.support.percentile} of {low}-{high} samples per boot" in line
            # each pair's delta is the ratio of the two boots' pooled percentiles
            boots = {(e.arm, e.block): LatencyHistogram.merged(r.latency[figure.samples] for r in e.usable_results(SCENARIO))
                     for e in entries}
            expected = [pct(math.log(boots["b", k].quantile(figure.quantile) / boots["a", k].quantile(figure.quantile)))
                        for k in range(plan.boots)]
            assert c.pair_deltas == pytest.approx(expected) and c.pairs == plan.boots
    ttft_p99 = result.latency["ttft_p99_ms"]["b"]
    assert ttft_p99.support.count_range()[1] < 299 and ttft_p99.pairs == 0 and not ttft_p99.decided
    assert "p50: 6, p99: 299" in text


def test_a_boot_short_of_samples_is_refused_and_named_while_the_rest_compare():
    def boot(index: int, block: int, arm: str, requests: int) -> BootEntry:
        ttft = LatencyHistogram.of(np.linspace(100.0, 200.0, requests) * (1.1 if arm == "b" else 1.0))
        rounds = [{SCENARIO: RunResult(scenario=SCENARIO, dir="/nonexistent", figures={HEADLINE: 100.0}, problems=[], latency={"ttft": ttft})}]
        return BootEntry(index=index, block=block, arm=arm, spec="", control=False, attempt=1, rounds=rounds)

    entries = [boot(0, 0, "a", 310), boot(1, 0, "b", 300), boot(2, 1, "b", 298), boot(3, 1, "a", 305),
               boot(4, 2, "a", 320), boot(5, 2, "b", 330), boot(6, 3, "b", 10), boot(7, 3, "a", 5)]
    entries[6].voided = True  # its partner's 5 requests stand behind nothing printed
    analysis = analyze(plan_for(4), entries)
    c = analysis.scenarios[SCENARIO].latency["ttft_p99_ms"]["b"]
    assert c.pairs == 2 and c.support.refused() == [("b", 1, 298)] and c.support.count_range() == (298, 330)
    line = printed(markdown(analysis), "ttft_p99_ms b")
    assert "p99 of 298-330 samples per boot; 1 boot(s) refused, fewer than 299: b block 1 (298)" in line


def test_secondary_figures_share_one_bonferroni_family_and_say_so(simulated):
    _, _, analysis = simulated
    result = analysis.scenarios[SCENARIO]
    secondary = [c for per_arm in result.latency.values() for c in per_arm.values()] + list(result.goodput.values())
    with_interval = [c for c in secondary if c.ci is not None]
    assert analysis.family.size == len(with_interval) == 5  # ttft p99 refused
    assert all(c.confidence == family_confidence(5) == 0.99 for c in secondary)
    assert result.vs["b"].confidence == CONFIDENCE
    text = markdown(analysis)
    assert "5 interval(s), each at 99%" in text and "99% interval" in printed(text, "itl_p50_ms b")


def test_goodput_is_a_paired_difference_that_keeps_zero_rounds():
    entries = [entry(0, 0, "a", [100.0] * 3, goodput=[0.0, 0.2, 0.1]), entry(1, 0, "b", [100.0] * 3, goodput=[0.3, 0.3, 0.3]),
               entry(2, 1, "b", [100.0] * 3, goodput=[0.0, 0.0, 0.0]), entry(3, 1, "a", [100.0] * 3, goodput=[0.1, 0.1, 0.1]),
               entry(4, 2, "a", [100.0] * 3, goodput=[0.2, 0.2, 0.2]), entry(5, 2, "b", [100.0] * 3, goodput=[0.2, 0.3, 0.1])]
    analysis = analyze(plan_for(3, slos={"ttft": 1.0}), entries)
    c = analysis.scenarios[SCENARIO].goodput["b"]
    base, arm = np.array([0.1, 0.1, 0.2]), np.array([0.3, 0.0, 0.2])
    half = t_quantile(2, c.confidence) * (arm - base).std(ddof=1) / math.sqrt(3)
    assert c.pairs == 3 and not c.excluded and c.unit == "req/s"
    assert (c.baseline_mean, c.arm_mean, c.delta) == pytest.approx((base.mean(), arm.mean(), (arm - base).mean()))
    assert c.ci == pytest.approx(((arm - base).mean() - half, (arm - base).mean() + half))
    line = printed(markdown(analysis), "goodput b")
    assert f"{c.baseline_mean:.4f} ->     {c.arm_mean:.4f} req/s" in line and f"[{c.ci[0]:+.4f}, {c.ci[1]:+.4f}]" in line


def test_a_value_with_no_log_ratio_is_listed_not_dropped():
    c = compare_boots({0: [0.0, 5.0], 1: [4.0], 2: [4.4]}, {0: [5.0], 1: [4.2], 2: [4.1]}, unit="ms", names=("a", "b"))
    assert c.pairs == 3 and c.excluded == ["a block 0: 1 value(s) <= 0 have no log ratio"]
    assert "left out: a block 0: 1 value(s) <= 0 have no log ratio" in comparison_line(SCENARIO, "x", c)


def test_the_plot_band_is_the_noise_of_each_delta(simulated, tmp_path):
    _, _, analysis = simulated
    result = analysis.scenarios[SCENARIO]
    for c in [result.vs["b"], result.latency["tpot_p50_ms"]["b"]]:
        delta, _, (low, high) = as_percent(c)
        half = math.log1p(c.precision_pct / 100)
        assert (low, high) == pytest.approx((pct(-half), pct(half)))
        assert (delta < low or delta > high) == c.decided
    goodput = result.goodput["b"]
    delta, _, (low, high) = as_percent(goodput)
    assert high == pytest.approx(-low) == pytest.approx(50 * (goodput.ci[1] - goodput.ci[0]) / goodput.baseline_mean)
    write_report(tmp_path, analysis)
    saved = json.loads((tmp_path / "compare.json").read_text())
    assert saved["family"]["size"] == 5 and (tmp_path / "compare.png").stat().st_size > 0
    assert b"tEXtSoftware" not in (tmp_path / "compare.png").read_bytes()
    assert saved["scenarios"][SCENARIO]["latency"]["ttft_p99_ms"]["b"]["support"]["needed"] == 299


def test_a_per_user_rate_is_also_printed_as_time_per_token_in_ms():
    """A 20 ms per-token delay on a 10 ms step: the headline's boots as ms per token give a paired
    difference whose interval is computed on the pairs' ms differences and covers the 20 ms."""
    step_ms = {0: 10.0, 1: 10.6, 2: 9.7}
    entries = []
    for block, step in step_ms.items():
        entries += [entry(2 * block, block, "a", [1000 / step, 1000 / (step * 1.01), 1000 / (step * 0.99)]),
                    entry(2 * block + 1, block, "b", [1000 / (step + 20.0 + 0.1 * block)] * 3)]
    analysis = analyze(plan_for(3), entries)
    c = analysis.scenarios[SCENARIO].per_token["b"]
    base = np.array([np.mean([step, step * 1.01, step * 0.99]) for step in step_ms.values()])
    arm = np.array([step + 20.0 + 0.1 * block for block, step in step_ms.items()])
    half = t_quantile(2) * (arm - base).std(ddof=1) / math.sqrt(3)
    assert c.unit == "ms per token" and c.pairs == 3 and c.delta == pytest.approx((arm - base).mean())
    assert c.ci == pytest.approx(((arm - base).mean() - half, (arm - base).mean() + half))
    assert c.ci[0] < 20.0 < c.ci[1]
    line = printed(markdown(analysis), "per token b")
    assert f"{c.delta:+.2f} ms [{c.ci[0]:+.2f} ms, {c.ci[1]:+.2f} ms]" in line and "no separate verdict" in line
    assert analysis.scenarios[SCENARIO].vs["b"].verdict == "slower"  # the one verdict, the headline's
    assert not c.decided and "no verdict of its own" in c.verdict  # compare.json holds none for it either


def test_a_per_token_change_under_a_millisecond_is_printed_in_microseconds():
    """gpu_delay's +1% on an H200 is ~52 us per token: printed as +0.05 ms it would read as nothing."""
    entries = []
    for block in range(3):
        entries += [entry(2 * block, block, "a", [227.30 + 0.02 * block] * 2), entry(2 * block + 1, block, "b", [224.65] * 2)]
    analysis = analyze(plan_for(3), entries)
    c = analysis.scenarios[SCENARIO].per_token["b"]
    line = printed(markdown(analysis), "per token b")
    assert f"{1000 * c.delta:+.1f} us [{1000 * c.ci[0]:+.1f} us, {1000 * c.ci[1]:+.1f} us]" in line


def test_each_boots_compile_caches_are_printed_beside_its_boot_time():
    entries = [entry(0, 0, "a", [100.0] * 3), entry(1, 0, "b", [100.0] * 3)]
    entries[0].healthy_after_s = 127.7
    entries[0].compile_cache = CacheState(state="cold", grew={"TRITON_CACHE_DIR": 1, "VLLM_CACHE_ROOT": 1})
    entries[1].healthy_after_s = 89.7
    entries[1].compile_cache = CacheState(state="warm", grew={"TRITON_CACHE_DIR": 262})
    line = printed(markdown(analyze(plan_for(1), entries)), "Boot to healthy")
    assert "00-a 127.7s (cold; filled: TRITON_CACHE_DIR +1, VLLM_CACHE_ROOT +1)" in line
    assert "01-b 89.7s (warm; filled: TRITON_CACHE_DIR +262)" in line


def test_a_known_effect_is_held_against_the_per_token_interval():
    """gpu_delay's own in-place measurement (added_us, us per step) beside the per-token interval: the
    report says whether the interval covers it; a baseline arm with the adapter too is subtracted."""
    entries = []
    for block in range(3):
        for index, arm, rate, added in ((2 * block, "a", 227.30 + 0.01 * block, None), (2 * block + 1, "b", 224.65, 51.8)):
            e = entry(index, block, arm, [rate] * 2)
            if added is not None:
                e.adapter_stats = {"gpu_delay": {"added_us": {"count": 1, "mean": added, "sum": added}}}
            entries.append(e)
    analysis = analyze(plan_for(3), entries)
    (effect,) = analysis.known_effects
    assert (effect.adapter, effect.arm, effect.boots) == ("gpu_delay", "b", 3)
    assert effect.per_token_ms == pytest.approx(0.0518) and effect.covered and effect.effect_interval_ms is None  # no spread
    assert "gpu_delay measured +51.8 us per token (added_us, 3 boot(s)); the per-token interval" in markdown(analysis)
    spread = [e.model_copy(update={"adapter_stats": {"gpu_delay": {"added_us": {"count": 1, "mean": v, "sum": v}}}})
              if e.arm == "b" else e for e, v in zip(entries, [0, 49.0, 0, 52.0, 0, 50.5])]
    moved = analyze(plan_for(3), spread).known_effects[0]
    low, high = moved.effect_interval_ms
    assert low < 0.0505 < high and moved.covered
    far = [e.model_copy(update={"adapter_stats": {"gpu_delay": {"added_us": {"count": 1, "mean": 44.0, "sum": 44.0}}}})
           if e.arm == "b" else e for e in entries]
    assert analyze(plan_for(3), far).known_effects[0].covered is False
    assert "does NOT agree with it" in markdown(analyze(plan_for(3), far))


def test_a_host_sleeps_known_effect_is_the_sleep_from_the_servers_response_below_to_a_late_wake_up_above():
    """A host sleep's effect on the time per token is the sleep, less what the server streams during
    it (RESPONSE_OF_THE_SERVER below), plus what a loaded CPU adds by waking the server late
    (WAKE_UP_ON_A_LOADED_CPU above); a per-token interval that misses that is still named."""
    from rig.compare.effects import RESPONSE_OF_THE_SERVER, WAKE_UP_ON_A_LOADED_CPU

    def effect_of(injected: float, arm_step_ms: list[float]) -> KnownEffect:
        entries = []
        for block, arm_step in enumerate(arm_step_ms):
            base = 1.58 + 0.01 * block
            entries.append(entry(2 * block, block, "a", [1000 / base] * 2))
            b = entry(2 * block + 1, block, "b", [1000 / (base + arm_step)] * 2)
            b.adapter_stats = {"token_delay": {"injected_ms": {"count": 1, "mean": injected, "sum": injected}}}
            entries.append(b)
        analysis = analyze(plan_for(3), entries)
        (found,) = analysis.known_effects
        assert found.tolerance == RESPONSE_OF_THE_SERVER and found.tolerance_above == WAKE_UP_ON_A_LOADED_CPU
        assert not found.at_least
        return found

    from rig.compare.effects import EFFECT_KINDS
    from rig_adapters.registry import REGISTRY

    assert all(spec.effect[2] in EFFECT_KINDS for spec in REGISTRY if spec.effect)  # a misspelled kind would read as exact
    assert effect_of(4.12, [3.86, 3.88, 3.90]).covered  # 6% short of the sleep
    assert effect_of(20.3, [21.2, 21.5, 21.3]).covered  # 5% beyond it
    assert effect_of(3.11, [3.9, 3.94, 4.0]).covered  # 27% beyond it: a late wake-up on a loaded CPU
    assert effect_of(3.11, [5.0, 5.1, 5.2]).covered is False  # 64% beyond it: not the sleep
    assert effect_of(4.12, [2.9, 3.0, 3.1]).covered is False  # 27% short: the server hid most of it
    line = known_effect_line(effect_of(4.12, [3.86, 3.88, 3.90]))
    assert "token_delay measured +4.12 ms per token (injected_ms, 3 boot(s))" in line
    assert line.endswith("agrees with it from 10% below to 50% above (the server's response to a longer step; "
                         "a loaded CPU wakes it late)"), line


def test_rounds_that_began_while_an_adapter_measured_itself_are_left_out():
    from rig.compare.measure import leave_out_rounds_measured_during

    e = entry(0, 0, "b", [224.6, 224.7])
    e.rounds[0][SCENARIO].window, e.rounds[1][SCENARIO].window = (100.0, 110.0), (130.0, 140.0)
    e.adapter_stats = {"gpu_delay": {"measured_until": {"count": 1, "mean": 105.0, "sum": 105.0}}}
    leave_out_rounds_measured_during(e)
    assert not e.rounds[0][SCENARIO].usable and e.rounds[1][SCENARIO].usable
    assert "gpu_delay was still measuring its effect" in e.rounds[0][SCENARIO].problems[0]


def test_stein_with_fewer_than_two_usable_first_stage_pairs_gives_no_interval():
    """Voided boots left one of Stein's four first-stage pairs: its sd is undefined, and the sd of
    every pair is not Stein's procedure; no interval, no verdict, and planning asks for the cap."""
    baseline = {0: [100.0], 4: [100.0], 5: [100.5], 6: [99.8]}
    arm = {0: [103.0], 1: [103.0], 4: [103.1], 5: [103.2], 6: [102.9]}
    c = compare_boots(baseline, arm, target_pct=1.0, first_stage=4)
    assert c.pairs == 4 and c.ci is None and not c.decided and c.pairs_for_target is None
    assert "only 1 of Stein's 4 first-stage pair(s) are usable" in c.verdict


def test_headline_comparisons_judge_a_lower_is_better_headline_as_such():
    """An open-loop headline (median E2E, lower is better) that rose is "higher (worse)" in the
    planning comparisons too, not "faster"."""
    from rig.compare.report import headline_comparisons

    plan = ComparePlan(recipe="tiny-cpu", arms=[Arm(name="a"), Arm(name="b")], control=None, boots=3, rounds=1,
                       scenarios=["open-loop"], small=True)
    entries = []
    for block in range(3):
        for index, arm, value in ((2 * block, "a", 100.0 + block), (2 * block + 1, "b", 120.0 + block)):
            entries.append(BootEntry(index=index, block=block, arm=arm, spec="", control=False, attempt=1, rounds=[
                {"open-loop": RunResult(scenario="open-loop", dir="", figures={"e2e_p50_ms": value}, problems=[])}]))
    (c,) = headline_comparisons(plan, entries)
    assert not c.higher_is_better and c.verdict == "higher (worse)"


def _with_gpu(e: BootEntry, events: list[str], sm: float = 1980.0) -> BootEntry:
    from rig.observe.gpu import GpuTelemetry, Spread

    telemetry = GpuTelemetry(samples=40, sm_mhz=Spread(mean=sm, min=sm, max=sm), mem_mhz=None, power_w=Spread(mean=498.0, min=490.0, max=505.0),
                             power_limit_w=700.0, temp_c=Spread(mean=50.0, min=49.0, max=51.0), util_gpu_pct=None,
                             util_mem_pct=None, energy_j=None, energy_source=None, clock_events=events, serving=True)
    for round_results in e.rounds:
        for result in round_results.values():
            result.gpu = {"0": telemetry}
    return e


def test_a_clock_event_reason_voids_only_when_one_arm_alone_saw_it():
    def boots(events_for):
        return [_with_gpu(entry(2 * b + i, b, arm, [100.0, 100.1]), events_for(arm, b)) for b in range(3)
                for i, arm in enumerate(("a", "b"))]

    one_arm = analyze(plan_for(3), boots(lambda arm, b: ["sw_power_cap"] if arm == "b" and b == 1 else []))
    assert one_arm.gpu.by_arm_events == ["sw_power_cap"] and "gpu.clock_events" in (one_arm.void or "")
    both = analyze(plan_for(3), boots(lambda arm, b: ["sw_power_cap"] if b == 1 else []))
    assert both.gpu.differing_events == ["sw_power_cap"] and not both.gpu.voiding and both.void is None
    assert "seen in every arm's boots: reported only" in markdown(both)
    accepted = plan_for(3).model_copy(update={"accept_fingerprint": ["gpu.*"]})
    assert analyze(accepted, boots(lambda arm, b: ["sw_power_cap"] if arm == "b" else [])).void is None


def test_an_adapter_measurement_that_never_ended_leaves_every_round_out():
    from rig.compare.measure import leave_out_rounds_measured_during

    e = entry(0, 0, "b", [224.6, 224.7])
    e.adapter_stats = {"gpu_delay": {"measuring_from": {"count": 1, "mean": 50.0, "sum": 50.0}}}
    leave_out_rounds_measured_during(e)
    assert not any(r[SCENARIO].usable for r in e.rounds) and "when the boot ended" in e.rounds[0][SCENARIO].problems[0]


def test_adapter_statistics_of_several_engine_processes_merge():
    """Two TP ranks' manifests: counts and sums add up, the measurement ended when the last rank's did."""
    from rig.compare.measure import merged_adapter_stats

    ranks = [{"adapters": {"gpu_delay": {"stats": {"added_us": {"count": 1, "sum": 50.0, "mean": 50.0},
                                                   "measured_until": {"count": 1, "sum": t, "mean": t}}}}} for t in (100.0, 103.0)]
    ranks[1]["adapters"]["gpu_delay"]["stats"]["added_us"] = {"count": 1, "sum": 54.0, "mean": 54.0}
    merged = merged_adapter_stats(ranks)["gpu_delay"]
    assert merged["added_us"] == {"count": 2, "sum": 104.0, "mean": 52.0} and merged["measured_until"]["mean"] == 103.0


def test_target_stops_when_voided_boots_left_steins_first_stage_without_an_sd():
    from rig.compare.report import planned_pairs

    plan = plan_for(4).model_copy(update={"target_pct": 0.5, "max_boots": 8, "first_stage": 4})
    entries = [entry(0, 0, "a", [100.0]), entry(1, 0, "b", [103.0])] + [entry(i, 1 + i // 2, arm, [0.0], voided=True)
                                                                        for i, arm in zip(range(2, 8), "abbaab")]
    entries += [entry(8, 4, "a", [100.5]), entry(9, 4, "b", [103.1])]
    assert planned_pairs(plan, entries) == plan.boots


def test_the_analysis_reads_no_file_when_given_its_inputs(monkeypatch):
    """read_inputs() is the one reader; analyze() with its inputs opens nothing (every open fails here)."""
    import builtins
    import io

    from rig.compare.report import AnalysisInputs

    entries = []
    for block in range(3):
        entries += [entry(2 * block, block, "a", [100.0 + block, 100.2]), entry(2 * block + 1, block, "b", [103.0, 103.1])]
    inputs = AnalysisInputs(kinds={SCENARIO: "decode"}, greedy={SCENARIO: True}, encode=None, log_lines={}, outputs={})

    def refuse(*args, **kwargs):
        raise AssertionError(f"the analysis opened {args[0] if args else kwargs}")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(io, "open", refuse)
    monkeypatch.setattr("pathlib.Path.read_text", refuse)
    monkeypatch.setattr("pathlib.Path.read_bytes", refuse)
    monkeypatch.setattr("os.open", refuse)
    analysis = analyze(plan_for(3), entries, inputs)
    assert analysis.scenarios[SCENARIO].vs["b"].verdict == "faster"


def test_an_interval_that_bounds_nothing_is_printed_as_the_pairs_it_needs():
    """The demo's old report: 2 pairs (1 df) of a 3x effect with noisy boots printed
    +199.92% [-84.60%, +5739.84%]; a bound that says nothing now says so and the pairs it would need,
    beside its bounds as a factor (the verdict reads them: "spans 0" must be seen to). A large but
    well-bounded change reads as a factor, never four digits."""
    noisy = [entry(0, 0, "a", [290.0]), entry(1, 0, "b", [871.0]), entry(2, 1, "b", [600.0]), entry(3, 1, "a", [420.0])]
    analysis = analyze(plan_for(2), noisy)
    c = analysis.scenarios[SCENARIO].vs["b"]
    assert c.ci is not None and (c.ci[1] > 1000 or c.ci[0] < -80)
    line = printed(markdown(analysis), "a -> b")
    assert "bounds nothing yet: needs >= " in line and not re.search(r"\d{4,}(\.\d+)?%", line), line
    assert re.search(r"\[-9\d\.\d\d%, x\d+\.\d\] \(bounds nothing yet.*the interval spans 0", line), line
    tight = [entry(0, 0, "a", [10.0]), entry(1, 0, "b", [160.0]), entry(2, 1, "b", [162.0]), entry(3, 1, "a", [10.1]),
             entry(4, 2, "a", [9.9]), entry(5, 2, "b", [158.0])]
    analysis = analyze(plan_for(3), tight)
    line = printed(markdown(analysis), "a -> b")
    assert re.search(r"x16\.\d \[x1\d\.\d, x1\d\.\d\]", line) and not re.search(r"\d{4,}(\.\d+)?%", line), line


def test_a_round_whose_records_are_damaged_is_left_out_of_the_output_identity_and_named(tmp_path):
    """A line cut in the middle of a finished round's records (a disk that filled, a hand edit) does
    not stop the report: that round is left out of the identity under batching, which says so, and
    every figure (summarised when the round ran) is still compared."""
    from simulated_runs import simulate_round

    from rig.compare.report import read_inputs

    plan, entries = simulate_comparison(np.random.default_rng(5), Design())
    whole = simulate_round(np.random.default_rng(6), 0.02, 0.1, 2.0)[0].to_line()
    (tmp_path / "records-0.jsonl").write_text(whole[:40] + "\n" + whole + "\n")
    first = entries[0].rounds[0][SCENARIO]
    entries[0].rounds[0][SCENARIO] = first.model_copy(update={"dir": str(tmp_path)})
    inputs = read_inputs(plan, entries)
    damaged = [line for line in inputs.unreadable_outputs if "is gone" not in line]  # the simulated rounds have no directory
    assert len(damaged) == 1 and "00-a round 1 prose-c1" in damaged[0], inputs.unreadable_outputs
    analysis = analyze(plan, entries, inputs)
    assert analysis.batching.unreadable == inputs.unreadable_outputs
    assert analysis.scenarios[SCENARIO].vs["b"].ci is not None
    assert "Identity under batching: left out boot 00-a round 1 prose-c1" in markdown(analysis)


def test_a_comparison_with_no_usable_pair_says_no_data_in_its_header_and_exits_4():
    """Every boot of one arm voided (or every round left out): the boots ran, nothing was measured,
    and a script must be able to tell that from a verdict."""
    from rig.exits import Exit

    plan, entries = simulate_comparison(np.random.default_rng(9), Design())
    for entry in entries:
        if entry.arm == "b":
            entry.voided, entry.problems = True, ["planted"]
    analysis = analyze(plan, entries)
    assert analysis.no_data and analysis.scenarios[SCENARIO].vs["b"].verdict.startswith("no data")
    assert "**NO DATA:" in markdown(analysis) and "exit code 4" in markdown(analysis) and Exit.UNUSABLE == 4
    plan, entries = simulate_comparison(np.random.default_rng(9), Design())
    assert not analyze(plan, entries).no_data


def test_the_client_is_named_for_a_left_out_percentile_only_where_the_headline_has_the_pairs():
    """ttft_p99 left out of every round of a and b for the client's timing: a -> b names the client
    and the rounds of a and b. Arm c lost every boot: a -> c has no pair for the headline either, and
    its ttft_p99 line must not blame the client for a's rounds."""
    def left_out(index: int, block: int, arm: str, voided: bool = False) -> BootEntry:
        made = entry(index, block, arm, [100.0 + block, 101.0, 99.0], voided=voided)
        for round_results in made.rounds:
            result = round_results[SCENARIO]
            result.problems_by_figure = {"ttft_p99_ms": ["client INVALID for ttft_p99_ms: lag"]}
            result.client_bounds = {"ttft_p99_ms": 0.031}
        return made

    plan = ComparePlan(recipe="tiny-cpu", arms=[Arm(name="a"), Arm(name="b"), Arm(name="c")], control=None, boots=3,
                       rounds=3, scenarios=[SCENARIO], small=True)
    entries = [left_out(3 * block + i, block, arm, voided=arm == "c") for block in range(3) for i, arm in enumerate("abc")]
    analysis = analyze(plan, entries)
    latency = analysis.scenarios[SCENARIO].latency["ttft_p99_ms"]
    assert analysis.scenarios[SCENARIO].vs["b"].pairs == 3 and analysis.scenarios[SCENARIO].vs["c"].pairs == 0
    assert "the client's timing could move it by up to 3.1% in 18 round(s) of a and b left out" in latency["b"].verdict
    assert latency["c"].verdict == "no data: no boot pair with a usable figure in both arms", latency["c"].verdict


def test_the_time_left_is_the_median_boot_times_the_boots_not_run():
    """The progress line's estimate: robust to the one boot that compiled (and was booted again), and
    silent before any boot has a duration or after the last."""
    from rig.compare.run import time_left

    assert time_left([], 8) == "" and time_left([150.0], 0) == ""
    # 400 s for the compiled boot and its second boot, then 150-160 s boots: the median, not the mean.
    assert time_left([400.0, 150.0, 160.0], 6) == "; about 16 min left (6 boot(s) at the median 160 s so far)"
    assert time_left([150.0, 160.0], 1) == "; about 3 min left (1 boot(s) at the median 155 s so far)"
    assert time_left([20.0], 1) == "; about 1 min left (1 boot(s) at the median 20 s so far)"
    # A burn-in timed apart adds only what it could cost the arms not booted yet.
    assert time_left([100.0], 3, (300.0,), 1) == ("; about 5 min left (3 boot(s) at the median 100 s so far;"
                                                 " up to 5 min more if the 1 arm(s) not booted yet compile)")
    assert time_left([100.0, 110.0], 2, (300.0,), 0) == "; about 4 min left (2 boot(s) at the median 105 s so far)"
    # A stopping rule's pairs still to come are said apart: it adds them only while undecided.
    assert time_left([60.0], 2, rule_may_add=10) == ("; about 2 min left (2 boot(s) at the median 60 s so far;"
                                                    " up to 10 min more if the stopping rule adds its 10 boot(s))")


def test_a_compiled_boot_kept_as_a_burn_in_is_timed_apart_from_the_boot_after_it(monkeypatch, tmp_path, capsys):
    """Counted as one boot with the boot after it, a compiled burn-in (~300 s on an H200) would make the
    time left read nearly twice what it is. The burn-in is timed apart; it comes
    back only for an arm that has not booted yet (its configuration may compile too). A fake clock:
    no wall time is read."""
    import types

    from rig.compare import run as compare_run
    from rig.compare.arms import parse_arm
    from rig.compare.model import ComparePlan

    clock = [0.0]
    calls = []

    def fake_boot(job, setup):
        index, block, arm = job.index, job.block, job.arm
        calls.append(arm.name)
        compiled = len(calls) == 1  # the comparison's first boot compiles: kept as a burn-in, booted again
        if compiled:
            assert job.redo_if_compiled, "the first boot must be one that is booted again if it compiled"
        clock[0] += 300.0 if compiled else 100.0
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=1, burn_in=compiled,
                         rounds=[])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    monkeypatch.setattr(compare_run, "check_scoring_tokenizer", lambda *a: None)
    import time as real_time
    monkeypatch.setattr(compare_run, "time", types.SimpleNamespace(monotonic=lambda: clock[0], time=real_time.time,
                                                                   strftime=real_time.strftime))
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None, boots=2, rounds=1,
                       scenarios=["prose-c1"], small=True)
    compare_run.run_compare(plan, tmp_path, progress=True)
    progress = [line for line in capsys.readouterr().out.splitlines() if line.startswith("compare: boot") and "left" in line]
    assert calls == ["a", "a", "b", "b", "a"], calls
    assert progress[0].endswith("about 5 min left (3 boot(s) at the median 100 s so far;"
                                " up to 5 min more if the 1 arm(s) not booted yet compile)"), progress
    assert progress[1].endswith("about 3 min left (2 boot(s) at the median 100 s so far)"), progress


def test_a_burn_in_boot_that_opens_the_comparison_is_timed_apart_too(monkeypatch, tmp_path, capsys):
    """An engine whose log cannot say it compiled gets a burn-in boot first (burn_in_first): a one-off,
    left out of the median, and no boot is redone, so no "up to" for arms not booted yet."""
    import time as real_time
    import types

    from rig.compare import run as compare_run
    from rig.compare.arms import parse_arm
    from rig.compare.model import ComparePlan

    clock = [0.0]

    def fake_boot(job, setup):
        clock[0] += 300.0 if job.burn_in else 100.0
        return BootEntry(index=job.index, block=job.block, arm=job.arm.name, spec=job.arm.spec, control=False, attempt=1,
                         burn_in=job.burn_in, rounds=[])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    monkeypatch.setattr(compare_run, "check_scoring_tokenizer", lambda *a: None)
    monkeypatch.setattr(compare_run, "time", types.SimpleNamespace(monotonic=lambda: clock[0], time=real_time.time,
                                                                   strftime=real_time.strftime))
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None, boots=2, rounds=1,
                       scenarios=["prose-c1"], small=True, burn_in_first=True)
    compare_run.run_compare(plan, tmp_path, progress=True)
    progress = [line for line in capsys.readouterr().out.splitlines() if line.startswith("compare: boot")]
    assert len(progress) == 5 and not any("left" in line for line in progress[:2]), progress
    assert progress[2].endswith("about 5 min left (3 boot(s) at the median 100 s so far)"), progress


def test_the_time_left_counts_the_pairs_target_planned(monkeypatch, tmp_path, capsys):
    """Under --target the progress line counts the pairs the first stage planned, not only the blocks
    of the order run so far, and keeps the boot times of earlier extensions."""
    from rig.compare import run as compare_run
    from rig.compare.arms import parse_arm
    from rig.compare.model import ComparePlan

    monkeypatch.setattr(compare_run, "run_boot", lambda job, setup: BootEntry(
        index=job.index, block=job.block, arm=job.arm.name, spec=job.arm.spec, control=False, attempt=1, burn_in=False, rounds=[]))
    monkeypatch.setattr(compare_run, "check_scoring_tokenizer", lambda *a: None)
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None, boots=2, rounds=1,
                       scenarios=["prose-c1"], small=True, target_pct=0.5, max_boots=4, first_stage=2)
    plan.planned_pairs = 4
    monkeypatch.setattr(compare_run, "time_left", lambda seconds, left, *more: f" [{len(seconds)} timed, {left} left]")
    compare_run.run_compare(plan, tmp_path, progress=True)
    progress = [line for line in capsys.readouterr().out.splitlines() if line.startswith("compare: boot")]
    assert progress[0].endswith("[0 timed, 8 left]") and progress[2].endswith("[2 timed, 6 left]"), progress
    assert progress[4].endswith("[4 timed, 4 left]") and progress[-1].endswith("[7 timed, 1 left]"), progress


@pytest.mark.parametrize("pairs", [1, 4])
def test_the_plot_holds_every_delta_it_draws_and_warns_of_nothing(tmp_path, pairs):
    """A -77% delta sat off the panel's edge (autoscale); with one pair, no interval, the panel's axis
    collapsed to a point (matplotlib warned, the panel came out blank)."""
    import warnings

    from rig.compare.plot import effect_limits, effect_rows, plot

    plan, entries = simulate_comparison(np.random.default_rng(3), Design(pairs=pairs, step_change=math.log(4.0)))
    analysis = analyze(plan, entries)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot(analysis, tmp_path / "compare.png")
    rows = effect_rows(analysis.scenarios[SCENARIO], "a")
    low, high = effect_limits(rows)
    drawn = [x for row in rows if (shown := as_percent(row.comparison))
             for x in ((shown[0], *shown[1], *shown[2]) if row.headline else (shown[0],))]
    assert low < high and all(low < x < high for x in drawn + [0.0]), (low, high, drawn)
    assert pairs == 1 or min(drawn) < -50  # a 4x slower step, inside the axis


def test_a_boot_sd_clamped_at_zero_does_not_read_as_identical_boots():
    """The boot variance is the boot means' spread less the rounds' share, clamped at zero: 'boot sd 0%'
    would read as boots that were identical, where the demo's boots differ by 10-20%."""
    from rig.compare.stats import noise_components

    noise = noise_components({"a": [[100.0, 110.0], [104.0, 98.0]]})  # the boot means differ less than the rounds do
    assert noise.boot_sd == 0
    c = compare_boots({0: [100.0, 110.0], 1: [104.0, 98.0]}, {0: [90.0, 95.0], 1: [91.0, 93.0]}, unit="tok/s")
    line = comparison_line(SCENARIO, "a -> b", c.model_copy(update={"noise": noise}))
    assert "boot sd ~0 (the boots differed no more than their rounds' noise explains)" in line and "boot sd 0%" not in line


def test_rig_compares_answer_is_each_headlines_verdict_in_one_line_and_the_void_first():
    from rig.compare.output import answer

    entries = [entry(i, i // 2, arm, [value, value + 1.0, value - 1.0])
               for i, (arm, value) in enumerate([("a", 100.0), ("b", 80.0), ("b", 81.0), ("a", 99.0), ("a", 101.0), ("b", 79.0)])]
    analysis = analyze(plan_for(3), entries)
    c = analysis.scenarios[SCENARIO].vs["b"]
    lines = answer(analysis)
    assert lines[0] == (f"compare: {SCENARIO} b vs a: {c.verdict}: {c.delta:+.2f}% [{c.ci[0]:+.2f}%, {c.ci[1]:+.2f}%] "
                        f"{analysis.scenarios[SCENARIO].unit} (3 boot pair(s), 95% interval)")
    assert c.verdict == "slower" and len(lines) == 1  # no greedy prompts in these entries
    void = analysis.model_copy(update={"void": "the boots ran under different conditions (x)"})
    assert answer(void) == ["compare: VOID: the boots ran under different conditions (x)"]  # no verdict stands


def test_compare_md_leads_with_each_headlines_verdict_and_ends_with_its_method():
    from rig.compare.output import answer

    entries = [entry(i, i // 2, arm, [value, value + 1.0, value - 1.0])
               for i, (arm, value) in enumerate([("a", 100.0), ("b", 80.0), ("b", 81.0), ("a", 99.0), ("a", 101.0), ("b", 79.0)])]
    analysis = analyze(plan_for(3), entries)
    c = analysis.scenarios[SCENARIO].vs["b"]
    text = markdown(analysis).splitlines()
    first = next(line for line in text[1:] if line.strip())
    assert first == "- " + answer(analysis)[0].removeprefix("compare: ") and f"b vs a: {c.verdict}: {c.delta:+.2f}%" in first, text[:4]
    method = text.index("## Method")
    assert "paired t interval on the boot-pair log ratios" in text[method + 1] and method == len(text) - 2
