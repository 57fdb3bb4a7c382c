"""Every scenario end to end against tiny-cpu (a real transformers server) at small sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import free_port

from rig.boot import driver_for
from rig.load.command import model_dir_for, run_scenarios
from rig.load.runner import LoadTarget, LocustRun, run_scenario
from rig.load.scenarios import TokenCounter, build_prompts, load_scenario, scenario_names
from rig.recipe import load

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import rig.boot.base as base

    root = tmp_path_factory.mktemp("tiny")
    saved = (base.RESULTS_DIR, base.BOOTS_DIR, base.STATE_DIR)
    base.RESULTS_DIR, base.BOOTS_DIR, base.STATE_DIR = root / "results", root / "results" / "boots", root / "state"
    resolved = load("tiny-cpu")
    driver = driver_for(resolved)
    record = driver.up(resolved, port=free_port(), progress=False)
    try:
        yield LoadTarget(resolved, record, model_dir_for(resolved)), root
    finally:
        driver.down(record)
        base.RESULTS_DIR, base.BOOTS_DIR, base.STATE_DIR = saved


def test_prompts_are_exact_in_tokens(tiny):
    target, _ = tiny
    counter = TokenCounter(target.model_dir)
    for name in ("decode-ctx3k", "prefill-8k"):
        scenario = load_scenario(name).scaled(True)
        prompts = build_prompts(scenario, counter)
        assert all(p["tokens"] == scenario.prompt_tokens for p in prompts)
        assert all(len(counter.encode(p["text"])) == scenario.prompt_tokens for p in prompts)
        assert len({p["text"] for p in prompts}) == len(prompts)


def test_every_scenario_runs_and_the_first_run_is_warmup(tiny):
    target, root = tiny
    names = scenario_names()
    assert {"prose-c1", "code-c1", "decode-ctx0", "decode-ctx3k", "prefill-8k", "prefill-64k", "c3000"} <= set(names)
    summaries = run_scenarios(target, names, small=True, workers=1, root=root / "run", progress=False)
    assert summaries[0]["warmup"] and not any(s["warmup"] for s in summaries[1:])
    assert [s["scenario"]["name"] for s in summaries[1:]] == names
    for summary in summaries:
        metrics = summary["metrics"]
        assert metrics["requests"]["completed"] >= 1, (summary["scenario"], metrics["requests"])
        errors = {k: n for k, n in metrics["requests"]["errors"].items() if k != "cut_by_window"}
        assert not errors, (summary["scenario"]["name"], errors)
        assert metrics["output_tok_s"] > 0 and summary["provenance"]["boot_id"] == target.boot_id
    by_name = {s["scenario"]["name"]: s for s in summaries[1:]}
    prefill = by_name["prefill-8k"]["metrics"]
    assert prefill["tokens"]["prompt_tokens_usage"] == prefill["tokens"]["prompt_tokens_target"] == 512
    assert prefill["prefill_tok_s"]["mean"] > 0
    decode = by_name["prose-c1"]["metrics"]
    assert decode["user_decode_tok_s"]["mean"] > 0 and decode["tpot_s"]["mean"] > 0
    runs = [json.loads(line) for line in Path(target.record.boot_dir, "runs.jsonl").read_text().splitlines()]
    assert runs[0]["warmup"] and len(runs) == len(summaries)
    # a second call on the same boot runs no warmup
    again = run_scenarios(target, ["prose-c1"], small=True, workers=1, root=root / "again", progress=False)
    assert len(again) == 1 and not again[0]["warmup"]


def test_interrupt_writes_the_summary_of_what_was_measured(tiny, monkeypatch, tmp_path):
    target, _ = tiny
    import time

    original_wait = LocustRun.wait

    def interrupted(self, progress=True):
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not list(self.out_dir.glob("records-*.jsonl")):
            time.sleep(0.1)
        time.sleep(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(LocustRun, "wait", interrupted)
    scenario = load_scenario("prose-c1").scaled(True)
    summary = run_scenario(target, scenario, tmp_path / "run", progress=False)
    monkeypatch.setattr(LocustRun, "wait", original_wait)
    assert summary["interrupted"] and summary["metrics"]["requests"]["total"] >= 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["interrupted"]
