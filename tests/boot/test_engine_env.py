"""The native engine's environment (rig/boot/engine_env.py): the adapter overlay whose entry points an
engine in another Python environment finds, the API key outside argv, pinned GPUs, compile caches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rig.boot import engine_env
from rig.boot.health import compile_log_state
from rig.boot.native import NativeDriver
from rig.deploy.recipe import load
from rig.engines import ENGINES
from rig.errors import RigError


def test_the_overlay_carries_the_engines_entry_points_to_another_interpreter(tmp_path):
    overlay = engine_env.adapter_overlay(tmp_path)
    assert engine_env.adapter_overlay(tmp_path) == overlay  # built once per adapter version
    # The lookup vLLM and SGLang do, from a plain interpreter that has only the overlay on its path:
    # a .pth in a PYTHONPATH entry is never processed, an entry point is found.
    probe = ("import importlib.metadata as m; print(sorted(e.value for g in ('vllm.general_plugins', 'sglang.srt.plugins') "
             "for e in m.entry_points(group=g)))")
    result = subprocess.run([sys.executable, "-S", "-c", probe], env={"PYTHONPATH": str(overlay)}, capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "['rig_adapters.runtime:engine_plugin', 'rig_adapters.runtime:engine_plugin']"


def test_api_key_reaches_vllm_outside_argv_and_is_refused_where_it_would_leak():
    env = {"RIG_API_KEY": "sk-unit-planted"}
    assert engine_env.api_key_environment("vllm", env) == {"VLLM_API_KEY": "sk-unit-planted"}
    with pytest.raises(RigError, match="rig will not hand sglang an API key: SGLang logs its server arguments") as refused:
        engine_env.api_key_environment("sglang", env)
    assert "sk-unit" not in str(refused.value)
    with pytest.raises(RigError, match="transformers serve takes no API key"):
        engine_env.api_key_environment("transformers", env)
    assert engine_env.api_key_environment("transformers", {}) == {}


def test_native_vllm_environment_is_exactly_the_recipes(tmp_path, monkeypatch, results_dir):
    """PYTHONPATH = overlay + the recipe's entries (nothing of rig's own), pinned GPUs in PCI order,
    the key under the engine's own name and never as RIG_API_KEY."""
    resolved = load("llama-h200:tp2")
    interpreter = tmp_path / "python3"
    interpreter.write_text("#!/bin/sh\n")
    interpreter.chmod(0o755)
    native = resolved.recipe.native.model_copy(update={"python": str(interpreter)})
    resolved.recipe = resolved.recipe.model_copy(update={"native": native})
    monkeypatch.setenv("PYTHONPATH", "/rig/own/path")
    monkeypatch.setenv("RIG_API_KEY", "sk-native-planted")
    monkeypatch.setenv("RIG_CACHE_DIR", str(tmp_path / "cache"))
    from rig.boot.state import new_boot

    record = new_boot(resolved, "native", {}, 8341)
    env, args = NativeDriver().environment(resolved, {}, record, cold_caches=True)
    entries = env["PYTHONPATH"].split(os.pathsep)
    assert entries[1:] == ["/tmp/site"] and "adapter-overlay" in entries[0]
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["VLLM_API_KEY"] == "sk-native-planted" and "RIG_API_KEY" not in env and args == []
    assert env["RIG_ENGINE"] == "vllm" and env["NCCL_NVLS_ENABLE"] == "0"
    assert env["VLLM_CACHE_ROOT"].startswith(record.boot_dir)  # a cold boot gets caches of its own
    argv = NativeDriver().argv(resolved, "/m", 8341)
    assert argv[:4] == [str(interpreter), "-m", "vllm.entrypoints.cli.main", "serve"] and "--enable-prompt-tokens-details" in argv


def test_a_missing_interpreter_is_one_line(tmp_path, results_dir):
    resolved = load("llama-h200")
    native = resolved.recipe.native.model_copy(update={"python": str(tmp_path / "nope" / "python3")})
    resolved.recipe = resolved.recipe.model_copy(update={"native": native})
    from rig.boot.state import new_boot

    record = new_boot(resolved, "native", {}, 8341)
    with pytest.raises(RigError, match="is not an executable interpreter here"):
        NativeDriver().environment(resolved, {}, record, cold_caches=False)


