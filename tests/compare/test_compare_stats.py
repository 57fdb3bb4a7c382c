"""Comparison logic without servers: arms resolved through recipes, ABBA order, statistics,
derived boot checks, greedy identity, log normalisation, resume."""

from __future__ import annotations

import json
import os

import pytest

from rig.boot.checks import check_boot
from rig.boot.record import BootRecord
from rig.compare import run as compare_run
from rig.compare.arms import Arm, boot_order, check_arms, parse_arm
from rig.compare.conditions import normalize
from rig.compare.entries import attempt_dir
from rig.compare.identity import greedy_report
from rig.compare.model import COMPARE_SCHEMA, BootEntry, ComparePlan, RunResult
from rig.compare.stats import compare_boots, noise_components, pairs_needed
from rig.deploy.recipe import load
from rig.errors import RigError


def test_parse_arms():
    assert parse_arm("after:DSV41_SHARED_PAD_K=1,DSV41_SHARED_PAD_BUF_ROWS=512").env == {
        "DSV41_SHARED_PAD_K": "1", "DSV41_SHARED_PAD_BUF_ROWS": "512"}
    assert parse_arm("cb:@cb").variant == "cb"
    assert parse_arm("new:image=dev2").overlay() == {"RIG_IMAGE_TAG": "dev2"}
    both = parse_arm("slow:@delay,RIG_TOKEN_DELAY_MS=9")
    assert both.variant == "delay" and both.env == {"RIG_TOKEN_DELAY_MS": "9"}
    for bad in ("noname", ":X=1", "a:X", "a:=1", "a:1X=2", "a:X=1,X=2", "A b:X=1", "../x:X=1", "a:X=1\nY=2", "a:image=../x"):
        with pytest.raises(RigError, match="--arm"):
            parse_arm(bad)


