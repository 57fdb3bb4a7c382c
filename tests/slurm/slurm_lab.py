"""The Slurm tests' cluster: the one SLURM_CONF names, else the lab's (`make slurm-lab` writes
.rig/slurm/slurm.conf). Without one these tests skip with one line; with CI=true they fail instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import require_lab

REPO = Path(__file__).resolve().parents[2]
LAB_CONF = REPO / ".rig" / "slurm" / "slurm.conf"


def cluster_missing() -> str | None:
    """Why no Slurm cluster answers here, or None (SLURM_CONF is set for the session when found)."""
    if not shutil.which("sinfo") or not shutil.which("salloc"):
        return "no Slurm client commands (sinfo, salloc)"
    if "SLURM_CONF" not in os.environ and LAB_CONF.exists():
        os.environ["SLURM_CONF"] = str(LAB_CONF)
    try:
        found = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, check=False, timeout=15)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 15 s"
    if found.returncode != 0:
        return f"sinfo failed ({(found.stderr.strip().splitlines() or ['no message'])[-1]})"
    usable = [line.split()[0] for line in found.stdout.splitlines() if line.split()[1].rstrip("*") in ("idle", "mix", "alloc")]
    return None if usable else "no node of the cluster is idle, mixed or allocated"


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    reason = cluster_missing()
    require_lab(reason, f"no Slurm cluster ({reason}): run `make slurm-lab`", "slurm")


def queue(name_prefix: str = "rig-") -> list[str]:
    """Jobs of rig's in squeue (their names start with rig-), as `id name state` lines."""
    found = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True, check=True, timeout=30)
    return [line for line in found.stdout.splitlines() if line.split()[1].startswith(name_prefix)]


def engine_processes(port: int) -> list[str]:
    """Processes serving `port` (an argv with `--port PORT`) on this machine, which runs every node
    of the lab: what a job left behind on any of them."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:  # ended meanwhile
            continue
        if any(a == "--port" and b == str(port) for a, b in zip(argv, argv[1:], strict=False)):
            found.append(f"{cmdline.parent.name}: {' '.join(argv)[:200]}")
    return found


def fail_node(node: str) -> None:
    """What a node failure looks like to Slurm: the node set DOWN, which ends every job on it."""
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=rig test: node failure"],
                   check=True, timeout=30)


def restore_node(node: str, timeout_s: float = 90) -> None:
    """The failed node back in service (its slurmd still runs: the lab's ReturnToService=2 takes it
    back as it registers, RESUME sooner), waited for until Slurm offers it again."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%t"], capture_output=True, text=True, timeout=30)
        if found.stdout.strip().rstrip("*") in ("idle", "mix", "alloc"):
            return
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True, timeout=30)
        time.sleep(1)
    raise AssertionError(f"node {node} did not come back within {timeout_s:.0f} s: {found.stdout.strip()}")
