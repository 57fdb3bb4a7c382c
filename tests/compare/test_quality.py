"""Quality beside speed (rig/compare/quality.py): the drift verdict's error rate by simulation, the
scoring protocol against real HTTP responses (the timed server's toy model in vLLM's format,
with and without a numerics change), divergence, coherence and the report line."""

from __future__ import annotations

import math
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
from conftest import free_port

from rig.compare.arms import Arm
from rig.compare.coherence import repetition, scripts_of
from rig.compare.model import BootEntry, BootQuality, ComparePlan, Generation, Score
from rig.compare.quality import _control_drift, _kl_shared, analyze_quality, drift, drift_verdict, first_divergence, quality_line
from rig.compare.scoring import Probe, collect
from rig.compare.stats import holm

PROBES = [Probe("a", "The harbour at dawn"), Probe("b", "def fib(n):"), Probe("c", "Zero-padding K to 640")]


def _score(values: np.ndarray) -> BootQuality:
    """A boot whose reference scores are `values` (probe x position); top-1 = the scored token."""
    quality = BootQuality(scoring="vllm-prompt-logprobs")
    for index, row in enumerate(values):
        quality.scores[f"p{index}"] = Score(logprobs=[float(v) for v in row], top=[{1: float(v), 2: float(v) - 1.0} for v in row],
                                            sequence=f"seq{index}")
    return quality


NOISES = {
    # every boot its own small nondeterminism around the same truth
    "iid": lambda rng, shape: rng.normal(0, 0.004, shape),
    # the noise's scale differs from boot to boot (a boot that landed on other kernels)
    "heterogeneous": lambda rng, shape: rng.normal(0, rng.uniform(0.001, 0.02), shape),
    # a few discrete numerics configurations, one drawn per boot (autotuning picked one of three)
    "discrete": lambda rng, shape: CONFIGS[rng.integers(0, len(CONFIGS))],
}
CONFIGS = [np.random.default_rng(seed).normal(0, 0.01, (6, 12)) for seed in range(3)]


@pytest.mark.parametrize("noise", sorted(NOISES))
@pytest.mark.slow
def test_drift_verdict_holds_its_5_percent_with_nothing_changed(noise):
    """Identical arms: baseline and arm boots drawn alike. At 6 pairs (the fewest at which the exact
    test can reach 5%) the share of "outputs moved" stays within 5% for every kind of noise."""
    rng = np.random.default_rng(11)
    truth = rng.normal(-2.0, 1.0, size=(6, 12))
    draw = NOISES[noise]
    trials, moved = 600, 0
    for _ in range(trials):
        baseline = {j: _score(truth + draw(rng, truth.shape)) for j in range(6)}
        arm = {j: _score(truth + draw(rng, truth.shape)) for j in range(6)}
        moved += drift_verdict(baseline, arm).verdict == "outputs moved"
    rate = moved / trials
    print(f"{noise}: false 'moved' {100 * rate:.1f}% of {trials} at 6 pairs")
    assert rate <= 0.05 + 2.5 * math.sqrt(0.05 * 0.95 / trials)


