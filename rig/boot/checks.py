"""Boot checks: the recipe's must/forbid boot-log lines, the adapter manifests, boot time.
A boot that fails them is voided by comparisons and reported, never silently used."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rig.boot.base import BootRecord
from rig.recipe import BootLog, Resolved


@dataclass
class BootCheck:
    boot_id: str
    ok: bool
    healthy_after_s: float | None
    missing: list[str] = field(default_factory=list)
    forbidden: list[str] = field(default_factory=list)
    adapters: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    manifests: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_manifests(directory: str | Path) -> list[dict[str, Any]]:
    manifests = []
    for path in sorted(Path(directory).glob("manifest-*.json")):
        try:
            manifests.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return manifests


def check_log(text: str, boot_log: BootLog) -> tuple[list[str], list[str]]:
    missing = [pattern for pattern in boot_log.must if not re.search(pattern, text)]
    forbidden = []
    for pattern in boot_log.forbid:
        match = re.search(f"^.*(?:{pattern}).*$", text, re.MULTILINE)
        if match:
            forbidden.append(match.group(0).strip()[:300])
    return missing, forbidden


def check_boot(record: BootRecord, resolved: Resolved) -> BootCheck:
    missing, forbidden = check_log(record.log_text(), resolved.boot_log)
    manifests = read_manifests(record.manifest_dir)
    states: dict[str, set[str]] = {}
    for manifest in manifests:
        for name, entry in manifest.get("adapters", {}).items():
            states.setdefault(name, set()).add(entry.get("state", "?"))
    problems = [f"pattern {p!r} never appeared in the boot log" for p in missing]
    problems += [f"forbidden line: {line}" for line in forbidden]
    for use in resolved.adapters:
        seen = states.get(use.name, set())
        if "refused" in seen:
            problems.append(f"adapter {use.name} refused to arm (see the manifest)")
        elif "armed" not in seen and "redundant" not in seen:
            problems.append(f"adapter {use.name} is enabled but no process reported it armed")
    return BootCheck(
        boot_id=record.boot_id, ok=not problems, healthy_after_s=record.healthy_after_s, missing=missing,
        forbidden=forbidden, adapters={name: sorted(s) for name, s in states.items()}, problems=problems,
        manifests=len(manifests),
    )
