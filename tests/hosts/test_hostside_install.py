"""The host-side installer: parts checked as they arrive over several calls, the bundle installed
with pip from them alone, its requirements checked against what the host has, and the guard that
tells a fresh host from the one the bundle was installed on."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from synthetic_bundles import make_bundle, make_wheel

from rig.hosts import hostside

SIZE = 1 << 12  # parts of 4 KiB: a few wheels make several parts


def _wheel(tmp: Path, **kwargs) -> Path:
    files = {"demo_pkg/__init__.py": b"VALUE = 42\n" + b"# padding\n" * 600}
    return make_wheel(tmp / "src", "demo-pkg", "1.0", files, **kwargs)


def test_a_bundle_installs_once_every_part_has_arrived_in_any_order(tmp_path, capsys):
    manifest = make_bundle(tmp_path, [_wheel(tmp_path)], SIZE)
    part_dirs = sorted((tmp_path / "out").iterdir())
    assert len(part_dirs) >= 2
    stage, site = tmp_path / "stage", tmp_path / "site"
    assert hostside.install(part_dirs[-1:], stage, site) == hostside.EXIT_WAITING
    assert "waiting for" in capsys.readouterr().out
    assert hostside.guard(site) == hostside.EXIT_NOT_INSTALLED
    assert hostside.install(part_dirs[:-1], stage, site) == 0
    assert hostside.guard(site) == 0
    found = subprocess.run([sys.executable, "-c", "import demo_pkg; print(demo_pkg.VALUE)"], env={"PYTHONPATH": str(site)},
                           capture_output=True, text=True)
    assert found.stdout.strip() == "42"
    assert hostside.install(part_dirs, stage, site) == 0  # again: nothing to do
    assert manifest["id"] in capsys.readouterr().out


def test_a_part_damaged_in_transit_is_refused_before_anything_is_kept(tmp_path):
    make_bundle(tmp_path, [_wheel(tmp_path)], SIZE)
    part = sorted((tmp_path / "out").iterdir())[0]
    chunk = next(p for p in part.iterdir() if p.name.startswith("test-"))
    data = bytearray(chunk.read_bytes())
    data[10] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(hostside.Refused, match="damaged in transit"):
        hostside.install([part], tmp_path / "stage", tmp_path / "site")
    assert not list((tmp_path / "stage").rglob(chunk.name))


def test_parts_of_two_bundles_are_refused(tmp_path):
    make_bundle(tmp_path / "a", [_wheel(tmp_path / "a")], SIZE)
    make_bundle(tmp_path / "b", [make_wheel(tmp_path / "b" / "src", "other", "2.0", {"other/__init__.py": b"x = 1\n"})], SIZE)
    parts = [sorted((tmp_path / name / "out").iterdir())[0] for name in ("a", "b")]
    with pytest.raises(hostside.Refused, match="carry parts of one bundle"):
        hostside.install(parts, tmp_path / "stage", tmp_path / "site")


def test_a_requirement_the_host_lacks_fails_and_one_left_out_on_purpose_is_listed(tmp_path, capsys):
    wheel = _wheel(tmp_path, requires=("rig-no-such-package>=1", "rig-left-out-package"))
    make_bundle(tmp_path, [wheel], SIZE, left_out={"rig-left-out-package": "not needed to serve"})
    code = hostside.install(sorted((tmp_path / "out").iterdir()), tmp_path / "stage", tmp_path / "site")
    out = capsys.readouterr().out
    assert code == hostside.EXIT_UNMET
    assert "unmet: rig-no-such-package>=1 (for demo-pkg): not installed here" in out
    assert "left out on purpose: rig-left-out-package (for demo-pkg): not needed to serve" in out
    assert hostside.guard(tmp_path / "site") == hostside.EXIT_NOT_INSTALLED


def test_a_requirement_met_with_another_version_is_printed_and_fails_only_when_strict(tmp_path, capsys):
    wheel = _wheel(tmp_path, requires=("pip>=999",))  # pip is there, at a lower version
    make_bundle(tmp_path, [wheel], SIZE)
    parts = sorted((tmp_path / "out").iterdir())
    assert hostside.install(parts, tmp_path / "stage", tmp_path / "strict", strict=True) == hostside.EXIT_UNMET
    assert hostside.install(parts, tmp_path / "stage", tmp_path / "site") == 0
    assert "other version: pip>=999 (for demo-pkg)" in capsys.readouterr().out


def test_an_archive_entry_outside_its_folder_or_a_link_is_refused(tmp_path):
    for name, kind in (("../escape.txt", tarfile.REGTYPE), ("wheels/link", tarfile.SYMTYPE)):
        archive = tmp_path / "evil.tar"
        with tarfile.open(archive, "w") as tar:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
            tar.addfile(info, None if kind == tarfile.SYMTYPE else __import__("io").BytesIO(b""))
        with pytest.raises(hostside.Refused, match="not a plain file inside the bundle"):
            hostside.extract_safely(archive, tmp_path / "into")
    assert not (tmp_path / "escape.txt").exists()


def test_the_profile_names_this_python_its_platform_and_its_packages():
    profile = hostside.profile("here")
    assert profile["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert profile["platform"].split("-")[1].startswith("manylinux_2_")
    assert "pip" in profile["provides"]
