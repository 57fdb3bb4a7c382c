"""Boot checks: the recipe's own must/forbid lines, plus expectations derived from its adapters.
A boot that fails them is voided by comparisons and reported, never silently used.

What each adapter must show follows from its gate in the environment the boot actually ran
(recipe + arm overlay), so `before:GATE=0 after:GATE=1` works for every adapter:
- gate on: `<name> ARMED` (or a redundancy refusal) in the log and an armed/redundant state in
  the manifests, never `<name> REFUSED (refused)`;
- gate off: no process reports it armed;
- after load (`after_load=True`): every armed adapter shows first-use evidence, a process that
  patched layers also used them, and no kernel rejected a shape an adapter produced to rescue it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field

from rig.boot.record import BootRecord
from rig.deploy.recipe import Resolved
from rig.deploy.recipe_model import BootLog
from rig.engines import ENGINES
from rig.log_patterns import compile_regex
from rig.observe.fingerprint import read_manifest
from rig.typed import Typed
from rig_adapters.gates import gate_is_on
from rig_adapters.registry import BY_NAME

REJECTED_LINE = re.compile(r"rejected N=(\d+) K=(\d+)")


class BootCheck(Typed):
    """A boot's own evidence against its recipe: boot-log rules, adapter ARMED lines and manifests."""

    boot_id: str
    ok: bool
    healthy_after_s: float | None
    missing: list[str] = Field(default_factory=list)
    forbidden: list[str] = Field(default_factory=list)
    adapters: dict[str, list[str]] = Field(default_factory=dict)
    expected: dict[str, str] = Field(default_factory=dict)  # adapter -> "on" | "off"
    problems: list[str] = Field(default_factory=list)
    manifests: int = 0
    # Variables the recipe or the arm set that the engine says it does not know (also in problems):
    # every boot of that configuration would be voided the same way, so a comparison stops at the first.
    unknown_settings: list[str] = Field(default_factory=list)




def read_manifests(directory: str | Path) -> list[dict[str, Any]]:
    """The manifests the engine's processes wrote (one per process). One that cannot be read as a
    JSON object (a FIFO or a device in its place, too large, cut, not JSON) is left out: what it
    would have shown is then missing, and the checks that need it say so."""
    return [data for path in sorted(Path(directory).glob("manifest-*.json")) if (data := read_manifest(path)) is not None]


def adapter_expectations(resolved: Resolved, overlay: dict[str, str] | None = None) -> dict[str, bool]:
    """adapter -> whether its gate is on in the environment this boot runs with."""
    env = {**resolved.full_env(), **(overlay or {})}
    return {use.name: gate_is_on(env.get(BY_NAME[use.name].gate)) for use in resolved.adapters}


def derived_boot_log(expectations: dict[str, bool]) -> BootLog:
    must = [rf"{re.escape(name)} (ARMED|REFUSED \(redundant\))" for name, on in expectations.items() if on]
    forbid = [rf"{re.escape(name)} REFUSED \(refused\)" for name, on in expectations.items() if on]
    return BootLog(must=must, forbid=forbid)


def check_log(text: str, boot_log: BootLog) -> tuple[list[str], list[str]]:
    """Patterns run with RE2 (rig/log_patterns.py): linear in the log, whatever the pattern. A forbid
    pattern reports the whole line it matched in (^ and $ match at each line)."""
    missing = [pattern for pattern in boot_log.must if not compile_regex(pattern).search(text)]
    forbidden = []
    for pattern in boot_log.forbid:
        match = compile_regex(pattern, multiline=True).search(text)
        if match:
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            forbidden.append(text[start:end if end >= 0 else len(text)].strip()[:300])
    return missing, forbidden