def test_abba_order():
    a, b = Arm(name="a"), Arm(name="b")
    assert [(block, arm.name) for block, arm in boot_order([a, b], 3)] == [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b")]


def test_the_control_boots_after_the_first_block_and_an_older_plan_keeps_its_own_order(tmp_path):
    """The control boots once the baseline's first boot has written the reference; `--target`'s
    extra blocks leave every index where it was; a plan.json written before the control moved
    (no control_slot) reads back with the control first, so its boots stay where they ran."""
    plan = ComparePlan(recipe="llama8b-h200", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=parse_arm("fp16:@fp16"),
                       boots=2, rounds=1, scenarios=["prose-c1"], small=True)
    order = [(block, arm.name) for block, arm in plan.order()]
    assert order == [(0, "a"), (0, "b"), (0, "fp16"), (1, "b"), (1, "a")]
    longer = plan.model_copy(update={"boots": 3})
    assert [(block, arm.name) for block, arm in longer.order()][: len(order)] == order
    plan.write(tmp_path)
    assert ComparePlan.read(tmp_path).control_slot == "after_first_block"
    older = json.loads((tmp_path / "plan.json").read_text())
    del older["control_slot"]
    (tmp_path / "plan.json").write_text(json.dumps(older))
    assert [(block, arm.name) for block, arm in ComparePlan.read(tmp_path).order()][:3] == [(0, "fp16"), (0, "a"), (0, "b")]


def test_readme_gate_off_arm_resolves_through_the_recipe():
    """`before:DSV41_SHARED_PAD_K=0 after:DSV41_SHARED_PAD_K=1` on mia-tp4: the before arm expects
    shared_pad_k NOT armed, the after arm expects it armed; mxfp8_b12x stays on in both."""
    from rig.boot.checks import adapter_expectations, derived_boot_log

    resolved = check_arms("mia-tp4", [parse_arm("before:DSV41_SHARED_PAD_K=0"), parse_arm("after:DSV41_SHARED_PAD_K=1")])
    assert adapter_expectations(resolved["before"]) == {"mxfp8_b12x": True, "shared_pad_k": False}
    assert adapter_expectations(resolved["after"]) == {"mxfp8_b12x": True, "shared_pad_k": True}
    before = derived_boot_log(adapter_expectations(resolved["before"]))
    assert any("mxfp8_b12x" in p for p in before.must) and not any("shared_pad_k" in p for p in before.must)
    assert resolved["before"].full_env()["DSV41_SHARED_PAD_K"] == "0"
    assert resolved["after"].full_env()["DSV41_SHARED_PAD_BUF_ROWS"] == "256"


def test_an_overlay_gate_adds_its_adapter_and_bad_overlays_are_one_line():
    resolved = parse_arm("slow:RIG_TOKEN_DELAY_MS=7").resolve("tiny-cpu")
    assert [(u.name, u.gates) for u in resolved.adapters] == [("token_delay", {"RIG_TOKEN_DELAY_MS": "7"})]
    with pytest.raises(RigError, match="adapter targets transformers, vllm, recipe runs sglang") as error:
        parse_arm("x:RIG_TOKEN_DELAY_MS=5").resolve("mia-tp4")
    assert "\n" not in str(error.value) and "--arm x:RIG_TOKEN_DELAY_MS=5" in str(error.value)
    with pytest.raises(RigError, match="setting of shared_pad_k"):
        parse_arm("x:DSV41_SHARED_PAD_BUF_ROWS=512").resolve("glm52-tp6")
    with pytest.raises(RigError, match="no variant 'nope'"):
        parse_arm("x:@nope").resolve("tiny-cpu")


def _record(tmp_path, log: str, manifests: list[dict]) -> BootRecord:
    (tmp_path / "m").mkdir(parents=True, exist_ok=True)
    for index, manifest in enumerate(manifests):
        (tmp_path / "m" / f"manifest-h-{index}.json").write_text(json.dumps(manifest))
    (tmp_path / "log").write_text(log)
    return BootRecord(boot_id="b", ref="mia-tp4", recipe="mia-tp4", variant="host", driver="compose", base_url="",
                      boot_dir=str(tmp_path), log_path=str(tmp_path / "log"), manifest_dir=str(tmp_path / "m"))


def test_a_variable_the_engine_says_it_does_not_know_voids_the_boot(tmp_path):
    """vLLM 0.24 warns "Unknown vLLM environment variable detected: VLLM_X" (envs.py validate_environ)
    and goes on: an arm made of a misspelt VLLM_ name would compare a configuration with itself."""
    log = ("(APIServer pid=9) WARNING 12-03 08:37:00 [envs.py:2004] Unknown vLLM environment variable detected: VLLM_ATTENTON_BACKEND\n"
           "(APIServer pid=9) WARNING 12-03 08:37:00 [envs.py:2004] Unknown vLLM environment variable detected: VLLM_HOSTS_OWN\n")
    record = _record(tmp_path, log, [])
    typo = parse_arm("typo:VLLM_ATTENTON_BACKEND=TRITON_ATTN").resolve("llama8b-h200")
    problems = check_boot(record, typo, {"VLLM_ATTENTON_BACKEND": "TRITON_ATTN"}).problems
    assert problems == ["VLLM_ATTENTON_BACKEND: vllm says it knows no such variable (its boot log), so setting it changes "
                        "nothing; fix the name (the engine's own list of variables) or drop it"], problems
    # Only what the recipe or the arm set: the host's own VLLM_HOSTS_OWN is not this comparison's doing.
    assert check_boot(record, load("llama8b-h200"), {}).problems == []


def test_boot_checks_follow_the_gates_and_demand_evidence(tmp_path):
    resolved = parse_arm("after:DSV41_SHARED_PAD_K=1").resolve("mia-tp4")
    armed = {"state": "armed", "first_use": {"detail": "x"}, "layers_patched": [], "shapes_rejected": []}
    padded = {**armed, "layers_patched": [{"layer": "l", "detail": "d", "shape": [5120, 640]}]}
    log = "mxfp8_b12x ARMED: x\nshared_pad_k ARMED: y\n"
    good = _record(tmp_path / "good", log, [{"pid": 1, "adapters": {"mxfp8_b12x": armed, "shared_pad_k": padded}}])
    assert check_boot(good, resolved, after_load=True).ok
    # b12x rejected the very shape shared_pad_k produced: armed, yet nothing was rescued.
    rejected = {**armed, "shapes_rejected": [{"shape": [5120, 640], "message": "rejected"}]}
    bad = _record(tmp_path / "bad", log, [{"pid": 1, "adapters": {"mxfp8_b12x": rejected, "shared_pad_k": padded}}])
    problems = check_boot(bad, resolved, after_load=True).problems
    assert any("N=5120 K=640" in p for p in problems), problems
    # A process that padded layers but never used them.
    unused = _record(tmp_path / "unused", log, [{"pid": 7, "adapters": {"mxfp8_b12x": armed, "shared_pad_k": {**padded, "first_use": None}}},
                                                {"pid": 8, "adapters": {"mxfp8_b12x": armed, "shared_pad_k": padded}}])
    assert any("pid 7" in p for p in check_boot(unused, resolved, after_load=True).problems)
    # Gate off in the arm, yet armed: the arm did not run what it says.
    before = parse_arm("before:DSV41_SHARED_PAD_K=0").resolve("mia-tp4")
    assert any("gate off" in p for p in check_boot(good, before).problems)


def test_known_effect_is_found_with_its_sign_and_covered():
    baseline = {0: [100.0, 101.0, 99.5], 1: [98.0, 98.5, 99.0], 2: [100.5, 99.8, 100.1]}
    arm = {0: [90.2, 91.0, 89.6], 1: [88.1, 88.9, 89.3], 2: [90.0, 90.4, 90.9]}
    result = compare_boots(baseline, arm)
    assert result.verdict == "slower" and result.pairs == 3
    low, high = result.ci
    assert low < result.delta < high < 0
    assert result.delta == pytest.approx(-9.8, abs=0.3)
    assert result.noise.round_sd is not None and result.noise.boot_sd is not None


def test_identical_arms_give_no_verdict_and_latency_reads_lower_is_better():
    a = {0: [100.0, 101.0, 99.0], 1: [97.0, 98.0, 99.0], 2: [99.0, 100.0, 101.0]}
    b = {0: [100.5, 99.0, 100.0], 1: [98.5, 97.0, 98.0], 2: [100.0, 99.5, 100.5]}
    assert compare_boots(a, b).verdict.startswith("no difference resolved")
    ttft = compare_boots({0: [50.0], 1: [51.0], 2: [50.5]}, {0: [40.0], 1: [41.0], 2: [40.2]}, "ttft_p50_ms", higher_is_better=False)
    assert ttft.verdict == "lower (better)"


def test_noise_estimates_do_not_grow_with_more_boots():
    """The old floor (largest same-arm difference) grew with boots; an estimate of the sd must not."""
    import numpy as np

    rng = np.random.default_rng(3)

    def boots(n):
        return [list(100 * np.exp(rng.normal(0, 0.03) + rng.normal(0, 0.01, 3))) for _ in range(n)]

    few = [noise_components({"a": boots(2), "b": boots(2)}).boot_sd for _ in range(200)]
    many = [noise_components({"a": boots(8), "b": boots(8)}).boot_sd for _ in range(200)]
    assert abs(np.median(many) - 3.0) < 0.5 and np.median(many) <= np.median(few) + 0.5
    assert pairs_needed(0.0424, 1.0) > pairs_needed(0.0163, 1.0) >= 2


def test_greedy_identity_needs_reproducibility_first():
    def entry(index, arm, greedy, control=False):
        return BootEntry(index=index, block=index // 2, arm=arm, spec="", control=control, attempt=1, greedy=greedy)

    same = [entry(0, "a", {"p": "1"}), entry(1, "b", {"p": "1"}), entry(2, "b", {"p": "1"}), entry(3, "a", {"p": "1"})]
    assert greedy_report(same + [entry(4, "c", {"p": "2"}, True)], ["a", "b"], "c").control.discriminates
    assert greedy_report(same, ["a", "b"], None).status == "identical"
    flaky = [entry(0, "a", {"p": "1"}), entry(1, "b", {"p": "1"}), entry(2, "b", {"p": "1"}), entry(3, "a", {"p": "9"})]
    report = greedy_report(flaky + [entry(4, "c", {"p": "2"}, True)], ["a", "b"], "c")
    assert report.status.startswith("inconclusive") and report.control.discriminates is False


def test_log_normalisation_keeps_what_identifies_a_line():
    a = normalize("2026-11-29 17:13:43,680 rig_adapters[4212] WARNING MXFP8 backend 'b12x' rejected N=5120 K=576 (x)")
    b = normalize("2026-11-30 09:01:02,001 rig_adapters[99] WARNING MXFP8 backend 'b12x' rejected N=5120 K=576 (x)")
    assert a == b and "K=576" in a


def test_log_normalisation_folds_progress_bars_and_engine_timestamps():
    """vLLM's boot log on the H200: a dozen CUDA-graph capture bars and per-boot times filled the
    boot-log diff with lines that differed only in a bar's state."""
    bars = {normalize("Capturing CUDA graphs (FULL):  12%|\u2588\u258f        | 6/51 [00:00<00:03, 15.21it/s]"),
            normalize("Capturing CUDA graphs (FULL):  55%|\u2588\u2588\u2588\u2588\u2588\u258d    | 28/51 [00:02<00:01, 9.87it/s]")}
    assert bars == {"Capturing CUDA graphs (FULL): <progress>"}
    captured = {normalize("(EngineCore pid=2493) INFO 12-01 23:42:00 [model_runner.py:726] Graph capturing finished in 6 secs, took 0.52 GiB"),
                normalize("(EngineCore pid=4912) INFO 12-02 00:01:59 [model_runner.py:726] Graph capturing finished in 9 secs, took 0.61 GiB")}
    assert len(captured) == 1 and "model_runner.py:726" in captured.pop()
    # the engines' periodic load lines: which counts they caught depends on when the logger fired
    stats = {normalize(f"(APIServer pid=2444) INFO 12-02 03:1{k}:17 [loggers.py:273] Engine 000: Avg prompt throughput: {k}.0 "
                       f"tokens/s, Avg generation throughput: 2{k}.5 tokens/s, Running: {k} reqs, Waiting: {k} reqs") for k in (0, 1)}
    stats |= {normalize(f"[2026-12-02 03:10:1{k}] Decode batch. #running-req: {k}, #token: {2048 * k}, #queue-req: {k}") for k in (0, 1)}
    assert len(stats) == 2, stats
    assert normalize("Running: 1 reqs K=576") != normalize("Running: 1 reqs K=640")  # not every number goes


def test_resume_redoes_exactly_the_missing_boots(tmp_path, monkeypatch):
    calls = []

    def fake_boot(job, setup):
        index, block, arm, out, burn_in = job.index, job.block, job.arm, setup.out, job.burn_in
        attempt, _ = attempt_dir(out, index, arm)
        (out / "runs" / f"{index:02d}-{arm.name}" / f"attempt-{attempt}").mkdir(parents=True)
        calls.append((index, attempt))
        if index == 2 and attempt == 1:
            raise KeyboardInterrupt
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=attempt, burn_in=burn_in,
                         rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": 100.0 + index}, problems=[])}])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None,
                       boots=2, rounds=1, scenarios=["prose-c1"], small=True)
    with pytest.raises(KeyboardInterrupt):
        compare_run.run_compare(plan, tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "boots").iterdir()) == ["00-a.json", "01-b.json"]
    _, entries = compare_run.run_compare(plan, tmp_path, progress=False)
    assert calls == [(0, 1), (1, 1), (2, 1), (2, 2), (3, 1)] and [e.index for e in entries] == [0, 1, 2, 3]
    assert [e.attempt for e in entries] == [1, 1, 2, 1] and not any(e.voided for e in entries)
    assert json.loads((tmp_path / "plan.json").read_text())["order"] == [[0, "a"], [0, "b"], [1, "b"], [1, "a"]]
    other = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("c:X=2")], control=None,
                        boots=2, rounds=1, scenarios=["prose-c1"], small=True)
    with pytest.raises(RigError, match="different comparison") as caught:
        compare_run.run_compare(other, tmp_path, progress=False)
    assert caught.value.field == "arms" and "its arms 'a:X=0 b:X=1', this command's 'a:X=0 c:X=2'" in caught.value.problem
    # Resumed with another recipe: that is what the user hears, before that recipe's arms are resolved
    # or its checkpoint checked (an SGLang recipe's scoring check must not speak first).
    def unasked(*_):
        raise AssertionError("the other recipe was checked before the saved plan")

    monkeypatch.setattr(compare_run, "check_scoring_tokenizer", unasked)
    monkeypatch.setattr(compare_run, "ResolvedArms", unasked)
    another = ComparePlan(recipe="llama8b-sglang-h200", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None,
                          boots=2, rounds=1, scenarios=["prose-c1"], small=True)
    with pytest.raises(RigError, match="different comparison") as caught:
        compare_run.run_compare(another, tmp_path, progress=False)
    assert caught.value.field == "recipe" and "'tiny-cpu', this command's 'llama8b-sglang-h200'" in caught.value.problem


