"""What a Slurm boot asks for and launches, without a cluster: the allocation a recipe's topology
becomes, every rank's argv with the head's address filled in (held to SGLang's own parser, read
from its release wheel), the recipe's slurm section, and a comparison whose arms ran on other nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import REPO
from oracles.engine_args import launch_args, sglang_grammar

from rig.boot.slurm import SlurmDriver
from rig.boot.slurm_job import JobState, allocation_args
from rig.boot.slurm_launch import LaunchPlan, node_argv, node_environment
from rig.deploy.recipe import load, parse_recipe
from rig.drift import engine_release, fetch_wheel
from rig.errors import RigError
from rig.observe.fingerprint import Fingerprint, fingerprint_differences, voiding_differences

HEAD = "10.0.0.1"


def test_a_cpu_recipe_asks_for_its_nodes_and_no_gpus_with_partition_and_account_from_the_environment():
    args = allocation_args(load("tiny-cpu"), {"RIG_SLURM_PARTITION": "debug", "RIG_SLURM_ACCOUNT": "team", "RIG_SLURM_TIME": "10"})
    assert args == ["--nodes", "1", "--ntasks-per-node", "1", "--time", "10", "--partition", "debug", "--account", "team"]


def test_a_multi_node_gpu_recipe_asks_for_gpus_on_every_node():
    args = allocation_args(load("mia-tp4:spark"), {})
    assert args[:6] == ["--nodes", "4", "--ntasks-per-node", "1", "--gpus-per-node", "1"] and "--partition" not in args


def _recipe_with(tmp_path: Path, slurm: dict) -> Path:
    data = yaml.safe_load((REPO / "recipes" / "tiny-cpu.yaml").read_text())
    data["driver"], data["slurm"] = "slurm", slurm
    path = tmp_path / "tiny-cpu.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_recipes_slurm_section_reaches_the_allocation_and_the_environment_wins(tmp_path):
    recipe = parse_recipe(_recipe_with(tmp_path, {"partition": "gpu", "time": "0:30:00", "extra_args": ["--exclusive"]}))
    resolved = load("tiny-cpu")
    resolved.recipe = recipe
    assert allocation_args(resolved, {}) == ["--nodes", "1", "--ntasks-per-node", "1", "--time", "0:30:00",
                                             "--partition", "gpu", "--exclusive"]
    assert "debug" in allocation_args(resolved, {"RIG_SLURM_PARTITION": "debug"})


@pytest.mark.parametrize(("slurm", "field"), [({"time": "soon"}, "slurm.time"), ({"extra_args": ["-w n1; id"]}, "slurm.extra_args.0"),
                                              ({"partiton": "gpu"}, "slurm")])
def test_a_bad_slurm_section_is_refused_in_one_line(tmp_path, slurm, field):
    path = _recipe_with(tmp_path, slurm)
    with pytest.raises(RigError) as caught:
        parse_recipe(path)
    assert str(caught.value).startswith(f"{path}: {field}") and "\n" not in str(caught.value), caught.value


def test_every_rank_of_a_multi_node_sglang_recipe_parses_under_its_release_with_the_heads_address():
    resolved = load("mia-tp4:spark")
    release, _ = engine_release(resolved.recipe)
    grammar = sglang_grammar(fetch_wheel("sglang", release))
    plan = SlurmDriver().plan(resolved, resolved.recipe.model.path, 30000)
    assert len(plan.argv) == resolved.topology.nodes == 4
    for rank in range(4):
        parsed = grammar.check(launch_args(node_argv(plan, rank, HEAD)), f"mia-tp4:spark node {rank}")
        assert (parsed.nnodes, parsed.node_rank, parsed.tp_size) == (4, rank, 4)
        assert parsed.dist_init_addr == f"{HEAD}:{plan.dist_port}" and parsed.port == 30000


def test_the_launcher_hands_each_node_its_rank_and_the_heads_address():
    plan = LaunchPlan(argv=[["engine", "--at", "${RIG_DIST_INIT_ADDR:?x}", "--host", "${RIG_DIST_INIT_HOST:?y}",
                             "--port", "${RIG_DIST_INIT_PORT:?z}", "$HOME"]] * 2, dist_port=5000)
    assert node_argv(plan, 1, HEAD) == ["engine", "--at", f"{HEAD}:5000", "--host", HEAD, "--port", "5000", "$HOME"]
    env = node_environment({"PATH": "/bin"}, 1, 2, HEAD, 5000)
    assert {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "RIG_DIST_INIT_ADDR")} == {
        "MASTER_ADDR": HEAD, "MASTER_PORT": "5000", "RANK": "1", "WORLD_SIZE": "2", "RIG_DIST_INIT_ADDR": f"{HEAD}:5000"}


def test_a_job_slurm_ended_names_its_state_and_reason():
    assert not JobState("TIMEOUT", "TimeLimit").live and JobState("RUNNING").live
    assert JobState("NODE_FAIL", "NodeDown").why_ended() == "Slurm job state NODE_FAIL (NodeDown)"
    assert JobState("CANCELLED", "None").why_ended() == "Slurm job state CANCELLED"


def _fingerprint(nodes: list[str]) -> Fingerprint:
    one = Fingerprint(taken_at=0.0, hostname="h", kernel="k", os="o", cpu="c", cpu_count=2, environment={})
    return one.model_copy(update={"slurm_nodes": ",".join(nodes), "nodes": [one.model_copy(update={"hostname": n}) for n in nodes]})


def test_arms_on_other_node_sets_void_the_comparison_unless_accepted():
    differences = fingerprint_differences({"off": _fingerprint(["n1"]), "on": _fingerprint(["n2"])})
    voiding = [d.field for d in voiding_differences(differences)]
    assert voiding == ["slurm_nodes"], differences
    assert not voiding_differences(differences, ["slurm_nodes"])
    assert not fingerprint_differences({"off": _fingerprint(["n1"]), "on": _fingerprint(["n1"])})


@pytest.mark.slow
def test_every_rank_of_the_two_node_vllm_recipe_parses_under_vllms_own_parser():
    """llama8b-vllm:2node (vLLM 0.24.0, two nodes of one GPU each, TP2): the head serves, the other node runs headless,
    both with the head's address and port; a misspelled multi-node flag is refused by the same parser."""
    from oracles.vllm_args import parse_vllm, serve_args

    resolved = load("llama8b-vllm:2node")
    assert (resolved.topology.nodes, resolved.topology.gpus_per_node, resolved.topology.tp) == (2, 1, 2)
    plan = SlurmDriver().plan(resolved, resolved.recipe.model.path, 8000)
    argvs = [serve_args(node_argv(plan, rank, HEAD)) for rank in range(2)]
    head, worker, misspelled = parse_vllm(resolved.recipe.engine.version, [*argvs, [*argvs[1], "--master-adress", HEAD]])
    for rank, parsed in enumerate((head, worker)):
        assert parsed is not None, argvs[rank]
        assert (parsed["nnodes"], parsed["node_rank"], parsed["master_addr"], parsed["master_port"]) == (2, rank, HEAD, plan.dist_port)
        assert parsed["tensor_parallel_size"] == 2 and parsed["headless"] is (rank == 1) and parsed["port"] == 8000
    assert misspelled is None
