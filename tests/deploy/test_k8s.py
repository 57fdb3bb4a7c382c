"""Rendered Kubernetes manifests: accepted by the real Kubernetes and LeaderWorkerSet schemas, strict;
carrying what the compose file of the same recipe carries; refused when one field is broken."""

from __future__ import annotations

import copy
import re
from typing import Any

import jsonschema
import pytest
import yaml
from conftest import REPO
from k8s_schemas import K8S_VERSIONS, validate

from rig import grammar
from rig.deploy import k8s
from rig.deploy.recipe import Recipe, all_recipe_paths, parse_recipe
from rig.deploy.render import rendered_files
from rig.errors import RigError

K8S_FILES = sorted((REPO / "k8s").glob("*.yaml"))
VARIANTS = [(recipe, variant) for recipe in (parse_recipe(p) for p in all_recipe_paths()) if recipe.image
            for variant in (recipe.variants or [None])]


def _documents(path) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(path.read_text()))


def _by_kind(path) -> dict[str, dict[str, Any]]:
    return {document["kind"]: document for document in _documents(path)}


def _pods(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]
    if workload["kind"] == "Deployment":
        return [spec["template"]["spec"]]
    return [spec["leaderWorkerTemplate"][role]["spec"] for role in ("leaderTemplate", "workerTemplate")]


def test_every_recipe_with_an_image_renders_one_manifest_file_per_compose_file():
    expected = {p for r in all_recipe_paths() for p in rendered_files(parse_recipe(r)) if p.parent == REPO / "k8s"}
    assert set(K8S_FILES) == expected
    assert {p.name for p in K8S_FILES} == {p.name for p in (REPO / "compose").glob("*.yaml")}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("path", K8S_FILES, ids=lambda p: p.name)
def test_manifest_passes_the_real_schemas_strictly(path, version):
    documents = _documents(path)
    assert [d["kind"] for d in documents][0] == "Service" and len(documents) == 2
    for document in documents:
        validate(document, version)
        assert k8s.DNS_1035_LABEL.fullmatch(document["metadata"]["name"]), document["metadata"]["name"]


def test_every_object_name_is_its_own():
    names = [(d["kind"], d["metadata"]["name"]) for path in K8S_FILES for d in _documents(path)]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize(("recipe", "variant"), VARIANTS, ids=lambda v: v.name if isinstance(v, Recipe) else str(v))
def test_manifest_carries_what_the_compose_file_carries(recipe, variant):
    resolved = recipe.variant(variant)
    compose = yaml.safe_load((REPO / "compose" / k8s.k8s_path(resolved).name).read_text())
    objects = _by_kind(k8s.k8s_path(resolved))
    service = objects["Service"]
    workload = objects["LeaderWorkerSet" if resolved.topology.nodes > 1 else "Deployment"]
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"][0]["port"] == recipe.serving.port
    assert workload["metadata"]["annotations"]["rig/base-image"].endswith(
        next(iter(compose["services"].values()))["build"]["args"]["BASE_DIGEST"])
    pods = _pods(workload)
    ranks = [pods[0]] + [pods[-1]] * (resolved.topology.nodes - 1)  # the leader is rank 0, the workers the others
    for pod, compose_service in zip(ranks, compose["services"].values(), strict=True):
        container = pod["containers"][0]
        assert container["image"] == re.sub(r"\$\{\w+:-([\w.-]+)\}", r"\1", compose_service["image"])
        assert pod["nodeSelector"]["kubernetes.io/arch"] == compose_service["platform"].removeprefix("linux/")
        shm = next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]
        assert shm == {"medium": "Memory", "sizeLimit": k8s.quantity(compose_service["shm_size"])}
        assert {m["mountPath"] for m in container["volumeMounts"] if m["name"] == "dshm"} == {"/dev/shm"}
        env = {e["name"]: e for e in container["env"]}
        for name, value in compose_service["environment"].items():
            if name == grammar.KEY_VARIABLE:  # from the Secret, optional, never a value
                assert env[name] == {"name": name, "valueFrom": {"secretKeyRef": {
                    "name": k8s.API_KEY_SECRET, "key": grammar.KEY_VARIABLE, "optional": True}}}
            else:  # the adapters' gates, the recipe's env, host_env at its default
                default = re.fullmatch(r"\$\{\w+:-(.*)\}", value)
                assert env[name]["value"] == (default.group(1) if default else value), name
        devices = compose_service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        if devices:
            count = devices[0].get("count", len(devices[0].get("device_ids", [])))
            assert container["resources"] == {"limits": {k8s.GPU_RESOURCE: count}, "requests": {k8s.GPU_RESOURCE: count}}
        else:
            assert "resources" not in container
        model_mounts = [m for m in container["volumeMounts"] if m["name"] == "model"]
        if any("RIG_MODEL_DIR" in v for v in compose_service["volumes"]):
            assert model_mounts == [{"name": "model", "mountPath": recipe.model.path, "readOnly": True}]
            claim = next(v for v in pod["volumes"] if v["name"] == "model")["persistentVolumeClaim"]
            assert claim == {"claimName": k8s.model_claim(resolved), "readOnly": True}
        else:
            assert model_mounts == []
        if "healthcheck" in compose_service:
            probe = container["readinessProbe"]["httpGet"]
            assert probe == {"path": recipe.serving.health, "port": recipe.serving.port}
            assert f":{probe['port']}{probe['path']}'" in compose_service["healthcheck"]["test"][-1]
        if resolved.topology.nodes == 1:
            assert container["args"] == compose_service["command"]


