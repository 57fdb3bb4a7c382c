"""The adapter runtime: gating, ordering, idempotence, arming through the .pth in a fresh
interpreter, refusal, manifests. Engine code is the stand-ins under tests/standins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

from rig_adapters.gates import env_int, gate_is_on
from rig_adapters.registry import BY_NAME, REGISTRY, install_order

STANDINS = REPO / "tests" / "standins"


@pytest.mark.parametrize("value,on", [(None, False), ("", False), ("0", False), ("off", False), (" False ", False),
                                      ("no", False), ("1", True), ("on", True), ("5", True), ("yes", True)])
def test_one_gate_parser(value, on):
    assert gate_is_on(value) is on


def test_malformed_setting_raises():
    with pytest.raises(ValueError, match="DSV41_SHARED_PAD_BUF_ROWS"):
        env_int("DSV41_SHARED_PAD_BUF_ROWS", 256, {"DSV41_SHARED_PAD_BUF_ROWS": "lots"})


def test_registry_rows_are_complete_and_unique():
    assert len(BY_NAME) == len(REGISTRY)
    for spec in REGISTRY:
        assert spec.gate and spec.targets and spec.engines and spec.lifecycle.redundant_when
        module = __import__(spec.module, fromlist=["_"])
        for target in spec.targets:
            assert callable(getattr(module, target.installer)), f"{spec.name}: no {target.installer}"
    gates = [spec.gate for spec in REGISTRY]
    assert len(gates) == len(set(gates))


def test_order_shared_pad_wraps_b12x():
    assert [s.name for s in install_order(["shared_pad_k", "mxfp8_b12x"])] == ["mxfp8_b12x", "shared_pad_k"]
    assert [s.name for s in install_order(["shared_pad_k"])] == ["shared_pad_k"]


def run_engine(script: str, env: dict[str, str], tmp_path: Path, standins: Path = STANDINS) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """A fresh interpreter: the venv's rig_adapters.pth arms adapters exactly as in an engine process."""
    manifest_dir = tmp_path / "manifests"
    clean = {k: v for k, v in os.environ.items() if k not in {s.gate for s in REGISTRY}}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, check=False,
                            env={**clean, "PYTHONPATH": f"{standins}{os.pathsep}{REPO / 'adapter'}",
                                 "RIG_ADAPTER_MANIFEST_DIR": str(manifest_dir), **env})
    manifests = [json.loads(p.read_text()) for p in sorted(manifest_dir.glob("manifest-*.json"))]
    return result, manifests


ARM_SCRIPT = """
import sglang.srt.layers.linear  # a model's import brings it in before any layer is built
import sglang.srt.layers.quantization.fp8 as fp8
import sglang.srt.layers.quantization.fp8_utils as fu
import rig_adapters.runtime as runtime
method = fp8.Fp8LinearMethod()
outer = fu.flashinfer_mxfp8_blockscaled_linear
print("outer", getattr(outer, "__rig_adapter__", None))
print("inner", getattr(getattr(outer, "__wrapped__", None), "__rig_adapter__", None))
print("partial_is_outer", method.linear.func is outer)
print("prepare", getattr(fp8.Fp8LinearMethod._prepare_block_fp8_as_mxfp8, "__rig_adapter__", None))
runtime.arm_from_env(); runtime.ARMER.arm(["mxfp8_b12x", "shared_pad_k"])
print("after_rearm_same", fu.flashinfer_mxfp8_blockscaled_linear is outer)
"""


