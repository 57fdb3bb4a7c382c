"""Real vLLM and SGLang on real GPUs, through rig's own commands: `rig up` (the native driver, the
recipe's Python environment, adapters through the engine's plugin entry point), `rig loadtest`,
`rig down` with nothing left running. Runs where the recipe's engine environment and enough GPUs exist (an
air-gapped H200 host with Python 3.12 and torch 2.11, the engines installed offline); everywhere else each
test skips with one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, rig_cli

from rig.boot.process import group_members
from rig.deploy.recipe import parse_recipe
from rig.engines import ENGINES

pytestmark = [pytest.mark.gpu, pytest.mark.e2e]
PLANTED = "sk-gpu-test-planted-4f1c"


def gpu_count() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    result = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True, check=False)
    return len(result.stdout.split()) if result.returncode == 0 else 0


def engine_missing(recipe_name: str) -> str | None:
    """Why the recipe's engine cannot run here, or None."""
    recipe = parse_recipe(REPO / "recipes" / f"{recipe_name}.yaml")
    native, package = recipe.native, ENGINES[recipe.engine.name].package
    interpreter = native.interpreter()
    if not os.access(interpreter, os.X_OK):
        return f"no engine interpreter {interpreter}"
    probe = subprocess.run([interpreter, "-c", f"import {package}"], env={**os.environ, "PYTHONPATH": os.pathsep.join(native.pythonpath)},
                           capture_output=True, text=True, check=False)
    return None if probe.returncode == 0 else f"{package} does not import from {interpreter} with {native.pythonpath}"


def compute_apps() -> list[str]:
    """Processes holding a GPU, but for this one (the kernel tests beside these hold a CUDA context)."""
    result = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True, text=True, check=False)
    return [pid for pid in result.stdout.split() if pid != str(os.getpid())]


# TP1 runs a decode and a long-context scenario by default; RIG_GPU_EVERY_SCENARIO=1 runs every
# scenario (full sizes, short windows: about 6 min).
EVERY_SCENARIO = ["prose-c1", "code-c1", "decode-ctx0", "decode-ctx3k", "prefill-8k", "c3000"]
TP1_SCENARIOS = EVERY_SCENARIO if os.environ.get("RIG_GPU_EVERY_SCENARIO") == "1" else ["prose-c1", "decode-ctx3k"]