def test_the_api_key_never_has_a_value():
    for path in K8S_FILES:
        text = path.read_text()
        assert "kind: Secret" not in text
        for document in _documents(path):
            for pod in (_pods(document) if document["kind"] != "Service" else []):
                for container in pod["containers"]:
                    entry = next(e for e in container["env"] if e["name"] == grammar.KEY_VARIABLE)
                    assert "value" not in entry and entry["valueFrom"]["secretKeyRef"]["name"] == k8s.API_KEY_SECRET


def test_multinode_recipe_is_one_leader_worker_set_with_ranks_from_lws():
    objects = _by_kind(REPO / "k8s" / "mia-tp4.spark.yaml")
    lws = objects["LeaderWorkerSet"]["spec"]
    template = lws["leaderWorkerTemplate"]
    assert lws["replicas"] == 1 and template["size"] == 4
    leader, worker = (template[role]["spec"] for role in ("leaderTemplate", "workerTemplate"))
    for pod in (leader, worker):
        args = pod["containers"][0]["args"]
        flags = dict(zip(args, args[1:], strict=False))
        assert flags["--node-rank"] == "$(LWS_WORKER_INDEX)" and flags["--nnodes"] == "4"
        assert flags["--dist-init-addr"] == f"$(LWS_LEADER_ADDRESS):{k8s.DIST_INIT_PORT}"
        assert pod["hostNetwork"] is True and pod["containers"][0]["resources"]["limits"][k8s.GPU_RESOURCE] == 1
    assert "readinessProbe" in leader["containers"][0] and "readinessProbe" not in worker["containers"][0]
    assert objects["Service"]["spec"]["selector"] == {k8s.LWS_NAME_LABEL: "rig-mia-tp4-spark", k8s.LWS_INDEX_LABEL: "0"}


