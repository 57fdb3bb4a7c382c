"""The host side of an offline bundle: runs with Python's standard library and pip alone, on a
host with no package index, before rig or the engine is there. `rig bundle build` copies this
file into every part as `install.py`.

    python3 install.py profile > host.json             what this host has (for --host-profile)
    python3 install.py install PART_DIR... [--site D]  keep the parts given; once all are here,
                                                       check, install and check requirements
    python3 install.py guard [--site D]                exit 42 when the bundle is not installed
                                                       here (a fresh host: a lost one's successor)

Every part and the joined archive are checked by sha256 against the bundle's manifest; pip then
installs the wheels with --require-hashes, so nothing unpinned is installed. Parts may arrive in
any order and over several calls: each is kept in the stage folder once it checks out.
Exit codes: 0 done, 2 bad input (a damaged or foreign part), 3 a requirement unmet that the bundle
did not leave out on purpose, 10 parts still missing, 42 not installed on this host.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

MANIFEST = "bundle.json"
MARKER = ".rig-bundle.json"
DEFAULT_STAGE = "/tmp/rig-stage"
DEFAULT_SITE = "/tmp/site"
EXIT_BAD, EXIT_UNMET, EXIT_WAITING, EXIT_NOT_INSTALLED = 2, 3, 10, 42


class Refused(Exception):
    """One line for the user: what is wrong and the fix."""

    code = EXIT_BAD


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(path: Path) -> dict:
    try:
        manifest = json.loads(path.read_text())
        manifest["id"], manifest["parts"], manifest["archive_sha256"]  # noqa: B018 (the fields every step reads)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise Refused(f"{path}: not a bundle manifest ({type(error).__name__}); fix: copy the part folder again") from None
    return manifest


def stage_parts(part_dirs: list[Path], stage: Path) -> dict:
    """Keep each given part's file in `stage` once its sha256 checks out; return the manifest."""
    manifest = None
    for part_dir in part_dirs:
        found = read_manifest(part_dir / MANIFEST)
        if manifest is not None and found["id"] != manifest["id"]:
            raise Refused(f"{part_dir}: part of bundle {found['id']}, not {manifest['id']}; fix: carry parts of one bundle")
        manifest = found
        wanted = {part["file"]: part for part in manifest["parts"]}
        for path in sorted(part_dir.iterdir()):
            if path.name not in wanted:
                continue
            if sha256_of(path) != wanted[path.name]["sha256"]:
                raise Refused(f"{path}: sha256 differs from the manifest (damaged in transit); fix: copy this part again")
            (stage / manifest["id"]).mkdir(parents=True, exist_ok=True)
            target = stage / manifest["id"] / path.name
            if not target.exists():
                shutil.copyfile(path, target.with_suffix(".partial"))
                os.replace(target.with_suffix(".partial"), target)
        shutil.copyfile(part_dir / MANIFEST, stage / manifest["id"] / MANIFEST)
    if manifest is None:
        raise Refused("no part folder given; fix: name the folders that hold bundle.json")
    return manifest


def missing_parts(manifest: dict, stage: Path) -> list[str]:
    return [part["file"] for part in manifest["parts"] if not (stage / manifest["id"] / part["file"]).exists()]


def join(manifest: dict, stage: Path) -> Path:
    """The parts put back together in order, checked against the whole archive's sha256."""
    folder = stage / manifest["id"]
    archive = folder / "bundle.tar"
    if archive.exists() and sha256_of(archive) == manifest["archive_sha256"]:
        return archive
    with archive.with_suffix(".partial").open("wb") as out:
        for part in manifest["parts"]:
            with (folder / part["file"]).open("rb") as handle:
                shutil.copyfileobj(handle, out)
    if sha256_of(archive.with_suffix(".partial")) != manifest["archive_sha256"]:
        raise Refused(f"{archive}: the joined parts do not match the bundle's sha256; fix: copy the parts again")
    os.replace(archive.with_suffix(".partial"), archive)
    return archive


def extract_safely(archive: Path, into: Path) -> None:
    """Only regular files and folders, each inside `into`: a crafted archive cannot write elsewhere."""
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            target = (into / member.name).resolve()
            if not (member.isfile() or member.isdir()) or not str(target).startswith(str(into.resolve()) + os.sep):
                raise Refused(f"{archive}: entry {member.name!r} is not a plain file inside the bundle; fix: rebuild it")
        tar.extractall(into)  # noqa: S202 (every member checked above)


