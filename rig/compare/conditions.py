"""What besides speed may differ between boots: host and image conditions (fingerprints) and the
lines of the boot logs only one arm printed."""

from __future__ import annotations

import re
from pathlib import Path

from rig.compare.model import BootEntry
from rig.observe.fingerprint import FingerprintDifference, fingerprint_differences, voiding_differences
from rig.typed import Typed


class FingerprintReport(Typed):
    """How the boots' fingerprints differ, and which differences void the comparison."""

    boots: int
    differences: list[FingerprintDifference]
    voiding: list[FingerprintDifference]  # condition differences not accepted with --accept-fingerprint
    accepted: list[str]

_VOLATILE = [
    (re.compile(r"\b\d{1,3}(\.\d{1,3}){3}:\d+"), "<ip>:<port>"),
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d([.,]\d+)?"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d([.,]\d+)?\b"), "<time>"),
    (re.compile(r"\[\d+\]"), "[<pid>]"),
    (re.compile(r"\b(pid|PID)[ =:]\d+"), r"\1=<pid>"),
    (re.compile(r"\b\d+\.\d+(\s*(s|ms|us|it/s|%|GB|MB|tok/s))?"), "<num>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f-]{27}\b"), "<uuid>"),
    (re.compile(r"\d{8}-\d{6}-[\w.-]+-[0-9a-f]{4}"), "<boot>"),
]


def normalize(line: str) -> str:
    for pattern, replacement in _VOLATILE:
        line = pattern.sub(replacement, line)
    return line.strip()


def log_lines(path: str | None) -> set[str]:
    if not path or not Path(path).exists():
        return set()
    return {normalize(line) for line in Path(path).read_text(errors="replace").splitlines() if line.strip()}


def boot_log_diff(entries: list[BootEntry], arms: list[str]) -> dict[str, list[str]]:
    """Lines that appear in some boot of one arm and in no boot of any other arm."""
    per_arm = {arm: set().union(*[log_lines(e.log_path) for e in entries if e.arm == arm and not e.control] or [set()])
               for arm in arms}
    return {arm: sorted(lines - set().union(*[per_arm[o] for o in arms if o != arm]))[:50] for arm, lines in per_arm.items()}


def fingerprint_report(entries: list[BootEntry], accepted: list[str]) -> FingerprintReport:
    fingerprints = {f"{e.index:02d}-{e.arm}": e.fingerprint for e in entries if e.fingerprint and not e.voided}
    differences = fingerprint_differences(fingerprints) if len(fingerprints) > 1 else []  # type: ignore[arg-type]
    voiding = voiding_differences(differences, accepted)
    return FingerprintReport(boots=len(fingerprints), differences=differences, voiding=voiding, accepted=accepted)