def test_a_resume_says_which_design_settings_it_keeps_from_the_saved_plan(tmp_path, monkeypatch, capsys):
    """A resume runs the saved design; a command line (or its defaults) that asks for another is told
    which settings were kept, flag by flag, instead of silently running the old ones."""
    monkeypatch.setattr(compare_run, "run_boot", lambda job, setup: BootEntry(
        index=job.index, block=job.block, arm=job.arm.name, spec=job.arm.spec, control=False, attempt=1, burn_in=False, rounds=[]))
    monkeypatch.setattr(compare_run, "check_scoring_tokenizer", lambda *a: None)

    def plan_of(**design):
        return ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None, rounds=1,
                           scenarios=["prose-c1"], small=True, **design)

    compare_run.run_compare(plan_of(boots=2, duration_s=6.0), tmp_path, progress=False)
    plan, _ = compare_run.run_compare(plan_of(boots=3, duration_s=12.0), tmp_path, progress=True)
    notes = [line for line in capsys.readouterr().out.splitlines() if "saved plan" in line]
    assert plan.boots == 2 and plan.duration_s == 6.0
    assert notes == ["compare: resuming with the saved plan's --boots 2 (this command: 3), --duration 6 (this command: 12) "
                     "(a plan does not change on resume; start a new comparison for another design)"], notes
    compare_run.run_compare(plan_of(boots=2, duration_s=6.0), tmp_path, progress=True)
    assert "saved plan" not in capsys.readouterr().out


