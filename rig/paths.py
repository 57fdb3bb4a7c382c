"""Where rig's files live, in one place: the checkout (fixed), and the results, state and cache
directories, read from the environment at call time (RIG_RESULTS_DIR, RIG_STATE_DIR, RIG_CACHE_DIR),
so a test or a second run points them elsewhere by setting a variable, never by patching a module.

A directory named by the environment must be a path of its own: empty means the default, and a
system directory (/, /etc, /usr, ...) is refused in one line before anything is written there. A
relative one is taken from the directory rig was started in, and used as an absolute path.
"""

from __future__ import annotations

import os
from pathlib import Path

from rig.errors import Invalid

PACKAGE_DIR = Path(__file__).resolve().parent  # rig/
REPO_ROOT = PACKAGE_DIR.parent
DATA_DIR = PACKAGE_DIR / "data"

# Directories rig never writes its results, state or caches into (nor directly below /).
SYSTEM_DIRS = frozenset(Path(p) for p in ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root", "/run",
                                           "/sbin", "/sys", "/usr", "/var", "/home", "/opt", "/srv", "/tmp"))


def _from_environment(variable: str, default: Path) -> Path:
    raw = os.environ.get(variable, "")
    if not raw.strip():
        return default
    if "\x00" in raw or any(ord(c) < 32 for c in raw):
        raise Invalid("environment", variable, "holds a control character", f"set {variable} to a directory path, or unset it")
    path = Path(raw).expanduser()
    resolved = path.resolve()
    if resolved in SYSTEM_DIRS or resolved.parent == Path("/") and not path.exists():
        raise Invalid("environment", variable, f"{raw!r} is a system directory (rig would write into it)",
                      f"set {variable} to a directory of its own, e.g. {default}, or unset it")
    if path.exists() and not path.is_dir():  # found at once, not when a boot first writes below it
        raise Invalid("environment", variable, f"{raw!r} is not a directory",
                      f"set {variable} to a directory (rig creates it if missing), or unset it for {default}")
    # absolute and normalized: a boot record names its paths under it, and `results2`, `./results2`
    # and the absolute spelling are one directory (compared as spelled, they read as another one)
    return Path(os.path.abspath(path))


def results_dir() -> Path:
    """results/: boots, runs, comparisons (RIG_RESULTS_DIR)."""
    return _from_environment("RIG_RESULTS_DIR", REPO_ROOT / "results")


def boots_dir() -> Path:
    return results_dir() / "boots"


def state_dir() -> Path:
    """.rig/state/: one file per recipe that is up (RIG_STATE_DIR)."""
    return _from_environment("RIG_STATE_DIR", REPO_ROOT / ".rig" / "state")


def cache_dir() -> Path:
    """~/.cache/rig: generated models, the adapter overlay, downloaded engine wheels (RIG_CACHE_DIR)."""
    return _from_environment("RIG_CACHE_DIR", Path.home() / ".cache" / "rig")


def model_dir() -> Path | None:
    """RIG_MODEL_DIR: the host directory holding the checkpoint (its tokenizer and config.json), or
    None when unset. Read only, never written; it must be an absolute path without `..` (what it names
    is what is read, and the same path goes into a compose file's bind mount), naming a directory."""
    raw = os.environ.get("RIG_MODEL_DIR", "")
    if not raw.strip():
        return None
    fix = "set RIG_MODEL_DIR to the checkpoint's absolute directory, e.g. /models/llama-3.1-8b, or unset it"
    if any(ord(c) < 32 or ord(c) == 127 for c in raw):
        raise Invalid("environment", "RIG_MODEL_DIR", "holds a control character", fix)
    path = Path(raw)
    if not path.is_absolute() or ".." in path.parts:
        raise Invalid("environment", "RIG_MODEL_DIR", f"{raw!r} is not an absolute path without '..'", fix)
    if not path.is_dir():
        raise Invalid("environment", "RIG_MODEL_DIR", f"{raw!r} is not a directory", fix)
    return path
