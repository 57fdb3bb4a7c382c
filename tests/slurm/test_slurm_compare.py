"""`rig compare --driver slurm` on a real cluster (`make slurm-lab`): the token_delay arms' known
effect over ABBA boots that are Slurm jobs, with one job ended by a node failure mid-load on the way
(the load run stops, the comparison stops naming NODE_FAIL, and `--resume` boots that boot again),
and nothing left in squeue or on any node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, free_port
from slurm_lab import engine_processes, fail_node, queue, restore_node, slurm_cluster  # noqa: F401 - slurm_cluster is a fixture

from rig.exits import Exit

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]

DELAY_MS = 20
# Two pairs: what is Slurm's here is that its boots compare, fail and resume; that three pairs of real
# boots find this delay is held on native boots (tests/compare/test_compare_tiny.py).
PAIRS = 2


def test_a_comparison_of_slurm_boots_survives_a_node_failure_mid_load_and_finds_the_delay(tmp_path):
    env, port = {**os.environ, "RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state")}, free_port()
    command = [sys.executable, "-m", "rig", "compare", "tiny-cpu", "--arm", "off:@delay,RIG_TOKEN_DELAY_MS=0",
               "--arm", f"on:@delay,RIG_TOKEN_DELAY_MS={DELAY_MS}", "--driver", "slurm", "--boots", str(PAIRS), "--rounds", "1",
               "--scenario", "prose-c1", "--small", "--workers", "1", "--duration", "3", "--port", str(port)]
    first = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state_file, deadline, records = tmp_path / "state" / "tiny-cpu.json", time.monotonic() + 240, []
    while time.monotonic() < deadline and not records:  # the second boot under load: its first records written
        records = [p for p in (tmp_path / "results" / "compare").glob("*/runs/01-on/attempt-1/round-0/*/records-*.jsonl")
                   if p.stat().st_size]
        time.sleep(0.1)
    assert records, "the second boot never came under load"
    out = records[0].parents[5]
    boot = json.loads(state_file.read_text())
    fail_node(boot["slurm_nodes"][0])
    try:
        _, stderr = first.communicate(timeout=240)
    finally:
        restore_node(boot["slurm_nodes"][0])
    assert first.returncode == Exit.FAILED, stderr[-2000:]
    assert not (out / "boots" / "01-on.json").exists()  # no entry: the boot is redone, not voided
    assert f"--resume {out}" in stderr and "Slurm job state NODE_FAIL" in stderr, stderr[-2000:]
    saved = json.loads((Path(boot["boot_dir"]) / "boot.json").read_text())
    assert saved["status"] == "failed" and saved["slurm_end"].startswith("Slurm job state NODE_FAIL"), saved
    assert not queue() and not engine_processes(port)

    resumed = subprocess.run([*command, "--resume", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode in (Exit.OK, Exit.UNUSABLE), resumed.stdout[-2000:] + resumed.stderr[-2000:]
    saved = json.loads((out / "compare.json").read_text())
    assert saved["boots"]["used"] == 2 * PAIRS and not saved["boots"]["voided"], saved["boots"]
    assert json.loads((out / "boots" / "01-on.json").read_text())["attempt"] == 2
    stats = saved["scenarios"]["prose-c1"]["vs"]["on"]
    left_out = [r for x in saved["boots"]["exclusions"] for r in x["rounds"]]
    assert all("client INVALID" in r for r in left_out), left_out
    # The injected delay is what the per-token interval must meet (the report's known-effect rule); with
    # one degree of freedom a busy box's swings may widen the interval across 0, but never to "faster"
    # (a busy box may leave a pair out for the client's timing, as named above: then there is no interval).
    [effect] = [e for e in saved["known_effects"] if e["arm"] == "on" and e["adapter"] == "token_delay"]
    assert DELAY_MS <= effect["per_token_ms"] < DELAY_MS * 1.5, effect
    assert effect["covered"] is (True if stats["pairs"] >= 2 else None), (effect, stats)
    assert stats["verdict"] != "faster" and (not stats["pairs"] or stats["delta"] < 0), stats
    nodes = {json.loads(p.read_text())["fingerprint"]["slurm_nodes"] for p in (out / "boots").glob("*.json")}
    assert len(nodes) == 1, nodes  # every boot on the same node set: nothing voided for it
    assert not queue() and not state_file.exists() and not engine_processes(port)
