"""`rig compare`: boots each arm in ABBA order through the boot drivers, discards the first run
after every boot, runs R interleaved rounds, checks greedy identity, shuts every boot down
(also when it fails), and writes each finished boot at once so an interrupted comparison
can continue with --resume."""

from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rig.boot import BootFailed, driver_for
from rig.boot import base as boot_base
from rig.boot.checks import check_boot, read_manifests
from rig.chat import stream_chat
from rig.compare.arms import Arm, boot_order
from rig.compare.stats import figure
from rig.errors import RigError
from rig.load.command import model_dir_for, run_scenarios
from rig.load.runner import LoadTarget
from rig.load.scenarios import greedy_prompts, load_scenario


@dataclass
class ComparePlan:
    recipe: str
    arms: list[Arm]
    control: Arm | None
    boots: int
    rounds: int
    scenarios: list[str]
    small: bool
    workers: int | None = None
    duration_s: float | None = None
    created: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["order"] = [(block, arm.name) for block, arm in self.order()]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ComparePlan:
        data = {k: v for k, v in data.items() if k != "order"}
        data["arms"] = [Arm(**a) for a in data["arms"]]
        data["control"] = Arm(**data["control"]) if data["control"] else None
        return cls(**data)

    def order(self) -> list[tuple[int, Arm]]:
        order = boot_order(self.arms, self.boots)
        return order + ([(0, self.control)] if self.control else [])


def greedy_identity(base_url: str, model: str, small: bool) -> dict[str, str]:
    """Each fixed prompt at temperature 0 and concurrency 1, hashed."""
    prompts, max_tokens = greedy_prompts(small)
    hashes = {}
    for prompt in prompts:
        text = stream_chat(base_url, model, prompt["text"], max_tokens, out=io.StringIO())["text"]
        hashes[prompt["name"]] = hashlib.sha256(text.encode()).hexdigest()
    return hashes


def run_boot(plan: ComparePlan, index: int, block: int, arm: Arm, out: Path, progress: bool) -> dict[str, Any]:
    resolved = arm.resolve(plan.recipe)
    driver = driver_for(resolved)
    entry: dict[str, Any] = {"index": index, "block": block, "arm": arm.name, "spec": arm.spec, "control": arm is plan.control,
                             "boot_id": None, "voided": False, "problems": [], "rounds": [], "greedy": {}, "check": None,
                             "healthy_after_s": None, "log_path": None, "adapter_stats": {}}
    try:
        record = driver.up(resolved, overlay=arm.overlay(), progress=progress)
    except BootFailed as error:
        entry.update(voided=True, problems=[str(error)])
        return entry
    entry.update(boot_id=record.boot_id, healthy_after_s=record.healthy_after_s, log_path=record.log_path)
    try:
        check = check_boot(record, resolved)
        entry["check"] = check.to_json()
        if not check.ok:
            entry.update(voided=True, problems=check.problems)
            return entry
        target = LoadTarget(resolved, record, model_dir_for(resolved))
        for round_index in range(0 if arm is plan.control else plan.rounds):
            shift = round_index % len(plan.scenarios)
            names = plan.scenarios[shift:] + plan.scenarios[:shift]  # interleaved: the order rotates per round
            summaries = run_scenarios(target, names, plan.small, plan.workers, out / "runs" / f"{index:02d}-{arm.name}" / f"round-{round_index}",
                                      progress=progress, duration_s=plan.duration_s)
            measured = {s["scenario"]["name"]: s for s in summaries if not s["warmup"]}
            entry["rounds"].append({name: {"figure": figure(s), "client_valid": s["client"]["valid"] or bool(s["client"].get("note")),
                                           "errors": s["metrics"]["requests"]["errors"]} for name, s in measured.items()})
        entry["greedy"] = greedy_identity(record.base_url, record.served_model or "", plan.small)
        # What the adapters report they actually did during the boot (e.g. token_delay's injected_ms).
        entry["adapter_stats"] = {name: adapter.get("stats") for manifest in read_manifests(record.manifest_dir)
                                  for name, adapter in manifest.get("adapters", {}).items() if adapter.get("stats")}
    except RigError as error:
        entry.update(voided=True, problems=[str(error)])
    finally:
        driver.down(record)
    return entry


def run_compare(plan: ComparePlan, out: Path, progress: bool = True) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    plan_path = out / "plan.json"
    if plan_path.exists():
        saved = ComparePlan.from_json(json.loads(plan_path.read_text()))
        if [a.spec for a in saved.arms] != [a.spec for a in plan.arms] or saved.scenarios != plan.scenarios:
            raise RigError(str(plan_path), "arms/scenarios", "this directory holds a different comparison",
                           "resume with the same arms and scenarios, or start a new comparison")
        plan = saved
    else:
        plan_path.write_text(json.dumps(plan.to_json(), indent=1))
    for name in plan.scenarios:
        load_scenario(name)
    entries = []
    for index, (block, arm) in enumerate(plan.order()):
        path = out / "boots" / f"{index:02d}-{arm.name}.json"
        if path.exists():
            entries.append(json.loads(path.read_text()))
            continue
        if progress:
            print(f"compare: boot {index + 1}/{len(plan.order())}: {arm.name} ({arm.spec}), block {block}")
        entry = run_boot(plan, index, block, arm, out, progress)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entry, indent=1))
        entries.append(entry)
    return entries


def compare_root() -> Path:
    return boot_base.RESULTS_DIR / "compare" / time.strftime("%Y%m%d-%H%M%S")
