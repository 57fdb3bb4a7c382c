"""The native engine's environment (rig/boot/engine_env.py): the adapter overlay whose entry points an
engine in another Python environment finds, the API key outside argv, pinned GPUs, compile caches."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rig.boot import engine_env
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
    assert result.stdout.strip() == "['rig_adapters.runtime:arm_from_env', 'rig_adapters.runtime:arm_from_env']"


def test_api_key_reaches_each_engine_its_own_non_argv_way(tmp_path):
    env = {"RIG_API_KEY": "sk-unit-planted"}
    assert engine_env.api_key_environment("vllm", env, tmp_path / "v") == ({"VLLM_API_KEY": "sk-unit-planted"}, [])
    changes, args = engine_env.api_key_environment("sglang", env, tmp_path / "s")
    assert changes == {} and args[0] == "--config" and "sk-unit" not in " ".join(args)
    path = Path(args[1])
    assert path.read_text() == 'api-key: "sk-unit-planted"\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with pytest.raises(RigError, match="transformers cannot be protected by an API key"):
        engine_env.api_key_environment("transformers", env, tmp_path / "t")
    assert engine_env.api_key_environment("transformers", {}, tmp_path / "t") == ({}, [])


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
    monkeypatch.setattr("rig.boot.native.CACHE_DIR", tmp_path / "cache")
    from rig.boot.base import new_boot

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
    from rig.boot.base import new_boot

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