def test_a_setting_the_engine_does_not_know_stops_the_comparison_at_its_first_boot(tmp_path, monkeypatch):
    """Every boot of that arm would be voided alike: the comparison stops after the first, keeping it."""
    from rig.boot.checks import BootCheck

    calls = []

    def fake_boot(job, setup):
        index, block, arm, burn_in = job.index, job.block, job.arm, job.burn_in
        calls.append(index)
        unknown = ["VLLM_ATTENTON_BACKEND: vllm says it knows no such variable"] if arm.name == "b" else []
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=1, burn_in=burn_in,
                         voided=bool(unknown), problems=unknown, boot_id=f"boot-{index}",
                         check=BootCheck(boot_id=f"boot-{index}", ok=not unknown, healthy_after_s=1.0, problems=unknown,
                                         unknown_settings=unknown), rounds=[])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:VLLM_ATTENTON_BACKEND=X")], control=None,
                       boots=4, rounds=1, scenarios=["prose-c1"], small=True)
    with pytest.raises(RigError) as caught:
        compare_run.run_compare(plan, tmp_path, progress=False)
    assert calls == [0, 1] and sorted(p.name for p in (tmp_path / "boots").iterdir()) == ["00-a.json", "01-b.json"]
    assert caught.value.where == "--arm b:VLLM_ATTENTON_BACKEND=X" and "boot 2 (boot-1): VLLM_ATTENTON_BACKEND" in caught.value.problem