@pytest.mark.parametrize(("recipe", "variant", "gpus", "keyed", "scenarios"), [
    ("llama-h200", "tp1", 1, False, TP1_SCENARIOS),
    ("llama-h200", "tp2", 2, True, ["prose-c1"]),
    ("qwen2moe-h200", "ep2", 2, False, ["prose-c1"]),
    # vLLM and SGLang 0.5.17 on the same 8B widths, by the same
    # commands (the engines' table): c=1 decode, a long context, a prefill and
    # a loaded decode (decode-c32: 32 users, each one's decode speed, which the client bounds within 1%;
    # chat-sharegpt's 16-user median latency is not: 1.1% on an H200).
    ("llama8b-h200", "tp1", 1, False, ["prose-c1", "decode-ctx3k", "prefill-8k", "decode-c32"]),
    ("llama8b-sglang-h200", "tp1", 1, False, ["prose-c1", "decode-ctx3k", "prefill-8k", "decode-c32"]),
])
def test_rig_up_loadtest_down_on_a_real_engine(tmp_path, recipe, variant, gpus, keyed, scenarios):
    if gpu_count() < gpus:
        pytest.skip(f"needs {gpus} CUDA GPU(s), found {gpu_count()}")
    missing = engine_missing(recipe)
    if missing:
        pytest.skip(missing)
    if recipe == "qwen2moe-h200":
        site = parse_recipe(REPO / "recipes" / f"{recipe}.yaml").native.pythonpath[0]
        if not list(Path(site).glob("vllm/_moe_C*.so")):
            pytest.skip("vLLM's MoE kernels are not installed (the offline vLLM bundle's MoE part)")
    ref = f"{recipe}:{variant}"
    env = {"RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state")}
    if keyed:
        env["RIG_API_KEY"] = PLANTED
    up = rig_cli("up", ref, env=env, timeout=900)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        record = json.loads(next((tmp_path / "state").glob("*.json")).read_text())
        if keyed:  # the key is really in force: a request without it is refused
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(record["base_url"] + "/v1/models", timeout=10)  # noqa: S310
            assert refused.value.code == 401
        # rig status probes the live server's health endpoint; rig logs prints the boot's log
        status = rig_cli("status", env=env, timeout=60)
        assert status.returncode == 0 and f" up  boot {record['boot_id']}" in status.stdout, status.stdout + status.stderr
        logs = rig_cli("logs", ref, env=env, timeout=60)
        whole_lines = logs.stdout[:logs.stdout.rfind("\n") + 1]  # the server may write on meanwhile, even mid-character
        assert logs.returncode == 0 and whole_lines.strip(), logs.stderr
        assert Path(record["log_path"]).read_text(errors="replace").startswith(whole_lines)
        chosen = [arg for name in scenarios for arg in ("--scenario", name)]
        load = rig_cli("loadtest", ref, *chosen, "--full", "--duration", "8", env=env, timeout=1200)
        print(load.stdout[-6000:])
        assert load.returncode in (0, 4), load.stdout + load.stderr
    finally:
        down = rig_cli("down", ref, env=env, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    summaries = sorted((tmp_path / "results" / recipe).glob("*/*/summary.json"))
    measured = {p.parent.name: json.loads(p.read_text()) for p in summaries if not p.parent.name.startswith("warmup-")}
    warmups = [p for p in summaries if p.parent.name.startswith("warmup-")]
    assert sorted(measured) == sorted(scenarios) and len(warmups) == len(scenarios), summaries
    export = os.environ.get("RIG_GPU_TEST_RESULTS")  # keep the raw results for a validation claim
    if export:
        shutil.copytree(tmp_path / "results", Path(export) / f"{recipe}-{variant}", dirs_exist_ok=True)
    if load.returncode == 4:  # a run that is not usable (an INVALID client, no steady state) says why
        unusable = [s for s in measured.values() if not s["client"]["valid"] or not s["metrics"]["window"].get("steady")]
        assert unusable and all(s["client"]["reasons"] or s["metrics"]["window"].get("opened_by") for s in unusable), measured
    summary = measured["prose-c1"]
    metrics = summary["metrics"]
    assert metrics["requests"]["error_rate"] == 0 and metrics["user_decode_tok_s"]["token_weighted"] > 100, metrics
    assert not [e for e in metrics["requests"]["errors"] if e.startswith("http_")], metrics["requests"]
    assert summary["observations"]["server"]["metrics"]["running_requests"]["max"] >= 1
    gpu = summary["observations"]["gpu"]
    assert gpu["j_per_output_token"] > 0 and len(gpu["serving_gpus"]) == gpus, gpu
    boot = json.loads(Path(record["boot_dir"], "boot.json").read_text())
    assert boot["status"] == "stopped" and boot["compile_cache"].get("state") in ("cold", "partial", "warm")
    assert boot["fingerprint"]["gpu_count"] >= gpus
    # nothing left running: no process of the server's group runs (exited ones may wait for a slow
    # reaper) and no process holds a GPU
    assert group_members(record["pid"]) == []
    assert compute_apps() == []
    if keyed:  # in no file: results, state, and what the engine writes itself (vLLM's compile cache holds
        # every VLLM_* variable of the process that compiled; shared memory)
        from rig.boot.engine_env import cache_dirs

        roots = [tmp_path, *cache_dirs(ENGINES[parse_recipe(REPO / "recipes" / f"{recipe}.yaml").engine.name],
                                       dict(os.environ)).values(), Path("/dev/shm")]
        leaked = [str(p) for root in roots if root.exists() for p in root.rglob("*")
                  if p.is_file() and not p.is_symlink() and PLANTED.encode() in p.read_bytes()]
        assert leaked == []
