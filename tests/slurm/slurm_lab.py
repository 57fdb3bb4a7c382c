"""The Slurm tests' cluster: the one SLURM_CONF names, else the lab's (`make slurm-lab` writes
.rig/slurm/slurm.conf). Without one these tests skip with one line; with CI=true they fail instead."""

from __future__ import annotations

import os
import shutil
import subprocess
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
