"""A recipe's compile caches carried to a fresh host in a pack: packed from where its boots compile
on one host, merged into where they compile on the next, never replacing a file the host holds;
a caches pack is never taken for results, and an engine without compile caches is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from rig.errors import Invalid, NotFound
from rig.hosts.pack import pack, pack_caches, unpack, unpack_caches

MIB = 1 << 20
VLLM_CACHES = ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")


def _host(root: Path) -> dict[str, str]:
    """A host whose vLLM, Triton and Inductor caches live under `root`."""
    return {name: str(root / name.lower()) for name in VLLM_CACHES} | {"HOME": str(root / "home")}


def _filled(environ: dict[str, str]) -> dict[str, bytes]:
    files = {
        "VLLM_CACHE_ROOT/torch_compile_cache/816012a40c/rank_0_0/backbone/computation_graph.py": b"graph",
        "VLLM_CACHE_ROOT/torch_compile_cache/816012a40c/rank_0_0/backbone/cache_key_factors.json": b"{}",
        "TRITON_CACHE_DIR/ABCD/kernel.cubin": bytes(range(256)) * 64,
    }
    for name, data in files.items():
        variable, _, rest = name.partition("/")
        path = Path(environ[variable]) / rest
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def _read(environ: dict[str, str], name: str) -> bytes:
    variable, _, rest = name.partition("/")
    return (Path(environ[variable]) / rest).read_bytes()


def test_caches_packed_on_one_host_are_merged_into_a_fresh_one(tmp_path):
    first, fresh = _host(tmp_path / "first"), _host(tmp_path / "fresh")
    files = _filled(first)
    link = Path(first["TRITON_CACHE_DIR"]) / "elsewhere"
    link.symlink_to("/etc/passwd")
    manifest = pack_caches("llama8b-h200", first, tmp_path / "out", MIB)
    assert manifest["recipe"] == "llama8b-h200"
    assert set(manifest["caches"]) == {"VLLM_CACHE_ROOT", "TRITON_CACHE_DIR"}  # Inductor's held nothing here

    held = Path(fresh["VLLM_CACHE_ROOT"]) / "torch_compile_cache/816012a40c/rank_0_0/backbone/cache_key_factors.json"
    held.parent.mkdir(parents=True)
    held.write_bytes(b"this host's own")
    _, added, kept = unpack_caches(tmp_path / "out", fresh)
    assert (added, kept) == (2, 1)
    assert held.read_bytes() == b"this host's own"
    for name, data in files.items():
        if not name.endswith("cache_key_factors.json"):
            assert _read(fresh, name) == data
    assert not (Path(fresh["TRITON_CACHE_DIR"]) / "elsewhere").exists()
    assert not list(Path(fresh["VLLM_CACHE_ROOT"]).rglob(".*"))  # no staged file left behind


def test_the_recipes_own_environment_names_the_cache_it_compiles_into(tmp_path):
    environ = _host(tmp_path)
    unset = {name: value for name, value in environ.items() if name != "VLLM_CACHE_ROOT"}
    unset["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    (tmp_path / "xdg" / "vllm" / "x").mkdir(parents=True)
    (tmp_path / "xdg" / "vllm" / "x" / "f").write_text("compiled")
    manifest = pack_caches("llama8b-h200", unset, tmp_path / "out", MIB)
    assert manifest["caches"] == {"VLLM_CACHE_ROOT": str(tmp_path / "xdg" / "vllm")}


def test_a_caches_pack_is_never_unpacked_as_results_nor_results_as_caches(tmp_path):
    environ = _host(tmp_path / "host")
    _filled(environ)
    pack_caches("llama8b-h200", environ, tmp_path / "caches", MIB)
    with pytest.raises(Invalid, match="compile caches"):
        unpack(tmp_path / "caches", tmp_path / "results")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "a.json").write_text("{}")
    pack(tmp_path / "runs", tmp_path / "results-pack", MIB)
    with pytest.raises(Invalid, match="not a caches pack"):
        unpack_caches(tmp_path / "results-pack", environ)


def test_an_engine_without_compile_caches_and_a_host_without_any_are_refused(tmp_path):
    with pytest.raises(Invalid, match="keeps no compile caches"):
        pack_caches("tiny-cpu", _host(tmp_path), tmp_path / "out", MIB)
    with pytest.raises(NotFound, match="boot the recipe here first"):
        pack_caches("llama8b-h200", _host(tmp_path), tmp_path / "out", MIB)


def test_the_command_merges_a_caches_pack_and_refuses_a_target_for_it(tmp_path):
    first, fresh = _host(tmp_path / "first"), _host(tmp_path / "fresh")
    _filled(first)
    rig = [sys.executable, "-m", "rig"]
    made = subprocess.run([*rig, "pack", "--caches", "llama8b-h200", "--out", str(tmp_path / "out"), "--part-size", "1MiB"],
                          cwd=REPO, env=first | {"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    refused = subprocess.run([*rig, "unpack", str(tmp_path / "out"), "--into", str(tmp_path / "r")],
                             cwd=REPO, env=fresh | {"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "--into" in refused.stderr
    merged = subprocess.run([*rig, "unpack", str(tmp_path / "out")],
                            cwd=REPO, env=fresh | {"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=False)
    assert merged.returncode == 0 and "3 cache files added for llama8b-h200, 0 this host held kept" in merged.stdout


def test_a_file_the_host_holds_where_the_pack_has_a_folder_stays(tmp_path):
    first, fresh = _host(tmp_path / "first"), _host(tmp_path / "fresh")
    _filled(first)
    pack_caches("llama8b-h200", first, tmp_path / "out", MIB)
    blocking = Path(fresh["TRITON_CACHE_DIR"]) / "ABCD"
    blocking.parent.mkdir(parents=True)
    blocking.write_bytes(b"a file here")
    _, added, kept = unpack_caches(tmp_path / "out", fresh)
    assert (added, kept) == (2, 1) and blocking.read_bytes() == b"a file here"