def _packaging():
    from pip._vendor.packaging.markers import default_environment  # pip travels with every Python that installs
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name
    from pip._vendor.packaging.version import Version

    return Requirement, canonicalize_name, Version, default_environment


def unmet_requirements(site: Path, names: list[str]) -> list[tuple[str, str, str]]:
    """(package, requirement, what is installed) for every requirement of `names` that the site
    plus the host's own packages do not meet (extras not asked for are not requirements)."""
    from importlib import metadata

    Requirement, canonicalize_name, Version, default_environment = _packaging()
    installed: dict[str, str] = {}
    for dist in metadata.distributions(path=[str(site)] + sys.path):
        name = canonicalize_name(dist.metadata["Name"] or "")
        installed.setdefault(name, dist.version)  # the site comes first: it shadows the host's
    environment = default_environment() | {"extra": ""}
    unmet = []
    for name in names:
        dist = next(iter(metadata.distributions(name=name, path=[str(site)])), None)
        for line in (dist.requires or []) if dist else []:
            requirement = Requirement(line)
            if requirement.marker and not requirement.marker.evaluate(environment):
                continue
            have = installed.get(canonicalize_name(requirement.name))
            if have is None or not requirement.specifier.contains(Version(have), prereleases=True):
                unmet.append((name, str(requirement), have or "not installed"))
    return unmet


def shadowing(site: Path, replaces: dict) -> list[str]:
    """One line per package the bundle carries although the host has it: the site's version, found
    first on PYTHONPATH=SITE, shadows the host's for the processes started with it, and nothing
    else. A site whose version is not the one the bundle pinned is refused."""
    from importlib import metadata

    lines = []
    for name, replaced in sorted(replaces.items()):
        ours = next(iter(metadata.distributions(name=name, path=[str(site)])), None)
        if ours is None or ours.version != replaced["version"]:
            found = ours.version if ours else "nothing"
            raise Refused(f"{site}: {name} {replaced['version']} expected, {found} installed; fix: install into an empty site")
        # The host's own: its path less the site (a caller may have put the site on PYTHONPATH already).
        path = [entry for entry in sys.path if not (entry and Path(entry).resolve() == site.resolve())]
        host = next(iter(metadata.distributions(name=name, path=path)), None)
        lines.append(f"{name} {replaced['version']} shadows this host's {host.version if host else '(none installed)'} "
                     f"on PYTHONPATH={site} alone: {replaced['why']}")
    return lines


def install(part_dirs: list[Path], stage: Path, site: Path, strict: bool = False) -> int:
    """A requirement the host lacks altogether fails the install; one it meets with another version
    is printed (the engine usually runs; --strict fails on it too)."""
    manifest = stage_parts(part_dirs, stage)
    marker = site / MARKER
    if marker.exists() and json.loads(marker.read_text()).get("id") == manifest["id"]:
        print(f"install: bundle {manifest['id']} is installed in {site}")
        return 0
    replaces = manifest.get("replaces_host", {})
    held = json.loads(marker.read_text()) if marker.exists() else {}
    held_spec = held.get("spec") or str(held.get("id", "")).rpartition("-")[0]
    if held and held_spec != manifest.get("spec") and (replaces or held.get("replaces_host")):
        which = ", ".join(replaces or held["replaces_host"])
        raise Refused(f"{site} holds bundle {held.get('id')}; one of the two replaces the host's {which} for its own "
                      "engine alone, so they cannot share a site; fix: give this bundle a site of its own (--site)")
    missing = missing_parts(manifest, stage)
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        print(f"install: waiting for {len(missing)} of {len(manifest['parts'])} parts: {shown} "
              f"(kept so far in {stage / manifest['id']}); carry them and run this again")
        return EXIT_WAITING
    archive = join(manifest, stage)
    with tempfile.TemporaryDirectory(dir=stage) as work:
        extract_safely(archive, Path(work))
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--require-hashes",
                   "--no-compile", "--disable-pip-version-check", "--upgrade", "--target", str(site),
                   "--find-links", str(Path(work) / "wheels"), "-r", str(Path(work) / "bundle.lock")]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise Refused(f"pip install failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}; fix: see pip's message")
    carried = [wheel["name"] for wheel in manifest["wheels"]]
    for line in shadowing(site, replaces):
        print(f"install: {line}")
    left_out = manifest.get("left_out_packages", {})
    missing_here, other_version = [], []
    for package, requirement, have in unmet_requirements(site, carried):
        why = left_out.get(_name_of(requirement))
        if why:
            print(f"install: left out on purpose: {requirement} (for {package}): {why}")
        elif have == "not installed":
            missing_here.append(f"{requirement} (for {package}): not installed here")
        else:
            other_version.append(f"{requirement} (for {package}): this host has {have}")
    for line in other_version:
        print(f"install: {'unmet' if strict else 'other version'}: {line}")
    for line in missing_here:
        print(f"install: unmet: {line}")
    if missing_here or (strict and other_version):
        print("install: fix: rebuild the bundle with this host's profile (python3 install.py profile > host.json; "
              "rig bundle build --host-profile host.json), which carries what this host lacks")
        return EXIT_UNMET
    tmp = marker.with_suffix(".partial")
    tmp.write_text(json.dumps({"id": manifest["id"], "spec": manifest.get("spec"), "wheels": len(carried),
                               "replaces_host": sorted(replaces)}))
    os.replace(tmp, marker)
    print(f"install: bundle {manifest['id']} installed in {site}: {len(carried)} packages; "
          f"export PYTHONPATH={site}")
    return 0