def test_every_arms_served_tokenizer_is_checked_before_anything_is_written(tmp_path, monkeypatch):
    """A variant may serve another tokenizer (--tokenizer-path): each arm's and the control's is checked,
    not only the baseline's, before the comparison directory exists."""
    seen = []

    def check(engine, model_dir):
        seen.append(model_dir())
        if model_dir() == "dir of bf16":
            raise RigError("dir of bf16/tokenizer_config.json", "model_max_length", "missing", "set it")

    monkeypatch.setattr(compare_run, "model_dir_for", lambda resolved: f"dir of {resolved.variant}")
    monkeypatch.setattr(compare_run, "check_scoring_tokenizer", check)
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:@bf16")], control=parse_arm("c:@serial"),
                       boots=2, rounds=1, scenarios=["prose-c1"], small=True)
    with pytest.raises(RigError, match="missing"):
        compare_run.run_compare(plan, tmp_path / "new", progress=False)
    assert seen == ["dir of cb", "dir of bf16"] and not (tmp_path / "new").exists()
    plan.arms[1] = parse_arm("b:X=1")
    seen.clear()
    monkeypatch.setattr(compare_run, "_execute", lambda *args: [])
    compare_run.run_compare(plan, tmp_path / "new", progress=False)
    assert seen == ["dir of cb", "dir of cb", "dir of serial"]


def test_target_adds_pairs_until_met_or_limit(tmp_path, monkeypatch):
    def fake_boot(job, setup):
        index, block, arm, burn_in = job.index, job.block, job.arm, job.burn_in
        value = 100.0 * (1.05 if arm.name == "b" else 1.0) * (1 + 0.002 * ((index * 7) % 5 - 2))
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=1, burn_in=burn_in,
                         rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": value}, problems=[])}])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None, boots=4, rounds=1,
                       scenarios=["prose-c1"], small=True, target_pct=0.5, max_boots=8, first_stage=4)
    _, entries = compare_run.run_compare(plan, tmp_path, progress=False)
    from rig.compare.report import analyze

    saved = ComparePlan.read(tmp_path)
    analysis = analyze(saved, entries)
    # Stein: the first 4 pairs asked for more than the cap; the ABBA order goes on block by block to it.
    assert saved.planned_pairs == saved.boots == 8 and len(entries) == 16, analysis.target
    assert not analysis.target.met and analysis.target.status.startswith("limit reached"), analysis.target
    assert "Stein" in analysis.scenarios["prose-c1"].vs["b"].method
    order = [(e.block, e.arm) for e in entries]
    assert order[:4] == [(0, "a"), (0, "b"), (1, "b"), (1, "a")] and order[8:10] == [(4, "a"), (4, "b")]
    loose = ComparePlan(recipe="tiny-cpu", arms=plan.arms, control=None, boots=4, rounds=1, scenarios=["prose-c1"], small=True,
                        target_pct=3.0, max_boots=8, first_stage=4)
    _, entries = compare_run.run_compare(loose, tmp_path / "loose", progress=False)
    analysis = analyze(ComparePlan.read(tmp_path / "loose"), entries)
    assert len(entries) == 8 and analysis.target.met, analysis.target


