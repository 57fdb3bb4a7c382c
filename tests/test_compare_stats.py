"""Comparison logic without servers: arms, ABBA order, statistics, verdicts, log normalisation, resume."""

from __future__ import annotations

import json

import pytest

from rig.compare import run as compare_run
from rig.compare.arms import Arm, boot_order, parse_arm
from rig.compare.report import normalize
from rig.compare.stats import bootstrap_ci, compare_scenario, noise_floor, verdict
from rig.errors import RigError


def test_parse_arms():
    assert parse_arm("after:DSV41_SHARED_PAD_K=1,DSV41_SHARED_PAD_BUF_ROWS=512").env == {
        "DSV41_SHARED_PAD_K": "1", "DSV41_SHARED_PAD_BUF_ROWS": "512"}
    assert parse_arm("cb:@cb").variant == "cb"
    assert parse_arm("new:image=dev2").overlay() == {"RIG_IMAGE_TAG": "dev2"}
    both = parse_arm("slow:@delay,RIG_TOKEN_DELAY_MS=9")
    assert both.variant == "delay" and both.env == {"RIG_TOKEN_DELAY_MS": "9"}
    for bad in ("noname", ":X=1", "a:X", "a:=1"):
        with pytest.raises(RigError, match="--arm"):
            parse_arm(bad)


def test_abba_order():
    a, b = Arm("a"), Arm("b")
    assert [(block, arm.name) for block, arm in boot_order([a, b], 3)] == [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b")]


def test_known_effect_is_found_with_its_sign_and_covered():
    rounds = {("before", 0): [100.0, 101.0, 99.5], ("after", 0): [90.2, 91.0, 89.6],
              ("before", 1): [98.0, 98.5, 99.0], ("after", 1): [88.1, 88.9, 89.3]}
    result = compare_scenario("before", "after", rounds)
    assert result["verdict"] == "slower" and result["delta_pct"] < 0
    low, high = result["ci_pct"]
    assert low < result["delta_pct"] < high < 0
    assert result["delta_pct"] == pytest.approx(-9.9, abs=0.2)
    assert result["noise_floor_pct"] == pytest.approx(abs(98.5 - 100.1667) / 100.1667 * 100, rel=1e-3)


def test_identical_arms_are_within_noise():
    rounds = {("a", 0): [100.0, 101.0, 99.0], ("b", 0): [100.5, 99.0, 100.0],
              ("a", 1): [97.0, 98.0, 99.0], ("b", 1): [98.5, 97.0, 98.0]}
    assert compare_scenario("a", "b", rounds)["verdict"] == "within noise"


def test_verdict_rules():
    assert verdict(1.14, (0.6, 1.7), 0.3) == "faster"
    assert verdict(1.14, (0.6, 1.7), 2.0) == "within noise"  # below the measured noise floor
    assert verdict(-3.0, (-5.0, -1.0), None) == "slower"
    assert verdict(0.5, (-0.5, 1.5), 0.1) == "within noise"


def test_bootstrap_carries_boot_variance():
    tight = bootstrap_ci([[1.0, 1.1, 0.9], [1.0, 1.05, 0.95]])
    spread = bootstrap_ci([[1.0, 1.1, 0.9], [5.0, 5.05, 4.95]])
    assert (spread[1] - spread[0]) > 10 * (tight[1] - tight[0])
    assert noise_floor({"a": [100.0, 102.0], "b": [50.0]}) == pytest.approx(2.0)


def test_log_normalisation_keeps_what_identifies_a_line():
    a = normalize("2026-11-29 17:13:43,680 rig_adapters[4212] WARNING MXFP8 backend 'b12x' rejected N=5120 K=576 (x)")
    b = normalize("2026-11-30 09:01:02,001 rig_adapters[99] WARNING MXFP8 backend 'b12x' rejected N=5120 K=576 (x)")
    assert a == b and "K=576" in a
    assert normalize('INFO:     127.0.0.1:55872 - "GET /health HTTP/1.1" 200 OK') == normalize(
        'INFO:     127.0.0.1:41234 - "GET /health HTTP/1.1" 200 OK')


def test_resume_skips_finished_boots(tmp_path, monkeypatch):
    calls = []

    def fake_boot(plan, index, block, arm, out, progress):
        calls.append(index)
        if index == 2 and len(calls) == 3:
            raise KeyboardInterrupt
        return {"index": index, "block": block, "arm": arm.name, "spec": arm.spec, "control": False, "voided": False,
                "problems": [], "rounds": [{"prose-c1": {"figure": 100.0 + index}}], "greedy": {}, "check": None,
                "healthy_after_s": 1.0, "log_path": None, "boot_id": f"b{index}"}

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    plan = compare_run.ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None,
                                   boots=2, rounds=1, scenarios=["prose-c1"], small=True)
    with pytest.raises(KeyboardInterrupt):
        compare_run.run_compare(plan, tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "boots").iterdir()) == ["00-a.json", "01-b.json"]
    entries = compare_run.run_compare(plan, tmp_path, progress=False)
    assert calls == [0, 1, 2, 2, 3] and [e["index"] for e in entries] == [0, 1, 2, 3]
    assert json.loads((tmp_path / "plan.json").read_text())["order"] == [[0, "a"], [0, "b"], [1, "b"], [1, "a"]]
    other = compare_run.ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("c:X=2")], control=None,
                                    boots=2, rounds=1, scenarios=["prose-c1"], small=True)
    with pytest.raises(RigError, match="different comparison"):
        compare_run.run_compare(other, tmp_path, progress=False)


def test_a_single_pair_gets_no_interval_and_no_verdict():
    result = compare_scenario("a", "b", {("a", 0): [100.0], ("b", 0): [90.0]})
    assert result["ci_pct"] is None and "no verdict" in result["verdict"] and result["delta_pct"] == pytest.approx(-10.0)