def test_drift_verdict_finds_a_real_change_says_when_it_cannot_and_is_exact_on_a_reproducible_engine():
    rng = np.random.default_rng(3)
    truth = rng.normal(-2.0, 1.0, size=(6, 12))
    noisy = {j: _score(truth + rng.normal(0, 0.002, truth.shape)) for j in range(6)}
    shifted = {j: _score(truth + 0.02 + rng.normal(0, 0.002, truth.shape)) for j in range(6)}
    result = drift_verdict(noisy, shifted)
    assert result.verdict == "outputs moved" and result.p <= 0.05, result
    assert result.arm.mean_abs_dlogprob == pytest.approx(0.02, rel=0.25)
    two = drift_verdict({j: noisy[j] for j in range(2)}, {j: shifted[j] for j in range(2)})
    assert two.verdict.startswith("not enough boots: 6 pairs"), two
    # a bitwise-reproducible engine (vLLM on the H200s): every baseline boot identical, exact verdicts
    same = {j: _score(truth) for j in range(2)}
    assert drift_verdict(same, {j: _score(truth) for j in range(2)}).verdict == "bitwise identical"
    assert drift_verdict(same, {j: _score(truth + 1e-4) for j in range(2)}).verdict == "outputs moved"
    assert drift_verdict({0: _score(truth)}, {0: _score(truth)}).verdict.startswith("no noise floor")
    # a control (one boot) on a baseline that is not bitwise: no test, its drift set beside the widest pair's
    base4 = {j: _score(truth + rng.normal(0, 0.002, truth.shape)) for j in range(4)}
    control = _control_drift(base4, _score(truth + 0.05 + rng.normal(0, 0.002, truth.shape)))
    assert control.verdict == "outputs moved beyond every baseline pair" and "descriptive" in control.method, control
    assert _control_drift(base4, _score(truth + 0.0005)).verdict == "within the baseline's boot-to-boot drift"
    assert _control_drift(same, _score(truth + 1e-4)).verdict == "outputs moved"  # bitwise baseline: exact
    # scores of a different token sequence are never compared
    other = _score(truth)
    for score in other.scores.values():
        score.sequence = "another"
    assert drift_verdict(same, {0: other, 1: other}).verdict == "not measured"


def test_coherence_flags_nothing_with_nothing_changed_and_a_real_change_at_8_pairs():
    from rig.compare.coherence import BootCoherence, coherence_report

    rng = np.random.default_rng(5)

    def boot(share: float) -> BootCoherence:
        n = 100
        return BootCoherence(outputs=n, with_text=n, foreign_script_share=rng.binomial(n, share) / n,
                             empty_share=rng.binomial(n, 0.01) / n, cut_share=rng.binomial(n, 0.02) / n,
                             repetition=float(rng.normal(0.1, 0.01)))

    trials, flagged = 300, 0
    for _ in range(trials):
        report = coherence_report({"a": {j: boot(0.02) for j in range(8)}, "b": {j: boot(0.02) for j in range(8)}}, "a")
        flagged += bool(report["b"].changed)
    print(f"coherence: false 'changed' {100 * flagged / trials:.1f}% of {trials} at 8 pairs")
    assert flagged / trials <= 0.05 + 2.5 * math.sqrt(0.05 * 0.95 / trials)
    report = coherence_report({"a": {j: boot(0.0) for j in range(8)}, "b": {j: boot(0.4) for j in range(8)}}, "a")
    assert "foreign_script_share" in report["b"].changed
    few = coherence_report({"a": {j: boot(0.0) for j in range(2)}, "b": {j: boot(0.9) for j in range(2)}}, "a")
    assert few["b"].changed == [] and few["b"].needs_pairs == 8


def test_kl_over_shared_tokens_and_other_bucket():
    p = {1: math.log(0.5), 2: math.log(0.3), 3: math.log(0.1)}
    assert _kl_shared(p, p) == pytest.approx(0.0, abs=1e-12)
    q = {1: math.log(0.4), 2: math.log(0.4), 4: math.log(0.1)}
    # buckets: token 1, token 2, other (p 0.2, q 0.2)
    expected = 0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.4)
    assert _kl_shared(p, q) == pytest.approx(expected)


def test_first_divergence_and_near_ties():
    ref = Generation(prompt_ids=[1], output_ids=[5, 6, 7, 8], text="x",
                     top=[{5: -0.1, 9: -2}, {6: -0.1, 3: -2}, {7: -0.5, 4: -0.6}, {8: -0.1}])
    same = Generation(prompt_ids=[1], output_ids=[5, 6, 7, 8], text="x")
    assert first_divergence(ref, same).model_dump() == {"index": None, "near_tie": None}
    late = Generation(prompt_ids=[1], output_ids=[5, 6, 4, 2], text="y", top=[{5: -0.1}, {6: -0.1}, {4: -0.55, 7: -0.6}, {2: -0.1}])
    assert first_divergence(ref, late).model_dump() == {"index": 2, "near_tie": True}
    early = Generation(prompt_ids=[1], output_ids=[9, 6, 7, 8], text="z", top=[{9: -0.1, 1: -3}, {}, {}, {}])
    assert first_divergence(ref, early).model_dump() == {"index": 0, "near_tie": False}
    text_only = first_divergence(Generation(prompt_ids=None, output_ids=None, text="abcd"),
                                 Generation(prompt_ids=None, output_ids=None, text="abXd"), encode=lambda t: list(t.encode()))
    assert text_only.model_dump() == {"index": 2, "near_tie": None}


