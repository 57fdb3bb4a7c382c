"""`rig bundle build`: an engine and rig's own host dependencies as wheels pinned by sha256, less
what the host already has and what the spec leaves out (each with its reason), in parts of a
chosen size, each part with the manifest and the host-side installer beside it."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rig.errors import Invalid, StepFailed
from rig.hosts import fatbin, hostside, lock, parts, wheels
from rig.hosts.spec import BundleSpec, HostProfile, normalize

SCHEMA = 1


@dataclass
class Built:
    out: Path
    manifest: dict


def _uv() -> str:
    try:
        from uv import find_uv_bin
    except ImportError:
        raise Invalid("rig bundle build", "uv", "not installed", "pip install -e '.[bundle]' (uv resolves the bundle)") from None
    return find_uv_bin()


def _platform_flags(profile: HostProfile) -> list[str]:
    machine, _, tag = profile.platform.partition("-")
    newest = int(tag.rsplit("_", 1)[1])
    flags = [f"--platform=manylinux_2_{minor}_{machine}" for minor in range(newest, 16, -1)]
    return flags + [f"--platform=manylinux2014_{machine}", "--platform=any"]


def download(carried: list[lock.Locked], profile: HostProfile, into: Path) -> dict[str, Path]:
    """Each carried pin's wheel for the host (pip download, --require-hashes): name -> file. `into`
    starts empty, so every file in it is the one pip chose for this host's tags (uv pins every
    platform's file of a version: a wheel for another Python would match a pin's hash too); pip's
    own cache spares the second download."""
    into.mkdir(parents=True, exist_ok=True)
    requirements = into / "requirements.txt"
    requirements.write_text(lock.requirements_text(carried))
    abi = "cp" + profile.python.replace(".", "")
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--require-hashes",
               "--disable-pip-version-check", f"--python-version={profile.python}", "--implementation=cp", f"--abi={abi}",
               *_platform_flags(profile), "--dest", str(into), "-r", str(requirements)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "ERROR" in line] or done.stderr.splitlines()[-1:]
        raise StepFailed("rig bundle build", "download", f"pip download failed: {errors[0] if errors else '?'}",
                         "check the platform in the host profile and the package index")
    by_hash = {wheels.sha256_file(path): path for path in into.glob("*.whl")}
    found: dict[str, Path] = {}
    for entry in carried:
        match = next((by_hash[digest] for digest in entry.hashes if digest in by_hash), None)
        if match is None:
            raise StepFailed("rig bundle build", entry.name, "no downloaded wheel matches its pinned hashes",
                             "run the build again (the download may have been cut)")
        found[entry.name] = match
    return found


def _deterministic_tar(folder: Path, archive: Path) -> None:
    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        return info

    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False, filter=clean)


def _pruner(spec: BundleSpec, profile: HostProfile, pruned: dict[str, fatbin.Pruned]) -> wheels.Transform | None:
    """The transform that prunes the spec's libraries to the host's GPU architecture, if it has one."""
    arch = profile.arch_number()
    if arch is None or not spec.prune_gpu_code:
        return None

    def transform(name: str, data: bytes) -> bytes | None:
        if not any(fnmatch.fnmatchcase(name, glob) for glob in spec.prune_gpu_code):
            return None
        buffer = bytearray(data)
        pruned[name] = fatbin.prune(buffer, arch)
        return bytes(buffer) if pruned[name].zeroed_bytes else None

    return transform


def write_parts(staging: Path, out: Path, size: int, name: str, fields: dict) -> dict:
    """`staging/wheels/*.whl` as a bundle in `out/part-NN/`: bundle.lock pins each wheel's sha256,
    one deterministic tar is cut into parts, and each part folder gets the manifest and install.py."""
    rows = fields["wheels"]
    (staging / "bundle.lock").write_text("".join(f"{r['name']}=={r['version']} --hash=sha256:{r['sha256']}\n" for r in rows))
    archive = staging.parent / f"{staging.name}.tar"
    _deterministic_tar(staging, archive)
    digest = wheels.sha256_file(archive)
    bundle_id = f"{name}-{digest[:12]}"
    chunks = parts.cut(archive, out, size, bundle_id)
    manifest = {"schema": SCHEMA, "id": bundle_id, "archive_sha256": digest, "archive_bytes": archive.stat().st_size,
                "parts": [{"file": c.name, "sha256": wheels.sha256_file(c), "bytes": c.stat().st_size} for c in chunks]}
    manifest |= fields
    for chunk in chunks:
        (chunk.parent / hostside.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        shutil.copyfile(hostside.__file__, chunk.parent / "install.py")
    return manifest


def build(spec: BundleSpec, profile: HostProfile, out: Path, size: int, with_files: list[str], with_rig: bool = True) -> Built:
    unknown = [name for name in with_files if name not in spec.optional_files]
    if unknown:
        raise Invalid("--with", unknown[0], "not an optional part of this spec",
                      f"name one of: {', '.join(spec.optional_files) or '(none)'}")
    globs = dict(spec.leave_out_files) | {f.glob: f.why for name, f in spec.optional_files.items() if name not in with_files}
    pruned: dict[str, fatbin.Pruned] = {}
    pruning = _pruner(spec, profile, pruned)
    text = lock.compile_lock(spec, profile, _uv(), with_rig)
    selection = lock.select(lock.parse_lock(text), spec, profile)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-") as work:
        downloaded = download(selection.carried, profile, Path(work) / "downloads")
        staging, done = Path(work) / "archive", Path(work) / "out"
        (staging / "wheels").mkdir(parents=True)
        rows, used = [], set()
        for entry in selection.carried:
            source = downloaded[entry.name]
            target = staging / "wheels" / source.name
            hits = wheels.matching(source, list(globs) + spec.prune_gpu_code)
            left_out = wheels.without(source, list(globs), target, pruning) if hits else []
            if not hits:
                shutil.copyfile(source, target)
            used.update(glob for glob in globs if any(fnmatch.fnmatchcase(name, glob) for name in left_out))
            rows.append({"name": entry.name, "version": entry.version, "file": source.name,
                         "sha256": wheels.sha256_file(target), "upstream_sha256": wheels.sha256_file(source),
                         "left_out_files": left_out})
        stale = sorted(set(globs) - used)
        if stale:
            raise Invalid(f"--spec {spec.name}", f"leave_out_files.{stale[0]}", "matches no file of the carried wheels",
                          "correct the glob or remove it (the engine's layout changed)")
        manifest = write_parts(staging, done, size, spec.name, {
            "spec": spec.name, "profile": profile.name, "python": profile.python, "platform": profile.platform,
            "requirements": list(spec.requirements), "wheels": rows, "provided": selection.provided,
            "left_out_packages": {normalize(k): v for k, v in selection.left_out.items()}, "left_out_files": globs,
            "replaces_host": selection.replaces_host,
            "gpu_code_pruned_to": profile.gpu_arch if pruned else None,
            "gpu_code_pruned": {name: {"images": p.images, "kept_bytes": p.kept_bytes, "zeroed_bytes": p.zeroed_bytes}
                                for name, p in pruned.items()}})
        if out.exists():
            shutil.rmtree(out)
        os.replace(done, out)
    return Built(out, manifest)
