"""What runs on every node of a Slurm boot (`srun ... python -m rig.boot.slurm_launch BOOT_DIR`).

Each node learns its place from Slurm's own environment, not from a script of ours: its rank is
SLURM_NODEID, the head is the first node of SLURM_JOB_NODELIST, and the head's address is the
NodeAddr Slurm reaches it at. The launcher writes the node's host fingerprint, points its output
at the node's own log (the head's is the boot's server.log), hands the rank and the head's
address to the engine (its multi-node flags, and MASTER_ADDR/MASTER_PORT, RANK, WORLD_SIZE for
torch.distributed), then becomes the engine (exec): Slurm signals the engine itself on scancel.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from rig.atomic import write_text_atomic
from rig.engines import MULTINODE_ADDR_VAR, MULTINODE_HOST_VAR, MULTINODE_PORT_VAR
from rig.typed import Typed

PLAN_FILE = "launch.json"
# The head's address where an argv names it with shell syntax (`${RIG_DIST_INIT_ADDR:?...}`, as in
# the rendered compose files): replaced here, where no shell runs.
_REFERENCE = re.compile(r"\$\{(" + "|".join((MULTINODE_ADDR_VAR, MULTINODE_HOST_VAR, MULTINODE_PORT_VAR)) + r")(?::?[-?][^}]*)?\}")


class LaunchPlan(Typed):
    """What the driver hands every node (BOOT_DIR/launch.json): the engine's argv for each rank."""

    argv: list[list[str]]  # argv[rank]
    dist_port: int  # the port the head's rendezvous listens on (SGLang --dist-init-addr, torch MASTER_PORT)


def log_name(rank: int) -> str:
    """The node's log in the boot directory: the head's is server.log (the boot's log)."""
    return "server.log" if rank == 0 else f"server.rank{rank}.log"


def fingerprint_name(rank: int) -> str:
    return f"fingerprint.rank{rank}.json"


def node_argv(plan: LaunchPlan, rank: int, head_address: str) -> list[str]:
    """The argv of the node of `rank`, with the head's host:port where the argv names it."""
    values = head_variables(head_address, plan.dist_port)
    return [_REFERENCE.sub(lambda found: values[found.group(1)], part) for part in plan.argv[rank]]


def head_variables(head_address: str, dist_port: int) -> dict[str, str]:
    return {MULTINODE_ADDR_VAR: f"{head_address}:{dist_port}", MULTINODE_HOST_VAR: head_address,
            MULTINODE_PORT_VAR: str(dist_port)}


def node_environment(environ: dict[str, str], rank: int, nodes: int, head_address: str, dist_port: int) -> dict[str, str]:
    return {**environ, **head_variables(head_address, dist_port), "MASTER_ADDR": head_address,
            "MASTER_PORT": str(dist_port), "RANK": str(rank), "WORLD_SIZE": str(nodes), "RIG_NODE_RANK": str(rank),
            "RIG_NNODES": str(nodes)}


def main(argv: list[str]) -> int:
    from rig.boot.slurm_job import hostnames, node_address
    from rig.observe.fingerprint import host_fingerprint

    boot_dir = Path(argv[0])
    plan = LaunchPlan.model_validate_json((boot_dir / PLAN_FILE).read_text())
    rank = int(os.environ["SLURM_NODEID"])
    nodes = hostnames(os.environ["SLURM_JOB_NODELIST"])
    head = node_address(nodes[0])
    fingerprint = host_fingerprint().model_dump(mode="json")
    fingerprint["hostname"] = os.environ.get("SLURMD_NODENAME", fingerprint["hostname"])
    write_text_atomic(boot_dir / fingerprint_name(rank), json.dumps(fingerprint, indent=1))
    command = node_argv(plan, rank, head)
    log = os.open(boot_dir / log_name(rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    print(f"rig: node {os.environ.get('SLURMD_NODENAME', '?')} rank {rank} of {len(nodes)}, head {nodes[0]} at {head}",
          flush=True)
    os.execvpe(command[0], command, node_environment(dict(os.environ), rank, len(nodes), head, plan.dist_port))  # noqa: S606 - the engine's argv, no shell
    return 127  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