def test_holm_scripts_repetition():
    assert holm({"a": 0.001, "b": 0.02, "c": 0.04}) == {"a": True, "b": True, "c": True}
    assert holm({"a": 0.001, "b": 0.03, "c": 0.04}) == {"a": True, "b": False, "c": False}
    assert scripts_of("Hello, 世界! Привет 123") == {"LATIN", "CJK", "CYRILLIC"}
    assert repetition("a b c d a b c d a b c d") == pytest.approx(1 - 4 / 9)
    assert repetition("too short") is None


# ---- the protocol against real HTTP responses ---------------------------------------------------

@pytest.fixture
def toy_servers():
    """Two unperturbed toy servers ("boots" of the baseline) and two with a numerics change."""
    started = []

    def start(perturb: float) -> str:
        port = free_port()
        process = subprocess.Popen([sys.executable, "-m", "rig.testing.timed_server", "--port", str(port), "--ttft", "0.01",
                                    "--itl", "0.001", "--perturb", str(perturb)])
        started.append(process)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(url + "/health", timeout=1)  # noqa: S310
                return url
            except OSError:
                time.sleep(0.1)
        raise AssertionError("toy server did not start")

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=10)


def test_scoring_protocol_finds_a_numerics_change_and_not_identical_arms(toy_servers):
    base = [toy_servers(0.0), toy_servers(0.0)]
    same = [toy_servers(0.0), toy_servers(0.0)]
    nudged = [toy_servers(0.05), toy_servers(0.05)]
    reference = collect(base[0], "toy", "vllm", PROBES, 24, None)
    assert set(reference.scores) == {"a", "b", "c"} and all(len(g.output_ids) == 24 for g in reference.generations.values())
    refs = reference.generations
    # an arm boot that comes first (no reference yet) does not define one: it only generates
    early = collect(same[0], "toy", "vllm", PROBES, 24, None, defines_reference=False)
    assert early.scores == {} and "no reference continuation yet" in early.note
    boots = {"base": {0: reference, 1: collect(base[1], "toy", "vllm", PROBES, 24, refs)},
             "same": {j: collect(url, "toy", "vllm", PROBES, 24, refs) for j, url in enumerate(same)},
             "nudged": {j: collect(url, "toy", "vllm", PROBES, 24, refs) for j, url in enumerate(nudged)}}
    assert drift(boots["base"][0], boots["base"][1]).mean_abs_dlogprob == 0.0
    assert drift_verdict(boots["base"], boots["same"]).verdict == "bitwise identical"
    moved = drift_verdict(boots["base"], boots["nudged"])
    assert moved.verdict == "outputs moved" and 0 < moved.arm.mean_abs_dlogprob < 0.2
    assert moved.arm.kl > 0 and moved.noise.mean_abs_dlogprob == 0.0
    assert moved.arm.decode_mean_abs_dlogprob is not None and moved.method.startswith("exact: the baseline reproduces")

    # the same boots through the comparison's analysis and its report line
    plan = ComparePlan(recipe="tiny-cpu", arms=[Arm(name="base"), Arm(name="same"), Arm(name="nudged")], control=None, boots=2, rounds=1,
                       scenarios=["prose-c1"], small=True)
    entries = [BootEntry(index=i, block=j, arm=arm, spec=arm, control=False, attempt=1, quality=q)
               for i, (arm, j, q) in enumerate((arm, j, q) for arm, per in boots.items() for j, q in per.items())]
    quality = analyze_quality(plan, entries)
    assert quality.drift["same"].verdict == "bitwise identical"
    assert quality.drift["nudged"].verdict == "outputs moved"
    assert quality.divergence["same"].diverged == 0
    assert "outputs moved: prefill mean |dlogprob|" in quality_line(quality, "nudged")
    assert "bitwise identical" in quality_line(quality, "same")

    # a control (one boot of a numerics change, after the first block) gets the arms' drift figures
    # and its first divergence, outside their family: the other verdicts do not change
    control = collect(toy_servers(0.05), "toy", "vllm", PROBES, 24, refs)
    entries.append(BootEntry(index=len(entries), block=0, arm="ctl", spec="ctl", control=True, attempt=1, quality=control))
    quality = analyze_quality(plan.model_copy(update={"control": Arm(name="ctl")}), entries)
    assert quality.drift["ctl"].verdict == "outputs moved" and quality.drift["ctl"].boots == 1
    assert quality.drift["nudged"].verdict == "outputs moved" and quality.drift["same"].verdict == "bitwise identical"
    assert "outputs moved: prefill mean |dlogprob|" in quality_line(quality, "ctl") and quality.divergence["ctl"].diverged > 0