def _evidence_problems(manifests: list[dict[str, Any]], log_text: str, expectations: dict[str, bool]) -> list[str]:
    problems = []
    produced: dict[tuple[int, ...], str] = {}
    for manifest in manifests:
        for name, entry in manifest.get("adapters", {}).items():
            for layer in entry.get("layers_patched") or []:
                if isinstance(layer, dict) and layer.get("shape"):
                    produced[tuple(layer["shape"])] = name
    for manifest in manifests:
        for name, entry in manifest.get("adapters", {}).items():
            for rejected in entry.get("shapes_rejected") or []:
                shape = tuple(rejected.get("shape") or ())
                if shape in produced:
                    problems.append(f"{name} rejected N={shape[0]} K={shape[1]}, the shape {produced[shape]} padded to rescue it")
    for match in REJECTED_LINE.finditer(log_text):
        shape = (int(match.group(1)), int(match.group(2)))
        if shape in produced and not any(f"N={shape[0]} K={shape[1]}" in p for p in problems):
            problems.append(f"the log shows N={shape[0]} K={shape[1]} rejected, the shape {produced[shape]} padded to rescue it")
    for name, on in expectations.items():
        if not on:
            continue
        entries = [(m, m.get("adapters", {}).get(name)) for m in manifests]
        armed = [(m, e) for m, e in entries if e and e.get("state") == "armed"]
        if armed and not any(e.get("first_use") for _, e in armed):
            problems.append(f"adapter {name} armed but no process shows first use: it never ran on its target")
        for manifest, entry in armed:
            if entry.get("layers_patched") and not entry.get("first_use"):
                problems.append(f"adapter {name} patched {len(entry['layers_patched'])} layer(s) in pid {manifest.get('pid')} "
                                "but that process never used them")
    return problems


def unknown_settings(log_text: str, resolved: Resolved, overlay: dict[str, str] | None) -> list[str]:
    """Variables the recipe or the arm set that the engine itself says it does not know (its boot log,
    Engine.unknown_env_line): such a setting changes nothing, so an arm made of it would compare a
    configuration with itself. A name only the host's environment carries is the host's business."""
    line = ENGINES[resolved.recipe.engine.name].unknown_env_line
    if line is None:
        return []
    ours = {*resolved.env, *resolved.host_env(), *(overlay or {})}
    named = {match.group(1) for match in compile_regex(line, multiline=True).finditer(log_text)}
    return [f"{name}: {resolved.recipe.engine.name} says it knows no such variable (its boot log), so setting it "
            "changes nothing; fix the name (the engine's own list of variables) or drop it" for name in sorted(named & ours)]


def check_boot(record: BootRecord, resolved: Resolved, overlay: dict[str, str] | None = None,
               after_load: bool = False) -> BootCheck:
    """`overlay` is what the boot added to the recipe's environment (an arm); with `after_load`
    the evidence that adapters ran on their targets is required too (call it after load)."""
    expectations = adapter_expectations(resolved, overlay if overlay is not None else record.overlay)
    derived = derived_boot_log(expectations)
    text = record.log_text()
    missing, forbidden = check_log(text, BootLog(must=resolved.boot_log.must + derived.must,
                                                 forbid=resolved.boot_log.forbid + derived.forbid))
    manifests = read_manifests(record.manifest_dir)
    states: dict[str, set[str]] = {}
    for manifest in manifests:
        for name, entry in manifest.get("adapters", {}).items():
            states.setdefault(name, set()).add(entry.get("state", "?"))
    problems = [f"pattern {p!r} never appeared in the boot log" for p in missing]
    problems += [f"forbidden line: {line}" for line in forbidden]
    unknown = unknown_settings(text, resolved, overlay if overlay is not None else record.overlay)
    problems += unknown
    for name, on in expectations.items():
        seen = states.get(name, set())
        if on and "refused" in seen:
            problems.append(f"adapter {name} refused to arm (see the manifest)")
        elif on and "armed" not in seen and "redundant" not in seen:
            problems.append(f"adapter {name} is enabled but no process reported it armed")
        elif not on and "armed" in seen:
            problems.append(f"adapter {name} has its gate off in this boot but a process reported it armed")
    if after_load:
        problems += _evidence_problems(manifests, text, expectations)
    return BootCheck(
        boot_id=record.boot_id, ok=not problems, healthy_after_s=record.healthy_after_s, missing=missing,
        forbidden=forbidden, adapters={name: sorted(s) for name, s in states.items()},
        expected={name: "on" if on else "off" for name, on in expectations.items()}, problems=problems,
        manifests=len(manifests), unknown_settings=unknown,
    )