def test_gates_off_arm_nothing(tmp_path):
    result, manifests = run_engine(ARM_SCRIPT.split("runtime.arm_from_env()")[0], {}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "outer None" in result.stdout and "ARMED" not in result.stderr
    assert manifests == []


def test_pth_arms_in_order_before_the_partial_is_bound(tmp_path):
    result, manifests = run_engine(ARM_SCRIPT, {"RIG_MXFP8_B12X": "1", "DSV41_SHARED_PAD_K": "1"}, tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "outer shared_pad_k" in out and "inner mxfp8_b12x" in out
    assert "partial_is_outer True" in out and "prepare shared_pad_k" in out
    assert "after_rearm_same True" in out
    assert result.stderr.count("mxfp8_b12x ARMED") == 1 and result.stderr.count("shared_pad_k ARMED") == 1
    (manifest,) = manifests
    assert manifest["adapters"]["mxfp8_b12x"]["state"] == "armed"
    assert manifest["adapters"]["shared_pad_k"]["state"] == "armed"
    assert manifest["adapters"]["shared_pad_k"]["gate"] == {"DSV41_SHARED_PAD_K": "1"}


def test_plugin_entry_point_path_is_idempotent_with_the_pth(tmp_path):
    script = """
    from importlib.metadata import entry_points
    for group in ("sglang.srt.plugins", "vllm.general_plugins"):
        (ep,) = [e for e in entry_points(group=group) if e.name == "rig_adapters"]
        ep.load()()
    import sglang.srt.layers.linear
    import sglang.srt.layers.quantization.fp8
    import sglang.srt.layers.quantization.fp8_utils as fu
    print(fu.flashinfer_mxfp8_blockscaled_linear.__wrapped__.__rig_adapter__)
    """
    result, _ = run_engine(script, {"RIG_MXFP8_B12X": "1", "DSV41_SHARED_PAD_K": "1"}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "mxfp8_b12x"
    assert result.stderr.count("shared_pad_k ARMED") == 1


def _copy_standins(tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "standins"
    shutil.copytree(STANDINS, target)
    return target


def test_missing_hook_target_refuses_to_arm(tmp_path):
    standins = _copy_standins(tmp_path)
    fp8 = standins / "sglang/srt/layers/quantization/fp8.py"
    fp8.write_text(fp8.read_text().replace("_prepare_block_fp8_as_mxfp8", "_prepare_something_else"))
    result, manifests = run_engine("import sglang.srt.layers.quantization.fp8", {"DSV41_SHARED_PAD_K": "1"}, tmp_path, standins)
    assert result.returncode == 0
    assert "shared_pad_k REFUSED (refused): hook target sglang.srt.layers.quantization.fp8.Fp8LinearMethod._prepare_block_fp8_as_mxfp8 does not exist" in result.stderr
    assert manifests[0]["adapters"]["shared_pad_k"]["state"] == "refused"
    assert "ARMED" not in result.stderr


def test_moved_signature_refuses_to_arm(tmp_path):
    standins = _copy_standins(tmp_path)
    utils = standins / "sglang/srt/layers/quantization/fp8_utils.py"
    utils.write_text(utils.read_text().replace(', pin_tactic=False', '').replace(', pin_tactic=True', ''))
    result, manifests = run_engine("import sglang.srt.layers.quantization.fp8", {"RIG_MXFP8_B12X": "1"}, tmp_path, standins)
    assert "mxfp8_b12x REFUSED (refused): hook target signature moved" in result.stderr
    assert "lacks parameter(s) pin_tactic" in manifests[0]["adapters"]["mxfp8_b12x"]["reason"]


def test_forked_worker_inherits_and_reports(tmp_path):
    script = """
    import os, sys
    import sglang.srt.layers.quantization.fp8_utils as fu
    pid = os.fork()
    if pid == 0:
        print("child", fu.flashinfer_mxfp8_blockscaled_linear.__rig_adapter__); sys.stdout.flush(); os._exit(0)
    os.waitpid(pid, 0)
    """
    result, manifests = run_engine(script, {"RIG_MXFP8_B12X": "1"}, tmp_path)
    assert "child mxfp8_b12x" in result.stdout
    assert len(manifests) == 2
    assert sorted(m["inherited_from_fork"] for m in manifests) == [False, True]
    assert all(m["adapters"]["mxfp8_b12x"]["state"] == "armed" for m in manifests)


# ---- vLLM targets of the test instruments (stand-ins with vLLM 0.24.0's names and signatures) ----

GEMM_SHAPES_SCRIPT = """
from vllm.model_executor.model_loader.base_loader import BaseModelLoader
model = BaseModelLoader().load_model(None, (5120, 2304, 4))
print("params", sum(1 for _ in model.parameters()))
"""


def test_gemm_shapes_records_each_ranks_parameter_shapes(tmp_path):
    result, manifests = run_engine(GEMM_SHAPES_SCRIPT, {"RIG_GEMM_SHAPES": "1", "RIG_ENGINE": "vllm", "STANDIN_TP_RANK": "2",
                                                        "STANDIN_TP_SIZE": "4"}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "gemm_shapes ARMED" in result.stderr and "gemm_shapes first use: recorded 2 parameter shapes on TP rank 2 of 4" in result.stderr
    entry = manifests[0]["adapters"]["gemm_shapes"]
    assert entry["state"] == "armed" and entry["shapes"]["tp_rank"] == 2 and entry["shapes"]["tp_size"] == 4
    assert entry["shapes"]["parameters"]["layers.0.shared_experts.down_proj.weight"] == [5120, 576]

    from rig.audit.engine_shapes import compare_shapes, recorded_shapes
    from rig.audit.shapes import Gemm
    from rig.errors import RigError

    with pytest.raises(RigError, match=r"ranks \[2\] recorded, \[0, 1, 2, 3\] expected"):
        recorded_shapes(tmp_path / "manifests", 4)  # one rank of four recorded: no evidence about the deployment
    with pytest.raises(RigError, match="recorded rank 2 of 4"):
        recorded_shapes(tmp_path / "manifests", 2)
    for rank in (0, 1, 3):
        run_engine(GEMM_SHAPES_SCRIPT, {"RIG_GEMM_SHAPES": "1", "RIG_ENGINE": "vllm", "STANDIN_TP_RANK": str(rank),
                                        "STANDIN_TP_SIZE": "4"}, tmp_path)
    ranks = recorded_shapes(tmp_path / "manifests", 4)
    rows = compare_shapes([Gemm("shared_expert", "shared_experts.down_proj", 5120, 576),
                           Gemm("shared_expert", "shared_experts.gate_up_proj", 1152, 5120),
                           Gemm("dense_mlp", "mlp.down_proj", 5120, 4608)], ranks)
    assert [r.verdict for r in rows] == ["agrees", "not found", "not found"]
    wrong = compare_shapes([Gemm("shared_expert", "shared_experts.down_proj", 5120, 640)], ranks)
    assert wrong[0].verdict == "DIFFERS" and [list(shape) for shape in wrong[0].engine] == [[5120, 576]]


def test_token_delay_delays_vllm_worker_steps_that_schedule_tokens(tmp_path):
    script = """
import time, types
from vllm.v1.worker.gpu_worker import Worker
worker = Worker()
start = time.perf_counter(); worker.execute_model(types.SimpleNamespace(total_num_scheduled_tokens=3)); busy = time.perf_counter() - start
start = time.perf_counter(); worker.execute_model(types.SimpleNamespace(total_num_scheduled_tokens=0)); idle = time.perf_counter() - start
print(f"busy {busy:.3f} idle {idle:.3f}")
"""
    result, manifests = run_engine(script, {"RIG_TOKEN_DELAY_MS": "50", "RIG_ENGINE": "vllm"}, tmp_path)
    assert result.returncode == 0, result.stderr
    busy, idle = (float(x) for x in result.stdout.split()[1::2])
    assert busy >= 0.05 and idle < 0.02
    assert manifests[0]["adapters"]["token_delay"]["state"] == "armed"
    # Without RIG_ENGINE it cannot tell vLLM's target from transformers': it refuses, loudly.
    result, manifests = run_engine(script, {"RIG_TOKEN_DELAY_MS": "50"}, tmp_path / "unknown")
    assert "token_delay REFUSED (refused): RIG_ENGINE= does not name one of transformers, vllm" in result.stderr


def test_gpu_delay_refuses_without_a_gpu_and_leaves_the_step_alone(tmp_path):
    """gpu_delay adds GPU time; on a machine without a CUDA device it refuses with that reason (the
    boot check then voids the boot) and the worker's step is the engine's own."""
    script = """
import types
from vllm.v1.worker.gpu_worker import Worker
print("wrapped", getattr(Worker.execute_model, "__rig_adapter__", None))
print("steps", Worker().execute_model(types.SimpleNamespace(total_num_scheduled_tokens=3)))
"""
    result, manifests = run_engine(script, {"RIG_GPU_DELAY_US": "44", "RIG_ENGINE": "vllm"}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "wrapped None" in result.stdout and "steps 3" in result.stdout
    assert "gpu_delay REFUSED (refused): no CUDA device" in result.stderr
    entry = manifests[0]["adapters"]["gpu_delay"]
    assert entry["state"] == "refused" and "needs a GPU" in entry["reason"]
    result, manifests = run_engine(script, {"RIG_GPU_DELAY_US": "-3", "RIG_ENGINE": "vllm"}, tmp_path / "negative")
    assert "gpu_delay REFUSED (refused): RIG_GPU_DELAY_US must be a number in (0, 1000000] (microseconds of spin per step)" in result.stderr


def test_gpu_delay_reads_its_added_time_from_step_periods():
    """added_per_step on synthetic GPU timestamps: blocks of steps alternate with and without the
    spin; only periods between two steps of one kind count, by median, so prefill steps and idle gaps
    between requests (outliers in both kinds) move nothing, and block transitions are left out."""
    from rig_adapters.adapters.gpu_delay import added_per_step

    marks, now = [], 0.0
    for step in range(256):
        spun = (step // 32) % 2 == 0
        marks.append((spun, now))
        period = 4.452 if spun else 4.400  # ms
        if step % 57 == 0:
            period += 3.0  # a prefill step or the gap before the next request
        now += period
    added, with_spin, without = added_per_step(marks)
    assert added == pytest.approx(52.0, abs=1e-6)
    assert with_spin == without == 4 * 31 and with_spin + without == 255 - 7  # 7 transitions, the last mark ends nothing
    assert added_per_step([(True, 0.0), (False, 4.4)]) is None