def test_a_planted_fingerprint_difference_voids_the_comparison(tmp_path, monkeypatch):
    """A power limit that differs between boots voids the verdict, naming the field, unless accepted."""
    from rig.compare.markdown import markdown
    from rig.compare.report import analyze
    from rig.observe.fingerprint import Fingerprint, GpuFacts

    def fake_boot(job, setup):
        index, block, arm, burn_in = job.index, job.block, job.arm, job.burn_in
        limit = 600.0 if (arm.name == "b" and block == 1) else 700.0
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=1, burn_in=burn_in,
                         fingerprint=Fingerprint(taken_at=0.0, hostname="box", kernel="6.8", os="linux", cpu="cpu", cpu_count=1,
                                                 environment={}, driver_version="580.159.04", gpu_count=1,
                                                 gpus=[GpuFacts(index=0, name="H200", power_limit_w=limit)]),
                         rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": 100.0 + index}, problems=[])}])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None, boots=2, rounds=1,
                       scenarios=["prose-c1"], small=True)
    _, entries = compare_run.run_compare(plan, tmp_path / "one", progress=False)
    analysis = analyze(plan, entries)
    assert analysis.void and "gpus.0.power_limit_w" in analysis.void
    assert "VOID" in markdown(analysis)
    accepted = plan.model_copy(update={"accept_fingerprint": ["gpus.*.power_limit_w"]})
    assert analyze(accepted, entries).void is None


def test_goodput_slos_parse_and_refuse_in_one_line():
    from rig.load.goodput import parse_slos

    assert parse_slos("ttft<=2s,tpot<=50ms") == {"ttft": 2.0, "tpot": 0.05}
    assert parse_slos("ttft:2000 e2el:500") == {"ttft": 2.0, "e2e": 0.5}  # vLLM's form, as rig tune reads it
    assert parse_slos(None) is None
    for bad in ("ttft<2s", "ttft<=2", "speed<=1s", "ttft<=-1s", "ttft<=xs", "ttft:1s", "ttft:inf", ",", "ttft:5,ttft<=5ms",
                "ttft:1e300", "ttft<=1e9s", "ttft:1e-320", ""):
        with pytest.raises(RigError, match="--goodput"):
            parse_slos(bad)


def test_the_burn_in_boot_and_a_boot_that_compiled_are_measured_but_never_paired(tmp_path, monkeypatch):
    """The boot-state control: a measured boot whose log says it compiled (its figure low, as a cold
    H200 boot read 1.4% low) is kept as a burn-in and booted again; where the engine's log cannot tell,
    the comparison opens with a burn-in boot of the baseline arm. Neither enters the pairs; the report
    says what each read."""
    from rig.boot.record import CacheState
    from rig.compare.markdown import markdown
    from rig.compare.report import analyze

    compiled_once = {"b"}
    calls = []

    def fake_boot(job, setup):
        index, block, arm, burn_in, redo_if_compiled = job.index, job.block, job.arm, job.burn_in, job.redo_if_compiled
        calls.append((index, arm.name, burn_in))
        log = "compiled" if burn_in or arm.name in compiled_once else "reused"
        compiled_once.discard(arm.name) if not burn_in else None
        burn_in = burn_in or (redo_if_compiled and log == "compiled")
        value = 100.0 * (0.992 if burn_in else 1.0) * (1 + 0.001 * ((index * 7) % 5 - 2))
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=1, burn_in=burn_in,
                         compile_cache=CacheState(state="cold" if log == "compiled" else "warm", log=log),
                         rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": value}, problems=[])}])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None, boots=2, rounds=1,
                       scenarios=["prose-c1"], small=True, burn_in_first=True)
    _, entries = compare_run.run_compare(plan, tmp_path, progress=False)
    # burn-in (0, a); block 0: a, b (compiled: booted again), block 1: b, a
    assert calls == [(0, "a", True), (1, "a", False), (2, "b", False), (2, "b", False), (3, "b", False), (4, "a", False)]
    assert sorted(p.name for p in (tmp_path / "boots").iterdir()) == [
        "00-a.json", "01-a.json", "02-b.burn-in.json", "02-b.json", "03-b.json", "04-a.json"]
    analysis = analyze(plan, entries)
    c = analysis.scenarios["prose-c1"].vs["b"]
    assert c.pairs == 2 and analysis.void is None and analysis.boots.used == 4
    state = analysis.boot_state
    assert [b.boot for b in state.burn_in] == ["00-a", "02-b.burn-in"] and not state.compiled
    assert state.burn_in[0].vs_measured_pct["prose-c1"] == pytest.approx(-0.8, abs=0.3)
    text = markdown(analysis)
    assert "Boot-state control: a burn-in boot of the baseline arm" in text and "burn-in 00-a (the comparison's first boot" in text
    # A resume reads both entries of the redone position back and boots nothing.
    calls.clear()
    _, again = compare_run.run_compare(ComparePlan.read(tmp_path), tmp_path, progress=False)
    assert calls == [] and len(again) == len(entries)
    # Measured boots in different states (one compiled, the others reused) void the verdict.
    mixed = [e.model_copy(update={"compile_cache": CacheState(state="cold", log="compiled")}) if e.index == 3 else e
             for e in entries]
    assert "compile_cache.log" in (analyze(plan, mixed).void or "")
    assert analyze(plan.model_copy(update={"accept_fingerprint": ["compile_cache.log"]}), mixed).void is None


