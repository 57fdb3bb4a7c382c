"""The environment a native engine process starts in: its interpreter, its PYTHONPATH with rig's
adapter overlay, its GPUs, its API key (never on argv) and its compile caches.

Adapters arm in every engine process (API server, EngineCore, each TP worker). In rig's own
environment the `rig_adapters.pth` file does it, but a `.pth` file is processed only in a site
directory, not in a PYTHONPATH entry. vLLM's `vllm.general_plugins` and SGLang's
`sglang.srt.plugins` entry points, in contrast, are found from any sys.path entry. So for an
engine in another environment rig installs the adapter package (its dist-info carries the entry
points) into an overlay directory once per adapter version and puts it first on PYTHONPATH.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rig.boot.record import CacheDir, CacheState
from rig.deploy.recipe import Resolved
from rig.engines import ENGINES, Engine
from rig.errors import RigError
from rig.paths import REPO_ROOT

ADAPTER_SOURCE = REPO_ROOT / "adapter"
API_KEY_ENV = "RIG_API_KEY"


def _adapter_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted([ADAPTER_SOURCE / "pyproject.toml", *(ADAPTER_SOURCE / "rig_adapters").rglob("*.py")]):
        digest.update(str(path.relative_to(ADAPTER_SOURCE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def adapter_overlay(cache_root: Path) -> Path:
    """A directory holding rig_adapters and its dist-info (entry points), built once per adapter
    source version with pip (`--target`, no dependencies: the package has none), atomically."""
    target = cache_root / "adapter-overlay" / _adapter_digest()
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    source = Path(tempfile.mkdtemp(prefix=".source-", dir=target.parent))
    try:
        # setuptools builds inside the source tree (build/, egg-info): a private copy keeps two rig
        # processes building at once out of each other's way, and the checkout clean
        shutil.copytree(ADAPTER_SOURCE, source / "adapter", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-compile",
             "--no-index", "--disable-pip-version-check", "--target", str(staging), str(source / "adapter")],
            capture_output=True, text=True, check=False)
        if result.returncode != 0 or not list(staging.glob("rig_adapters-*.dist-info/entry_points.txt")):
            last = (result.stderr.strip().splitlines() or ["no entry points written"])[-1]
            raise RigError("adapter/", "(install)", f"could not build the adapter overlay for the engine's environment ({last})",
                           "check that pip and setuptools are installed in rig's own environment")
        (staging / ".complete").write_text("")
        try:
            staging.rename(target)
        except OSError:  # another rig process finished the same overlay first
            if not (target / ".complete").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(source, ignore_errors=True)
    return target


def visible_devices(resolved: Resolved) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES from the recipe's pinned device ids; unset (the engine picks) otherwise."""
    ids = resolved.topology.gpu_ids
    if ids is None:
        return {}
    # PCI order: CUDA's ids then name the same devices as NVML's indices (telemetry, fingerprints).
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in ids)}


def cache_dirs(engine: Engine, environ: dict[str, str]) -> dict[str, Path]:
    """variable -> the directory each compile/kernel cache of `engine` lives in under `environ`."""
    user = environ.get("USER") or os.environ.get("USER") or "root"
    xdg_cache = environ.get("XDG_CACHE_HOME") or "~/.cache"
    dirs = {}
    for name, default in engine.compile_caches:
        given = environ.get(name)
        # a variable naming a base directory (FLASHINFER_WORKSPACE_BASE) holds the cache below it
        dirs[name] = (Path(os.path.expanduser(given)) / engine.cache_subdirs.get(name, "") if given
                      else Path(os.path.expanduser(default.format(user=user, xdg_cache=xdg_cache))))
    return dirs


def _count(path: Path) -> tuple[int, int]:
    files = size = 0
    for root, _, names in os.walk(path):
        for file_name in names:
            files += 1
            try:
                size += os.lstat(os.path.join(root, file_name)).st_size
            except OSError:
                continue
    return files, size


def cache_growth(state: CacheState) -> dict[str, int]:
    """cache -> files gained since `state` was taken (only the caches that gained any)."""
    grew = {}
    for name, cache in state.dirs.items():
        files, _ = _count(Path(cache.path))
        if files > cache.files:
            grew[name] = files - cache.files
    return grew


def cache_state(engine: Engine, environ: dict[str, str]) -> CacheState:
    """What the compile caches held when the boot started: a warm boot skips compilation and
    autotuning (vLLM's second boot took half the first's time), so boot times and first requests
    are comparable only between boots in the same state."""
    dirs = {}
    for name, path in cache_dirs(engine, environ).items():
        files, size = _count(path)
        dirs[name] = CacheDir(path=str(path), files=files, bytes=size)
    if not dirs:
        return CacheState()
    filled = [bool(d.files) for name, d in dirs.items() if d.files or name not in engine.optional_caches]
    # partial: on the H200s the first boots found vLLM's compile cache filled but Triton's nearly
    # empty, and their first request took 1.1-1.6 s against 55-64 ms once every cache held files.
    state = "warm" if all(filled) else ("partial" if any(filled) else "cold")
    return CacheState(state=state, dirs=dirs)


def fresh_caches(engine: Engine, root: Path) -> dict[str, str]:
    """Empty per-boot cache directories for a cold boot, without touching the user's own caches."""
    env = {}
    for name, _ in engine.compile_caches:
        path = root / name.lower()
        path.mkdir(parents=True, exist_ok=True)
        env[name] = str(path)
    return env


def api_key_environment(engine_name: str, environ: dict[str, str]) -> dict[str, str]:
    """The environment change that hands RIG_API_KEY to the engine the one way it reads a key outside
    argv and its own logs (vLLM: VLLM_API_KEY, which its child processes drop; rig_adapters.runtime).
    An engine with no such way refuses the key rather than serving an endpoint the user thinks is
    closed (rig/engines.py no_key_reason)."""
    key = environ.get(API_KEY_ENV)
    if not key:
        return {}
    row = ENGINES[engine_name]
    if row.api_key is None or not row.api_key.startswith("env:"):
        raise RigError("environment", API_KEY_ENV, f"rig will not hand {engine_name} an API key: {row.no_key_reason}",
                       f"unset {API_KEY_ENV} for this recipe")
    return {row.api_key.removeprefix("env:"): key}