def test_compile_cache_state_cold_partial_warm(tmp_path):
    vllm = ENGINES["vllm"]
    env = {name: str(tmp_path / name) for name, _ in vllm.compile_caches}
    assert engine_env.cache_state(vllm, env).state == "cold"
    (tmp_path / "VLLM_CACHE_ROOT").mkdir()
    (tmp_path / "VLLM_CACHE_ROOT" / "graph").write_bytes(b"x" * 10)
    state = engine_env.cache_state(vllm, env)
    assert state.state == "partial" and state.dirs["VLLM_CACHE_ROOT"].model_dump() == {"path": env["VLLM_CACHE_ROOT"], "files": 1, "bytes": 10}
    for name, _ in vllm.compile_caches:
        Path(env[name]).mkdir(exist_ok=True)
        (Path(env[name]) / "f").write_text("1")
    assert engine_env.cache_state(vllm, env).state == "warm"
    fresh = engine_env.fresh_caches(vllm, tmp_path / "boot")
    assert engine_env.cache_state(vllm, fresh).state == "cold"


def test_sglang_caches_a_configuration_never_writes_leave_it_warm_and_a_base_holds_its_cache_below(tmp_path):
    """llama8b-sglang-h200 JIT-compiles nothing through FlashInfer or DeepGEMM: with SGLang's, Triton's
    and Inductor's caches filled the boot is warm; FLASHINFER_WORKSPACE_BASE names a base, and the
    cache counted is the one FlashInfer writes below it (flashinfer/jit/env.py), not the whole base."""
    sglang = ENGINES["sglang"]
    env = {name: str(tmp_path / name) for name, _ in sglang.compile_caches}
    assert engine_env.cache_dirs(sglang, env)["FLASHINFER_WORKSPACE_BASE"] == tmp_path / "FLASHINFER_WORKSPACE_BASE" / ".cache" / "flashinfer"
    for name in ("SGLANG_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        Path(env[name]).mkdir()
        (Path(env[name]) / "kernel").write_text("1")
    assert engine_env.cache_state(sglang, env).state == "warm"
    (tmp_path / "TRITON_CACHE_DIR" / "kernel").unlink()
    assert engine_env.cache_state(sglang, env).state == "partial"  # a cache every boot writes still counts
    fresh = engine_env.fresh_caches(sglang, tmp_path / "boot")
    assert engine_env.cache_state(sglang, fresh).state == "cold"


def test_what_a_boot_added_to_its_caches_is_counted_at_stop(tmp_path):
    """"warm" at start says nothing of a cache with one file: the files a boot added are what show
    that it compiled (the H200 compare boot whose Triton cache went 1 -> 263 files)."""
    vllm = ENGINES["vllm"]
    env = {name: str(tmp_path / name) for name, _ in vllm.compile_caches}
    for name in env:
        Path(env[name]).mkdir()
        (Path(env[name]) / "f").write_text("1")
    state = engine_env.cache_state(vllm, env)
    assert state.state == "warm" and engine_env.cache_growth(state) == {}
    triton = Path(env["TRITON_CACHE_DIR"]) / "kernel"
    triton.mkdir()
    for i in range(262):
        (triton / f"{i}.cubin").write_bytes(b"k")
    assert engine_env.cache_growth(state) == {"TRITON_CACHE_DIR": 262}


def test_engine_children_forget_the_key_only_the_api_server_needs(tmp_path):
    """vLLM writes every VLLM_* variable of the process that compiles into its compile cache
    (cache_key_factors.json): its children (EngineCore, workers) must not hold VLLM_API_KEY."""
    script = """
import multiprocessing, os
from rig_adapters.runtime import engine_plugin

def child(queue):
    engine_plugin()
    queue.put(os.environ.get("VLLM_API_KEY"))

if __name__ == "__main__":
    engine_plugin()  # the API server keeps it: its middleware checks requests against it
    print("parent", os.environ.get("VLLM_API_KEY"))
    for method in ("spawn", "fork"):
        context = multiprocessing.get_context(method)
        queue = context.Queue()
        process = context.Process(target=child, args=(queue,))
        process.start()
        print(method, queue.get(timeout=60))
        process.join()
"""
    path = tmp_path / "engine.py"
    path.write_text(script)
    result = subprocess.run([sys.executable, str(path)], env={**os.environ, "VLLM_API_KEY": "sk-child-planted"},
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["parent", "sk-child-planted", "spawn", "None", "fork", "None"]


def test_the_boot_log_says_whether_vllm_reused_its_compilation(tmp_path):
    vllm = ENGINES["vllm"]
    compiled = ("(EngineCore pid=1291) INFO 11-30 13:10:25 [backends.py:393] Compiling a graph for compile range (1, 8192) "
                "takes 8.87 s")  # a line of an H200 boot's log
    reused = "(EngineCore pid=7) INFO [backends.py:293] Directly load the compiled graph(s) for compile range (1, 8192) from the cache"
    assert compile_log_state(vllm, compiled) == "compiled"
    assert compile_log_state(vllm, reused) == "reused"
    assert compile_log_state(vllm, "eager mode: nothing compiled") is None
    assert compile_log_state(ENGINES["transformers"], compiled) is None
    # vLLM's cache root follows XDG_CACHE_HOME
    assert engine_env.cache_dirs(vllm, {"XDG_CACHE_HOME": str(tmp_path)})["VLLM_CACHE_ROOT"] == tmp_path / "vllm"


def test_two_ups_of_one_recipe_cannot_both_claim_it(results_dir):
    """Both pass the liveness check at the same moment; the state file is claimed exclusively, and the
    loser's cleanup never deletes the winner's state."""
    from rig.boot.state import claim, current_boot, forget, new_boot

    resolved = load("tiny-cpu")
    first = new_boot(resolved, "native", {}, 8321)
    with pytest.raises(RigError, match="starting"):  # refused by the live claim before any work
        new_boot(resolved, "native", {}, 8321)
    loser = first.model_copy(update={"boot_id": first.boot_id + "-other"})
    with pytest.raises(RigError, match="another `rig up` of this recipe is starting or up"):
        claim(loser)
    forget(loser)  # the loser cleans up: the winner's state stays
    assert current_boot("tiny-cpu").boot_id == first.boot_id
    forget(first)
    assert current_boot("tiny-cpu") is None


def test_a_name_another_arm_sets_is_not_inherited_from_rigs_environment(monkeypatch, tmp_path):
    """A native server inherits rig's environment: an arm's `KEY` alone (its value from there) would
    reach every arm's boots, and the comparison would compare nothing (a silent A/A)."""
    from rig.boot.native import NativeDriver
    from rig.boot.record import BootRecord
    from rig.deploy.recipe import load

    monkeypatch.setenv("UPSTREAM_SETTING", "value")
    resolved = load("tiny-cpu")
    record = BootRecord(boot_id="b", ref="tiny-cpu", recipe="tiny-cpu", variant=None, driver="native", base_url="http://127.0.0.1:9",
                        boot_dir=str(tmp_path), log_path="", manifest_dir=str(tmp_path / "m"), served_model="m")
    plain, _ = NativeDriver().environment(resolved, {}, record, False)
    other_arms, _ = NativeDriver().environment(resolved, {}, record, False, unset={"UPSTREAM_SETTING"})
    own, _ = NativeDriver().environment(resolved, {"UPSTREAM_SETTING": "value"}, record, False, unset=set())
    assert plain["UPSTREAM_SETTING"] == "value" and "UPSTREAM_SETTING" not in other_arms and own["UPSTREAM_SETTING"] == "value"


def test_a_boot_a_comparison_started_is_named_and_not_to_be_stopped_by_hand(results_dir, monkeypatch):
    """A `rig up` while a comparison's (or a race's) boot of the recipe is up names that comparison
    and says to wait: `rig down`, the advice for a boot of `rig up`, would cut its load mid-round."""
    import types

    from rig.boot import state

    resolved = load("tiny-cpu")
    with state.boots_owned_by("the comparison or race writing results/compare/x (rig, pid 1)"):
        record = state.new_boot(resolved, "native", {}, 8321)
    assert record.owner == "the comparison or race writing results/compare/x (rig, pid 1)"
    state.remember(record.model_copy(update={"status": "healthy", "pid": 1}))
    monkeypatch.setattr(state, "driver_named", lambda name: types.SimpleNamespace(alive=lambda r: None))
    with pytest.raises(RigError) as refused:
        state.refuse_if_up("tiny-cpu")
    assert "for the comparison or race writing results/compare/x" in str(refused.value) and "rig down" in refused.value.fix
    assert "wait until it ends" in refused.value.fix
    assert state._OWNER.get() is None  # the context ended with the block
    state.forget(record)
    plain = state.new_boot(resolved, "native", {}, 8321)
    assert plain.owner is None
    state.forget(plain)
