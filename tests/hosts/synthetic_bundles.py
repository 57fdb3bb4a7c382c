"""Synthetic wheels and bundles, built in a few lines, for the offline-bundle tests."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from rig.hosts import bundle, wheels


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes], requires: tuple[str, ...] = ()) -> Path:
    """A minimal valid wheel: the files, METADATA (with Requires-Dist), WHEEL and a true RECORD."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    content = dict(files) | {f"{dist}/METADATA": metadata.encode(),
                             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rows = [f"{path},{wheels.record_hash(data)},{len(data)}" for path, data in content.items()] + [f"{dist}/RECORD,,"]
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for entry, data in content.items():
            archive.writestr(entry, data)
        archive.writestr(f"{dist}/RECORD", "\n".join(rows) + "\n")
    return path


def make_bundle(tmp: Path, wheel_files: list[Path], size: int, left_out: dict[str, str] | None = None,
                name: str = "test", replaces_host: dict[str, dict] | None = None) -> dict:
    """The wheels as a bundle of spec `name` in tmp/out/part-NN/ (rig's own packaging step), with its manifest."""
    staging = tmp / "staging"
    (staging / "wheels").mkdir(parents=True)
    rows = []
    for path in wheel_files:
        target = staging / "wheels" / path.name
        target.write_bytes(path.read_bytes())
        project, version = path.name.split("-")[:2]
        rows.append({"name": project.replace("_", "-"), "version": version, "file": path.name,
                     "sha256": hashlib.sha256(target.read_bytes()).hexdigest(), "left_out_files": []})
    return bundle.write_parts(staging, tmp / "out", size, name, {"spec": name, "wheels": rows, "left_out_packages": left_out or {},
                                                                 "replaces_host": replaces_host or {}})
