"""The wheels a bundle carries: the engine's and rig's requirements resolved by uv for the host's
Python and platform (as on the spec's release day), every file pinned by sha256, less what the
host already provides and what the spec leaves out, with the packages only those pulled in."""

from __future__ import annotations

import re
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from rig.errors import Invalid, StepFailed
from rig.hosts.spec import PIN, BundleSpec, HostProfile, normalize

REPO = Path(__file__).resolve().parent.parent.parent
_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)")
_HASH = re.compile(r"--hash=sha256:(?P<digest>[0-9a-f]{64})")
_VIA_ONE = re.compile(r"^\s+# via (?P<names>.+)$")
_VIA_MORE = re.compile(r"^\s+#\s{3}(?P<name>\S+)")


@dataclass
class Locked:
    """One pinned project: its version, every sha256 uv accepts for it, and who requires it."""

    name: str
    version: str
    hashes: list[str] = field(default_factory=list)
    via: set[str] = field(default_factory=set)


@dataclass
class Selection:
    carried: list[Locked]
    provided: dict[str, str]  # name -> version resolved, left to the host
    left_out: dict[str, str]  # name -> why (the spec's reason, or "only needed by X")
    # name -> {version carried, host's version (None: unknown), why}: carried although the host provides it
    replaces_host: dict[str, dict] = field(default_factory=dict)


def rig_requirements() -> list[str]:
    """rig's own runtime dependencies (pyproject.toml): what a host needs to run rig from its checkout."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def _requirement_name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    if not found:
        raise Invalid("pyproject.toml", "project.dependencies", f"{requirement!r} names no project", "fix the requirement")
    return normalize(found.group(0))


def parse_lock(text: str) -> dict[str, Locked]:
    """`uv pip compile --generate-hashes` output: `name==version \\ --hash=...` then `# via` lines."""
    entries: dict[str, Locked] = {}
    current: Locked | None = None
    multi = False
    for line in text.splitlines():
        entry = _ENTRY.match(line)
        if entry:
            current = Locked(normalize(entry["name"]), entry["version"])
            entries[current.name] = current
            multi = False
        if current is None:
            continue
        current.hashes += _HASH.findall(line)
        one = _VIA_ONE.match(line)
        if one:
            current.via.add(normalize(one["names"].split()[0]))
            continue
        if re.match(r"^\s+# via$", line):
            multi = True
        elif multi and (more := _VIA_MORE.match(line)):
            current.via.add(normalize(more["name"]))
    return entries


def _uv_compile(uv: str, requirements: list[str], overrides: list[str], constraints: list[str], profile: HostProfile,
                exclude_newer: str | None, where: str) -> str:
    with tempfile.TemporaryDirectory(prefix="rig-lock-") as work:
        for name, lines in (("requirements.in", requirements), ("overrides.txt", overrides), ("constraints.txt", constraints)):
            (Path(work) / name).write_text("\n".join(lines) + "\n")
        command = [uv, "pip", "compile", "requirements.in", "--override", "overrides.txt", "--constraint", "constraints.txt",
                   "--generate-hashes", "--no-header", "--quiet", "--python-version", profile.python,
                   "--python-platform", profile.platform, "--output-file", "lock.txt"]
        command += ["--exclude-newer", exclude_newer] if exclude_newer else []
        done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise StepFailed(where, "requirements", f"uv could not resolve them: {last}",
                             "fix the spec's requirements or overrides, or the pins that conflict")
        return (Path(work) / "lock.txt").read_text()


def compile_lock(spec: BundleSpec, profile: HostProfile, uv: str, with_rig: bool = True) -> str:
    """Resolve with uv for the host's Python and platform, in two stages: the engine alone as on
    its release day (`exclude_newer`: the versions it was released against), then the engine with
    rig's own requirements, the first stage's pins held as constraints (rig's additions come as of
    today: rig pins what it needs). The host's torch is pinned throughout: an engine's compiled
    extensions are bound to the torch they were built against."""
    overrides = list(spec.overrides) + ([profile.torch_pin()] if profile.torch_pin() else [])
    where = f"--spec {spec.name}"
    engine = _uv_compile(uv, list(spec.requirements), overrides, [], profile, spec.exclude_newer, where)
    if not with_rig:
        return engine
    pins = [f"{entry.name}=={entry.version}" for entry in parse_lock(engine).values()]
    return _uv_compile(uv, list(spec.requirements) + rig_requirements(), overrides, pins, profile, None,
                       f"{where} with rig's requirements")


def select(entries: dict[str, Locked], spec: BundleSpec, profile: HostProfile) -> Selection:
    """Carried = resolved - provided by the host (unless the spec replaces the host's) - left out by
    the spec - what only those pull in."""
    for section in ("leave_out_packages", "replace_host"):
        for name in getattr(spec, section):
            if normalize(name) not in entries:
                raise Invalid(f"--spec {spec.name}", f"{section}.{name}", "not among the resolved packages",
                              "remove it from the spec (the engine does not require it)")
    replace = {normalize(name): why for name, why in spec.replace_host.items()}
    provided = {name: entry.version for name, entry in entries.items() if name in profile.provides and name not in replace}
    replaces_host = {name: {"version": entries[name].version, "host": profile.provides[name], "why": why}
                     for name, why in sorted(replace.items()) if name in profile.provides}
    left_out = {normalize(name): why for name, why in spec.leave_out_packages.items()}
    roots = {normalize(PIN.fullmatch(r)["name"]) for r in spec.requirements if PIN.fullmatch(r)}  # type: ignore[index]
    changed = True
    while changed:  # a package every requirer of which stays behind stays behind too
        changed = False
        for name, entry in entries.items():
            if name in left_out or name in provided or name in roots or not entry.via:
                continue
            requirers = {via for via in entry.via if via in entries}
            if requirers and requirers <= set(left_out):
                left_out[name] = "only needed by " + ", ".join(sorted(requirers))
                changed = True
    carried = [entry for name, entry in sorted(entries.items()) if name not in provided and name not in left_out]
    return Selection(carried, provided, left_out, replaces_host)


def requirements_text(carried: list[Locked]) -> str:
    """pip's hash-checking requirements for the download: every accepted sha256 of each pin."""
    return "".join(f"{e.name}=={e.version} " + " ".join(f"--hash=sha256:{h}" for h in e.hashes) + "\n" for e in carried)