def test_multinode_vllm_recipe_is_a_leader_worker_set_whose_workers_run_headless():
    """vLLM's multi-node launch: the head and the workers take the head's address and port apart
    (--master-addr/--master-port), and only the workers run --headless (no API server of their own)."""
    objects = _by_kind(REPO / "k8s" / "llama8b-vllm.2node.yaml")
    template = objects["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    leader, worker = (template[role]["spec"]["containers"][0] for role in ("leaderTemplate", "workerTemplate"))
    for container in (leader, worker):
        flags = dict(zip(container["args"], container["args"][1:], strict=False))
        assert (flags["--nnodes"], flags["--node-rank"], flags["--tensor-parallel-size"]) == ("2", "$(LWS_WORKER_INDEX)", "2")
        assert flags["--master-addr"] == "$(LWS_LEADER_ADDRESS)" and flags["--master-port"] == str(k8s.DIST_INIT_PORT)
        assert container["resources"]["limits"][k8s.GPU_RESOURCE] == 1
    assert "--headless" not in leader["args"] and "--headless" in worker["args"]
    assert [a for a in worker["args"] if a != "--headless"] == leader["args"]
    assert "readinessProbe" in leader and "readinessProbe" not in worker


def test_only_kubelet_references_to_defined_variables():
    """The kubelet expands $(NAME) in command and args: every one names LWS's variables or the
    container's own env; no other `$(` (which it would expand or leave mangled) is rendered."""
    for path in K8S_FILES:
        for document in _documents(path):
            for pod in (_pods(document) if document["kind"] != "Service" else []):
                container = pod["containers"][0]
                defined = {e["name"] for e in container["env"]} | ({"LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX"}
                                                                  if document["kind"] == "LeaderWorkerSet" else set())
                for word in container["command"] + container["args"]:
                    assert "$$" not in word
                    assert set(re.findall(r"\$\((\w+)\)", word)) <= defined, word
                    assert word.count("$(") == len(re.findall(r"\$\(\w+\)", word)), word


def _container(document: dict[str, Any], role: str = "leaderTemplate") -> dict[str, Any]:
    spec = document["spec"]
    template = spec["template"] if document["kind"] == "Deployment" else spec["leaderWorkerTemplate"][role]
    return template["spec"]["containers"][0]


def _set_gpu(value: Any):
    def mutate(document: dict[str, Any]) -> None:
        _container(document)["resources"]["limits"][k8s.GPU_RESOURCE] = value
    return mutate


MUTATIONS = {
    "gpu count as a word": _set_gpu("six"),
    "gpu count as a list": _set_gpu([6]),
    "gpu count as a fraction": _set_gpu(1.5),
    "gpu request unlike its limit": lambda d: _container(d)["resources"]["requests"].update({k8s.GPU_RESOURCE: 2}),
    "probe without a port": lambda d: _container(d)["readinessProbe"]["httpGet"].pop("port"),
    "unknown container field": lambda d: _container(d).update({"shmSize": "32Gi"}),
    "unknown metadata field": lambda d: d["metadata"].update({"label": {}}),
    "secret reference without its key": lambda d: next(
        e for e in _container(d)["env"] if e["name"] == grammar.KEY_VARIABLE)["valueFrom"]["secretKeyRef"].pop("key"),
    "shm size that is no quantity": lambda d: next(
        v for v in (d["spec"].get("template") or d["spec"]["leaderWorkerTemplate"]["leaderTemplate"])["spec"]["volumes"]
        if v["name"] == "dshm")["emptyDir"].update({"sizeLimit": "32 gigs"}),
}
LWS_MUTATIONS = {
    "group size as a string": lambda d: d["spec"]["leaderWorkerTemplate"].update({"size": "4"}),
    "unknown field in a worker": lambda d: _container(d, "workerTemplate").update({"gpus": 1}),
    "no worker template": lambda d: d["spec"]["leaderWorkerTemplate"].pop("workerTemplate"),
    "restart policy LWS does not have": lambda d: d["spec"]["leaderWorkerTemplate"].update({"restartPolicy": "Always"}),
}


@pytest.mark.parametrize(("file", "kind", "mutation"),
                         [("glm52-tp6.yaml", "Deployment", m) for m in MUTATIONS]
                         + [("mia-tp4.spark.yaml", "LeaderWorkerSet", m) for m in [*MUTATIONS, *LWS_MUTATIONS]])
def test_one_broken_field_is_refused(file, kind, mutation):
    document = copy.deepcopy(_by_kind(REPO / "k8s" / file)[kind])
    validate(document, K8S_VERSIONS[0])  # the rendered one passes
    (MUTATIONS | LWS_MUTATIONS)[mutation](document)
    with pytest.raises(jsonschema.ValidationError):
        validate(document, K8S_VERSIONS[0])


def test_a_gpu_count_written_as_a_numeral_string_is_a_valid_quantity():
    """Kubernetes reads a quantity from a string ("6") as from a number: the schemas accept both."""
    document = copy.deepcopy(_by_kind(REPO / "k8s" / "glm52-tp6.yaml")["Deployment"])
    resources = _container(document)["resources"]
    resources["limits"][k8s.GPU_RESOURCE] = resources["requests"][k8s.GPU_RESOURCE] = "6"
    validate(document, K8S_VERSIONS[-1])


@pytest.mark.parametrize(("docker", "kubernetes"), [("32gb", "32Gi"), ("1gb", "1Gi"), ("512m", "512Mi"), ("1.5g", "1536Mi"),
                                                    ("2048k", "2Mi"), ("100", "100"), ("3G", "3Gi"), ("1tb", "1Ti"), ("1000", "1000")])
def test_docker_sizes_become_the_same_bytes_as_a_quantity(docker, kubernetes):
    assert k8s.quantity(docker) == kubernetes


def test_a_name_too_long_for_kubernetes_keeps_its_start_and_ends_in_a_hash():
    recipe = parse_recipe(REPO / "recipes" / "tiny-cpu.yaml")
    names = {k8s.object_name(recipe.model_copy(update={"name": stem}).variant(None)) for stem in ("t" * 60, "t" * 61, "t" * 59 + "-")}
    assert len(names) == 3
    for name in names:
        assert len(name) <= k8s.NAME_MAX and k8s.DNS_1035_LABEL.fullmatch(name) and name.startswith("rig-ttt"), name
    assert k8s.object_name(recipe.variant(None)) == "rig-tiny-cpu-cb"


def test_stale_manifest_is_detected(rendered_copy):
    import rig.deploy.render as render

    path = k8s.K8S_DIR / "tiny-cpu.yaml"
    assert path.is_relative_to(rendered_copy)
    path.write_text(path.read_text().replace("sizeLimit: 1Gi", "sizeLimit: 2Gi"))
    assert render.render([REPO / "recipes" / "tiny-cpu.yaml"], check=True) == [path]


def test_a_multinode_topology_without_an_engine_launch_is_refused_in_one_line():
    """transformers serve has no multi-node launch in rig's engine registry: no LeaderWorkerSet is rendered for it."""
    recipe = parse_recipe(REPO / "recipes" / "tiny-cpu.yaml")
    two = recipe.model_copy(update={"variants": {}, "default_variant": None,
                                    "topology": recipe.topology.model_copy(update={"nodes": 2})})
    with pytest.raises(RigError) as raised:
        k8s.render_manifests(two.variant(None))
    assert raised.value.field == "topology.nodes" and "\n" not in str(raised.value)