def test_a_first_boot_that_compiled_is_booted_again_without_a_leading_burn_in(tmp_path, monkeypatch):
    """vLLM says in its log whether a boot compiled: no leading burn-in then; the machine's first boot
    (cold caches, compiled) is kept as a burn-in and booted again, and a warm machine pays nothing."""
    from rig.boot.record import CacheState
    from rig.compare.report import analyze

    cold = {"caches": True}
    calls = []

    def fake_boot(job, setup):
        index, block, arm, burn_in, redo_if_compiled = job.index, job.block, job.arm, job.burn_in, job.redo_if_compiled
        calls.append(index)
        log = "compiled" if cold["caches"] else "reused"
        cold["caches"] = False
        burn_in = burn_in or (redo_if_compiled and log == "compiled")
        value = 100.0 * (0.986 if log == "compiled" else 1.0) * (1 + 0.001 * ((index * 7) % 5 - 2))
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=1, burn_in=burn_in,
                         compile_cache=CacheState(state="cold" if log == "compiled" else "partial", log=log),
                         rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": value}, problems=[])}])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    plan = ComparePlan(recipe="llama8b-h200", arms=[parse_arm("a:X=0"), parse_arm("b:X=0")], control=None, boots=2, rounds=1,
                       scenarios=["prose-c1"], small=True)
    _, entries = compare_run.run_compare(plan, tmp_path / "cold", progress=False)
    assert calls == [0, 0, 1, 2, 3]
    analysis = analyze(plan, entries)
    assert [b.boot for b in analysis.boot_state.burn_in] == ["00-a.burn-in"] and analysis.void is None
    assert analysis.boot_state.burn_in[0].vs_measured_pct["prose-c1"] == pytest.approx(-1.4, abs=0.3)
    assert "kept as a burn-in and booted again" in analysis.boot_state.control
    calls.clear()
    compare_run.run_compare(plan.model_copy(), tmp_path / "warm", progress=False)  # the caches now hold it
    assert calls == [0, 1, 2, 3]


def test_a_control_that_compiled_is_kept_and_only_measured_boots_are_booted_again(tmp_path, monkeypatch):
    """The control (a numerics change, so compile caches of its own) runs no rounds: a compile has no
    speed of it to bias, so its compiled boot is kept as the control, not booted again; the first
    measured boot, which compiled the baseline's configuration, is."""
    from rig.boot.record import CacheState
    from rig.compare.report import analyze

    warm: set[str] = set()  # configurations whose compile caches exist: an arm's variant
    calls = []

    def fake_boot(job, setup):
        plan, index, block, arm, burn_in, redo_if_compiled = setup.plan, job.index, job.block, job.arm, job.burn_in, job.redo_if_compiled
        calls.append((index, arm.name))
        configuration = "fp16" if arm is plan.control else "bf16"
        log = "reused" if configuration in warm else "compiled"
        warm.add(configuration)
        burn_in = burn_in or (redo_if_compiled and log == "compiled")
        rounds = [] if arm is plan.control else [{"prose-c1": RunResult(scenario="prose-c1", dir="", problems=[],
                                                                        figures={"user_decode_tok_s": 100.0 + index % 3})}]
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=arm is plan.control and not burn_in,
                         attempt=1, burn_in=burn_in, rounds=rounds,
                         compile_cache=CacheState(state="cold" if log == "compiled" else "partial", log=log))

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    plan = ComparePlan(recipe="llama8b-h200", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=parse_arm("fp16:@fp16"),
                       boots=2, rounds=1, scenarios=["prose-c1"], small=True)
    _, entries = compare_run.run_compare(plan, tmp_path, progress=False)
    # The control boots after the first block: the baseline's first boot has written the reference.
    assert calls == [(0, "a"), (0, "a"), (1, "b"), (2, "fp16"), (3, "b"), (4, "a")]
    assert [(e.index, e.arm) for e in entries if e.burn_in] == [(0, "a")]
    assert [(e.index, e.compiled) for e in entries if e.control] == [(2, True)]
    assert analyze(plan, entries).void is None


