"""A recipe's compile caches carried from one host to the next, so that a fresh host of the same
kind loads the compiled graphs and kernels instead of compiling them again (minutes a boot for a
large model, a burn-in boot per arm and host under rig's boot-state control).

Each engine keys its cache entries by what compiled them (its version, the model's configuration,
torch and the GPU's architecture): an entry this host cannot use is never loaded, the boot
compiles, and the boot-state control names that boot as one that compiled. A pack holds all of
each cache, not only this recipe's entries (the engines name them by hashes rig cannot attribute):
on a host that has compiled other models, pack from a cache of this recipe's own (its variable set
in the recipe's env). Restoring merges:
a file the host already holds is kept, never replaced, and each file appears in one rename, so a
running engine never reads half of one."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from rig.boot.engine_env import cache_dirs
from rig.deploy.recipe import Resolved
from rig.engines import ENGINES
from rig.errors import Invalid

LABEL = "caches"


def recipe_caches(resolved: Resolved, environ: dict[str, str]) -> dict[str, Path]:
    """variable -> the directory this recipe's native boots compile into on this host (the recipe's
    environment over the host's, as a boot sees them)."""
    engine = ENGINES[resolved.recipe.engine.name]
    if not engine.compile_caches:
        raise Invalid(resolved.recipe.name, "engine", f"{engine.name} keeps no compile caches",
                      "carry the results alone (rig pack without --caches)")
    return cache_dirs(engine, {**environ, **resolved.full_env()})


def restore(extracted: Path, targets: dict[str, Path]) -> tuple[int, int]:
    """Merge each `extracted/VARIABLE/` into its target: (files added, files kept as they were)."""
    added = kept = 0
    for name, target in targets.items():
        source = extracted / name
        if not source.is_dir():
            continue
        for root, _, names in os.walk(source):
            folder = target / Path(root).relative_to(source)
            if folder.exists() and not folder.is_dir():  # the host holds a file by that name: it stays
                kept += len(names)
                continue
            folder.mkdir(parents=True, exist_ok=True)
            for file_name in names:
                destination = folder / file_name
                if destination.exists() or destination.is_symlink():
                    kept += 1
                    continue
                with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{file_name}-", delete=False) as handle:
                    staged = Path(handle.name)
                shutil.copyfile(Path(root) / file_name, staged)
                os.replace(staged, destination)
                added += 1
    return added, kept
