"""`rig pack` / `rig unpack`: a results directory, or a recipe's compile caches, carried from a host
that may vanish to the next one. A pack is one xz-compressed tar cut into parts of a chosen size,
with a manifest of sha256s; unpacking checks every part and the whole, refuses any entry that is not
a plain file or folder inside the target, and puts a results directory in place in one rename
(caches merge: rig/hosts/caches.py)."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

from rig.errors import Damaged, Invalid, NotFound
from rig.hosts import hostside, parts, wheels

MANIFEST = "pack.json"
SCHEMA = 1


def pack(source: Path, out: Path, size: int, label: str = "results") -> dict:
    """`source` as `out/part-NN/` folders, each with its part and the manifest."""
    if not source.is_dir():
        raise NotFound(str(source), "(folder)", "no such directory", "name the results directory (RIG_RESULTS_DIR)")
    return _write({label: source}, out, size, label, {})


def pack_caches(recipe: str, environ: dict[str, str], out: Path, size: int) -> dict:
    """The compile caches `recipe`'s boots use on this host, one folder per cache variable."""
    from rig.deploy.recipe import load
    from rig.hosts.caches import LABEL, recipe_caches

    found = {name: path for name, path in recipe_caches(load(recipe), environ).items() if path.is_dir()}
    if not found:
        raise NotFound(recipe, "compile caches", "none on this host yet", "boot the recipe here first (rig up or a comparison)")
    return _write({f"{LABEL}/{name}": path for name, path in found.items()}, out, size, LABEL,
                  {"recipe": recipe, "caches": {name: str(path) for name, path in found.items()}})


def _write(members: dict[str, Path], out: Path, size: int, label: str, meta: dict) -> dict:
    if out.exists() and any(out.iterdir()):
        raise Invalid(str(out), "(folder)", "not empty", "pack into an empty or new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-") as work:
        archive = Path(work) / "pack.tar.xz"
        with tarfile.open(archive, "w:xz", preset=6) as tar:
            for arcname, path in members.items():
                tar.add(path, arcname=arcname, filter=lambda info: None if info.issym() or info.islnk() else info)
        digest = wheels.sha256_file(archive)
        pack_id = f"{label}-{time.strftime('%Y%m%d-%H%M%S')}-{digest[:8]}"
        done = Path(work) / "out"
        chunks = parts.cut(archive, done, size, pack_id)
        manifest = {"schema": SCHEMA, "id": pack_id, "label": label, **meta, "archive_sha256": digest,
                    "parts": [{"file": c.name, "sha256": wheels.sha256_file(c), "bytes": c.stat().st_size} for c in chunks]}
        for chunk in chunks:
            (chunk.parent / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        out.mkdir(parents=True, exist_ok=True)
        for folder in sorted(done.iterdir()):
            os.replace(folder, out / folder.name)
    return manifest


def _manifest(pack_dir: Path) -> dict:
    manifests = sorted(pack_dir.glob(f"part-*/{MANIFEST}"))
    if not manifests:
        raise NotFound(str(pack_dir), MANIFEST, "no part-NN/pack.json here", "name the folder `rig pack` wrote")
    try:
        return hostside.read_manifest(manifests[0])
    except hostside.Refused as error:
        raise Damaged(str(manifests[0]), "(file)", str(error), "copy the pack again") from None


def is_caches(pack_dir: Path) -> bool:
    from rig.hosts.caches import LABEL

    return _manifest(pack_dir).get("label") == LABEL


def unpack(pack_dir: Path, into: Path, replace: bool = False) -> dict:
    """The pack's directory, checked, as `into` (its label's folder becomes `into`)."""
    from rig.hosts.caches import LABEL

    manifest = _manifest(pack_dir)
    if manifest.get("label") == LABEL:
        raise Invalid(str(pack_dir), "label", "a pack of compile caches, not of results",
                      "rig unpack PACK without --into merges it into this host's caches")
    if into.exists() and any(into.iterdir()) and not replace:
        raise Invalid(str(into), "(folder)", "already holds results",
                      "unpack into an empty folder, or pass --replace to put the pack's results in its place")
    into.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=into.parent, prefix=f".{into.name}-") as work:
        _extract(pack_dir, manifest, Path(work))
        if into.exists():
            shutil.rmtree(into)
        os.replace(Path(work) / "x" / manifest["label"], into)
    return manifest


def unpack_caches(pack_dir: Path, environ: dict[str, str]) -> tuple[dict, int, int]:
    """Merge a caches pack into where its recipe's boots compile on this host: (manifest, files
    added, files this host already held and kept)."""
    from rig.deploy.recipe import load
    from rig.hosts.caches import LABEL, recipe_caches, restore

    manifest = _manifest(pack_dir)
    recipe = manifest.get("recipe")
    if manifest.get("label") != LABEL or not isinstance(recipe, str):
        raise Invalid(str(pack_dir), "label", "not a caches pack", "unpack results with rig unpack PACK --into DIR")
    targets = recipe_caches(load(recipe), environ)
    with tempfile.TemporaryDirectory(prefix=".rig-caches-") as work:
        _extract(pack_dir, manifest, Path(work))
        added, kept = restore(Path(work) / "x" / LABEL, targets)
    return manifest, added, kept


def _extract(pack_dir: Path, manifest: dict, work: Path) -> None:
    """Every part checked, joined, checked as a whole and extracted to work/x."""
    archive = Path(work) / "pack.tar.xz"
    with archive.open("wb") as joined:
        for part in manifest["parts"]:
            path = pack_dir / f"part-{manifest['parts'].index(part) + 1:02d}" / part["file"]
            if not path.exists():
                raise NotFound(str(path), "(file)", "part missing", "carry every part-NN folder of the pack")
            if wheels.sha256_file(path) != part["sha256"]:
                raise Damaged(str(path), "sha256", "differs from the manifest", "copy this part again")
            with path.open("rb") as handle:
                shutil.copyfileobj(handle, joined)
    if wheels.sha256_file(archive) != manifest["archive_sha256"]:
        raise Damaged(str(pack_dir), "sha256", "the joined parts differ from the pack", "copy the pack again")
    try:
        hostside.extract_safely(archive, Path(work) / "x")
    except hostside.Refused as error:
        raise Damaged(str(pack_dir), "(archive)", str(error), "make the pack again with rig pack") from None