def test_caches_that_never_persist_stop_the_redoing_and_the_report_says_so(tmp_path, monkeypatch):
    """Every boot compiles (a compile cache the boot cannot keep): the first is redone once, the redo
    compiles again, and from then on nothing is redone; the control does not claim reused caches."""
    from rig.boot.record import CacheState
    from rig.compare.report import analyze

    calls = []

    def fake_boot(job, setup):
        index, block, arm, burn_in, redo_if_compiled = job.index, job.block, job.arm, job.burn_in, job.redo_if_compiled
        calls.append(index)
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=1,
                         burn_in=burn_in or redo_if_compiled, compile_cache=CacheState(state="cold", log="compiled"),
                         rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": 100.0 + index % 3},
                                                        problems=[])}])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    plan = ComparePlan(recipe="llama8b-h200", arms=[parse_arm("a:X=0"), parse_arm("b:X=0")], control=None, boots=2, rounds=1,
                       scenarios=["prose-c1"], small=True)
    _, entries = compare_run.run_compare(plan, tmp_path, progress=False)
    assert calls == [0, 0, 1, 2, 3]
    state = analyze(plan, entries).boot_state
    assert "compiled again" in state.control and "reused its caches" not in state.control and not state.voiding
    calls.clear()
    compare_run.run_compare(ComparePlan.read(tmp_path), tmp_path, progress=False)
    assert calls == []


@pytest.mark.parametrize("damage", ["truncated", "empty", "wrong schema", "a directory", "a fifo"])
def test_resume_redoes_a_boot_whose_entry_is_damaged_and_loses_nothing(tmp_path, monkeypatch, damage):
    """A machine that lost power mid-write, a full disk, an older rig, a stray directory or FIFO: the
    damaged entry is kept aside (never deleted), exactly that boot is redone as a new attempt, the
    other boots are read back, and the first attempt's runs stay."""
    calls = []

    def fake_boot(job, setup):
        index, block, arm, out = job.index, job.block, job.arm, setup.out
        attempt, runs = attempt_dir(out, index, arm)
        runs.mkdir(parents=True)
        (runs / "kept.txt").write_text("measured")
        calls.append((index, attempt))
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=attempt,
                         rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": 100.0 + index}, problems=[])}])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None, boots=2, rounds=1,
                       scenarios=["prose-c1"], small=True)
    compare_run.run_compare(plan, tmp_path, progress=False)
    entry = tmp_path / "boots" / "02-b.json"
    text = entry.read_text()
    entry.unlink()
    if damage == "truncated":
        entry.write_text(text[: len(text) // 2])
    elif damage == "empty":
        entry.write_text("")
    elif damage == "wrong schema":
        assert f'"schema": {COMPARE_SCHEMA}' in text
        entry.write_text(text.replace(f'"schema": {COMPARE_SCHEMA}', '"schema": 4', 1))
    elif damage == "a directory":
        entry.mkdir()
    else:
        os.mkfifo(entry)
    calls.clear()
    _, entries = compare_run.run_compare(ComparePlan.read(tmp_path), tmp_path, progress=False)
    assert calls == [(2, 2)] and [e.index for e in entries] == [0, 1, 2, 3] and entries[2].attempt == 2
    aside = [p for p in (tmp_path / "boots").iterdir() if ".unreadable-" in p.name]
    assert len(aside) == 1 and aside[0].name.startswith("02-b.json.unreadable-")
    assert (tmp_path / "runs" / "02-b" / "attempt-1" / "kept.txt").read_text() == "measured"


def test_a_damaged_plan_is_one_line_and_the_boots_stay(tmp_path):
    (tmp_path / "boots").mkdir()
    (tmp_path / "boots" / "00-a.json").write_text("{}")
    (tmp_path / "plan.json").write_text(f'{{"schema": {COMPARE_SCHEMA}, "recipe": "tiny-cpu", "arms": [')
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None, boots=2, rounds=1,
                       scenarios=["prose-c1"], small=True)
    from rig.errors import Damaged

    with pytest.raises(Damaged, match="unreadable comparison plan") as caught:
        compare_run.run_compare(plan, tmp_path, progress=False)
    assert "\n" not in str(caught.value) and (tmp_path / "boots" / "00-a.json").exists()


def test_log_normalisation_folds_sglangs_request_ids_and_parent_pids():
    """SGLang: a client closing its streams at a window's end logs the request's
    id, and its shutdown the parent's pid; both put lines in one arm only by chance."""
    rids = {normalize(f"[2026-12-02 18:27:0{k}] Received output for rid='{rid}' but the state was deleted in TokenizerManager.")
            for k, rid in enumerate(("3366cef96d2a40718e18626bc4501672", "36db3783235b40b3a892e92f4804c4d7"))}
    assert rids == {"[<time>] Received output for rid='<id>' but the state was deleted in TokenizerManager."}
    kills = {normalize(f"[2026-12-02 18:27:11] kill_process_tree called: parent_pid={p}, include_parent=True, pid={p}") for p in (2338, 2667)}
    assert len(kills) == 1 and "parent_pid=<pid>" in kills.pop()
    assert normalize("mxfp8 K=576 N=5120 sha 0123456789abcdef") == "mxfp8 K=576 N=5120 sha 0123456789abcdef"  # short hex stays