def test_sglang_scoring_protocol_finds_a_numerics_change_and_not_identical_arms(toy_servers):
    """SGLang's /generate (input_token_logprobs from logprob_start_len, as sglang 0.5.17 aligns them)
    scores the reference continuation exactly as vLLM's prompt_logprobs does on the same toy model."""
    base = [toy_servers(0.0), toy_servers(0.0)]
    nudged = toy_servers(0.05)
    reference = collect(base[0], "toy", "sglang", PROBES, 24, None)
    assert reference.scoring == "sglang-input-logprobs" and set(reference.scores) == {"a", "b", "c"}
    texts = {probe.name: probe.text for probe in PROBES}
    for name, generation in reference.generations.items():
        assert generation.prompt_ids == list(texts[name].encode()) and len(generation.output_ids) == 24
        # the continuation is greedy, so each scored token is its position's top-1
        score = reference.scores[name]
        assert len(score.logprobs) == 24 and all(max(top, key=top.get) == token for top, token in zip(score.top, generation.output_ids))
    vllm_reference = collect(base[1], "toy", "vllm", PROBES, 24, None)
    for name, generation in reference.generations.items():  # the same numbers through the other protocol
        assert generation.output_ids == vllm_reference.generations[name].output_ids
        assert reference.scores[name].logprobs == pytest.approx(vllm_reference.scores[name].logprobs)
    refs = reference.generations
    same = collect(base[1], "toy", "sglang", PROBES, 24, refs)
    moved = collect(nudged, "toy", "sglang", PROBES, 24, refs)
    assert drift(reference, same).mean_abs_dlogprob == 0.0
    figures = drift(reference, moved)
    assert 0 < figures.mean_abs_dlogprob < 0.2 and figures.kl > 0


def test_sglang_prompt_ids_are_the_ones_sent_where_sglang_echoes_them_as_zero(toy_servers):
    """SGLang echoes the vocabulary's last id as 0 (the toy's '~', 126, as logprob_result_processor.py
    clips it): the prompt is tokenized by the server's own /v1/tokenize and sent as ids, so the
    recorded prompt is what was generated from, and scoring accepts the echo's 0 for it."""
    server = toy_servers(0.0)
    probes = [Probe("tilde", "paths like ~/.cache and ~user")]
    reference = collect(server, "toy", "sglang", probes, 12, None)
    generation = reference.generations["tilde"]
    assert generation.prompt_ids == list(probes[0].text.encode()) and 126 in generation.prompt_ids
    assert len(reference.scores["tilde"].logprobs) == 12


