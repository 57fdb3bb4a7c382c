"""Two Slurm nodes (the lab's n1 and n2, Slurm's multiple-slurmd mode) run one job through rig's
launch code: the allocation rig asks for, the step it starts, and the launcher on each node, which
hands the node its rank and the head's address. A CPU torch.distributed (gloo) rendezvous across
the two stands in for the GPU engine."""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

import pytest
from conftest import free_port
from slurm_lab import queue, slurm_cluster  # noqa: F401 - slurm_cluster is a fixture

from rig.boot import slurm_job
from rig.boot.slurm import start_step
from rig.boot.slurm_launch import PLAN_FILE, LaunchPlan, log_name
from rig.deploy.recipe import Resolved, load

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]

STAND_IN = Path(__file__).with_name("gloo_rendezvous.py")


def two_nodes_of(resolved: Resolved) -> Resolved:
    topology = resolved.topology.model_copy(update={"nodes": 2})
    return Resolved(resolved.recipe, resolved.variant, topology, resolved.env, resolved.server_args, resolved.adapters,
                    resolved.boot_log, resolved.audit)


def test_a_two_node_job_hands_each_node_its_rank_and_the_heads_address(tmp_path):
    resolved = two_nodes_of(load("tiny-cpu"))
    name = slurm_job.job_name(f"gloo-{secrets.token_hex(2)}")
    job = slurm_job.allocate(resolved, name, timeout_s=120)
    try:
        nodes = list(slurm_job.state(job).nodes)
        assert len(nodes) == 2, nodes
        argv = [sys.executable, str(STAND_IN), "--dist-init-addr", "${RIG_DIST_INIT_ADDR:?set by the launcher}"]
        plan = LaunchPlan(argv=[argv, argv], dist_port=free_port())
        (tmp_path / PLAN_FILE).write_text(plan.model_dump_json())
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
        step = start_step(job, 2, tmp_path, env, name)
        assert step.wait(timeout=180) == 0, (tmp_path / "srun.log").read_text()
    finally:
        slurm_job.cancel(job)
    seen = [json.loads((tmp_path / log_name(rank)).read_text().splitlines()[-1]) for rank in range(2)]
    head = f"{slurm_job.node_address(nodes[0])}:{plan.dist_port}"
    assert [(s["rank"], s["node_rank"], s["node"]) for s in seen] == [(0, 0, nodes[0]), (1, 1, nodes[1])]
    assert all(s["world"] == 2 and s["sum"] == 3.0 and s["master"] == s["dist_init_addr"] == head for s in seen), seen
    assert not queue(name)