def _name_of(requirement: str) -> str:
    Requirement, canonicalize_name, _, _ = _packaging()
    return canonicalize_name(Requirement(requirement).name)


def profile(name: str) -> dict:
    """This host as `rig bundle build --host-profile` reads it."""
    from importlib import metadata

    _, canonicalize_name, _, _ = _packaging()
    machine = os.uname().machine
    glibc = os.confstr("CS_GNU_LIBC_VERSION") or "glibc 2.17"
    minor = int(glibc.split()[-1].split(".")[1])
    provides = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    found = {"name": name, "python": f"{sys.version_info.major}.{sys.version_info.minor}",
             "platform": f"{machine}-manylinux_2_{min(minor, 39)}", "provides": dict(sorted(provides.items()))}
    try:  # the first GPU's architecture, for pruning GPU code to it (none where nvidia-smi is absent)
        capability = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30).stdout.split()
        if capability:
            found["gpu_arch"] = "sm_" + capability[0].replace(".", "")
    except (OSError, subprocess.SubprocessError):
        pass
    return found


def guard(site: Path) -> int:
    marker = site / MARKER
    if not marker.exists():
        print(f"guard: no bundle installed in {site}: this is a fresh host (the previous one is gone); "
              "carry the bundle's parts again and run install, then unpack the last results pack")
        return EXIT_NOT_INSTALLED
    print(f"guard: bundle {json.loads(marker.read_text()).get('id')} installed in {site}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="install.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("profile", help="print this host's profile as JSON (for rig bundle build --host-profile)")
    p.add_argument("--name", default=os.uname().nodename.split(".")[0].lower() or "host", help="the profile's name")
    for name, text in (("install", "keep the parts given; install once all are here"), ("guard", "exit 42 unless installed")):
        p = sub.add_parser(name, help=text)
        if name == "install":
            p.add_argument("parts", nargs="+", type=Path, help="part folders (each holds bundle.json and one part)")
            p.add_argument("--stage", type=Path, default=Path(DEFAULT_STAGE), help=f"where parts wait (default {DEFAULT_STAGE})")
            p.add_argument("--strict", action="store_true", help="fail when the host meets a requirement with another version")
        p.add_argument("--site", type=Path, default=Path(os.environ.get("RIG_SITE", DEFAULT_SITE)),
                       help=f"where the packages go (default $RIG_SITE or {DEFAULT_SITE}); then PYTHONPATH=SITE")
    args = parser.parse_args(argv)
    try:
        if args.command == "profile":
            print(json.dumps(profile(args.name), indent=1))
            return 0
        if args.command == "guard":
            return guard(args.site)
        args.site.mkdir(parents=True, exist_ok=True)
        return install(args.parts, args.stage, args.site, args.strict)
    except Refused as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return error.code


if __name__ == "__main__":
    sys.exit(main())