@pytest.mark.parametrize(("config", "refused"), [
    ({}, "missing"),
    ({"model_max_length": 1000000000000000019884624838656}, "no integer of 64 bits"),  # what many checkpoints carry
    ({"model_max_length": 2**64}, "no integer of 64 bits"),
    ({"model_max_length": 2**64 - 1}, None),  # orjson writes unsigned 64-bit integers
    ({"model_max_length": 1e30}, "no integer of 64 bits"),  # TokenizeResponse.max_model_len is an int
    ({"model_max_length": 2048.5}, "no integer of 64 bits"),
    ({"model_max_length": "4096"}, "no integer of 64 bits"),
    ({"model_max_length": True}, "no integer of 64 bits"),
    ({"model_max_length": 4096.0}, None),
    ({"model_max_length": 131072}, None),
])
def test_an_sglang_checkpoint_whose_tokenize_would_fail_is_refused_before_any_boot(tmp_path, config, refused):
    """SGLang 0.5.17's /v1/tokenize answers 500 for a tokenizer without a model_max_length that JSON can
    carry (every boot of a comparison would be voided); rig names the file, field and fix first."""
    import json

    from rig.compare.scoring import check_scoring_tokenizer
    from rig.errors import RigError

    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    def unasked() -> str:
        raise AssertionError("vLLM's comparison resolved the model directory")

    check_scoring_tokenizer("vllm", unasked)  # vLLM scores without /v1/tokenize, and its model dir is not looked up
    check_scoring_tokenizer("sglang", lambda: None)  # a checkpoint this host cannot read: the boots say so
    if refused is None:
        check_scoring_tokenizer("sglang", lambda: str(tmp_path))
        return
    with pytest.raises(RigError) as error:
        check_scoring_tokenizer("sglang", lambda: str(tmp_path))
    assert error.value.field == "model_max_length" and error.value.where == str(tmp_path / "tokenizer_config.json")
    assert refused in error.value.problem and "max_position_embeddings" in error.value.fix


def test_an_sglang_tokenizer_directory_without_tokenizer_config_is_refused(tmp_path):
    """tokenizer.json alone: transformers reads model_max_length as int(1e30), and /v1/tokenize answers 500.
    A directory this host does not have is left to the boots."""
    from rig.compare.scoring import check_scoring_tokenizer
    from rig.errors import RigError

    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(RigError) as error:
        check_scoring_tokenizer("sglang", lambda: str(tmp_path))
    assert error.value.field == "model_max_length" and "no tokenizer_config.json" in error.value.problem
    check_scoring_tokenizer("sglang", lambda: str(tmp_path / "absent"))


def test_generated_tokenizers_carry_their_context_as_model_max_length():
    """rig's generated checkpoints pass the check: their tokenizer_config.json holds the preset's context."""
    import json

    from rig import paths
    from rig.compare.scoring import check_scoring_tokenizer
    from rig.tinymodel import ensure_tiny_model, presets

    directory = ensure_tiny_model(paths.cache_dir() / "models")
    config = json.loads((directory / "tokenizer_config.json").read_text())
    assert config["model_max_length"] == presets()["tiny-llama"]["config"]["max_position_embeddings"]
    check_scoring_tokenizer("sglang", lambda: str(directory))


def test_a_comparison_whose_every_boot_voided_does_not_say_the_engine_returns_no_logprobs():
    """When every SGLang boot is voided at its quality probes (/v1/tokenize answered 500), the report
    says no boot was scored, not "the engine returns no logprobs" of an engine that does."""
    plan = ComparePlan(recipe="tiny-cpu", arms=[Arm(name="off"), Arm(name="on")], control=None, boots=1, rounds=1,
                       scenarios=["prose-c1"], small=True)
    voided = [BootEntry(index=i, block=0, arm=arm, spec=arm, control=False, attempt=1, voided=True, problems=["HTTPError: 500"])
              for i, arm in enumerate(("off", "on"))]
    quality = analyze_quality(plan, voided)
    assert quality.scored_boots == 0
    assert "no measured boot returned its quality probes" in quality_line(quality, "on")
    assert "returns no logprobs" not in quality_line(quality, "on")
    unscored = BootQuality(scoring=None, note="transformers returns no logprobs")  # an engine that really has none
    measured = [entry.model_copy(update={"voided": False, "problems": [], "quality": unscored}) for entry in voided]
    quality = analyze_quality(plan, measured)
    assert quality.scored_boots == 2 and "the engine returns no logprobs" in quality_line(quality, "on")
