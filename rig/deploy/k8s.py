"""Render a recipe into Kubernetes manifests: `k8s/<recipe>[.<variant>].yaml`, one multi-document
file per compose file, named the same way.

A single-node recipe is a Deployment and a ClusterIP Service. A multi-node recipe is a
LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, one group): the leader is rank 0, the workers the
other ranks, and every pod learns the head's address and its own rank from the environment the LWS
controller injects (LWS_LEADER_ADDRESS, LWS_WORKER_INDEX), which the kubelet substitutes into the
engine's arguments as $(NAME). The manifests carry what the compose file carries: the GPU count as
an nvidia.com/gpu limit, /dev/shm as a memory-backed emptyDir of serving.shm_size, the model
read-only, the health route as a readiness probe, the adapters' gates as env, and the API key from
the Secret `rig-api-key` (optional, never its value). Committed; `rig render --check` keeps them fresh.
rig has no Kubernetes driver: it renders these, it does not apply them (docs/kubernetes.md).
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from rig import grammar
from rig.deploy.container import IMAGE_MANIFEST_DIR, api_key_command, file_stem, image_name
from rig.deploy.recipe import Resolved
from rig.engines import MULTINODE_ADDR_VAR, MULTINODE_HOST_VAR, MULTINODE_PORT_VAR, NO_NETWORK_ENV, server_argv
from rig.errors import RigError
from rig.paths import REPO_ROOT

K8S_DIR = REPO_ROOT / "k8s"
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's extended resource
API_KEY_SECRET = "rig-api-key"  # noqa: S105 - the Secret's name, not a key: `kubectl create secret generic` (docs/kubernetes.md)
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_MIN_RELEASE = "v0.10.0"  # the release whose CRD schema the tests hold these manifests to
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # set by the LWS controller on every pod of the set
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # "0" on the leader
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
DIST_INIT_PORT = 5000  # the head's rendezvous port, as the compose file's RIG_DIST_INIT_ADDR example
POD_IP_VARIABLE = "RIG_POD_IP"
INSTANCE_LABEL = "app.kubernetes.io/instance"
# DNS-1035 label: a Service's and a LeaderWorkerSet's name (the LWS webhook checks NameIsDNS1035Label).
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
# The LWS controller names a group's worker StatefulSet <name>-<group> and its pods <name>-<group>-<rank>;
# a StatefulSet's name, with the revision-hash suffix of its pods' label, must stay within a 63-character
# label (52 for the set): 45 leaves room for the group and rank digits.
NAME_MAX = 45
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([kmgtp]?)i?b?")
_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi")


def k8s_path(resolved: Resolved) -> Path:
    """`k8s/<name>.yaml` beside `compose/<name>.yaml`: one file per compose file."""
    return K8S_DIR / f"{file_stem(resolved)}.yaml"


def object_name(resolved: Resolved) -> str:
    """rig-<recipe>[-<variant>]: every object of one file shares it, so `kubectl delete -f` finds them.
    A name over NAME_MAX, or one that ends in '-', keeps its start and ends in a hash of the whole."""
    name = f"rig-{resolved.recipe.name}" + (f"-{resolved.variant}" if resolved.variant else "")
    if len(name) <= NAME_MAX and DNS_1035_LABEL.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[:NAME_MAX - len(digest) - 1].rstrip('-')}-{digest}"


def quantity(docker_size: str) -> str:
    """A Docker size (binary units: 32gb = 32 GiB, 512m, 1.5g) as a Kubernetes quantity of the same
    bytes, in the largest binary unit that holds it whole (32Gi, 512Mi, 1536Mi)."""
    match = _SIZE.fullmatch(docker_size.lower())
    if match is None:
        raise ValueError(f"{docker_size!r} is not a Docker size")
    number, unit = match.groups()
    size = int(Decimal(number) * 1024 ** "_kmgtp".index(unit or "_"))  # Docker drops a fraction of a byte too
    power = 0
    while power < len(_BINARY) - 1 and size and size % 1024 == 0:
        size //= 1024
        power += 1
    return f"{size}{_BINARY[power]}"


def _lws_argv(resolved: Resolved, listen: str, leader: bool) -> list[str]:
    """The engine's own multi-node argv (rig/engines.py) of the leader (rank 0) or of a worker (rank
    1), read beside the next rank's: the words that differ are the rank, written as
    $(LWS_WORKER_INDEX); the next rank may add words of a worker's own (vLLM's --headless), which the
    leader does not take. The head's address (RIG_DIST_INIT_ADDR, or its host and port apart, in the
    compose file) is $(LWS_LEADER_ADDRESS) and DIST_INIT_PORT. Any engine's launch reads the same way."""
    recipe = resolved.recipe
    rank = 0 if leader else 1
    own, following = (server_argv(resolved, recipe.model.path, listen, r) for r in (rank, rank + 1))
    ranked = [False] * len(own)
    steps = difflib.SequenceMatcher(a=own, b=following, autojunk=False).get_opcodes()
    for step, i1, i2, j1, j2 in steps:
        if step == "replace" and i2 - i1 == j2 - j1 and all((a, b) == (str(rank), str(rank + 1))
                                                          for a, b in zip(own[i1:i2], following[j1:j2], strict=True)):
            ranked[i1:i2] = [True] * (i2 - i1)
        elif step not in ("equal", "insert"):  # only the next rank may add words (a worker's own)
            ranked = []
            break
    if not any(ranked):
        raise RigError(f"recipes/{recipe.name}.yaml", "topology.nodes",
                       f"{recipe.engine.name} has no multi-node launch rig can give each rank (rig/engines.py); nothing was rendered",
                       "use one node, or an engine whose multi-node launch takes a node rank")
    head = {MULTINODE_ADDR_VAR: f"{LEADER_ADDRESS}:{DIST_INIT_PORT}", MULTINODE_HOST_VAR: LEADER_ADDRESS,
            MULTINODE_PORT_VAR: str(DIST_INIT_PORT)}
    reference = re.compile(r"\$\{(" + "|".join(head) + r")\b[^}]*\}")  # compose's ${RIG_DIST_INIT_ADDR:?...}
    return [WORKER_INDEX if differs else reference.sub(lambda found: head[found.group(1)], word)
            for word, differs in zip(own, ranked, strict=True)]


def _env(resolved: Resolved, multinode: bool) -> list[dict[str, Any]]:
    values = {**NO_NETWORK_ENV, **resolved.full_env(), **resolved.host_env(), "RIG_ADAPTER_MANIFEST_DIR": IMAGE_MANIFEST_DIR}
    env: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in values.items()]
    if multinode:  # on the node's own network the server listens on the node's address, not on every interface
        env.append({"name": POD_IP_VARIABLE, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    # optional: no Secret, no variable (compose's ${RIG_API_KEY:-}); the entrypoint hands it on or refuses
    env.append({"name": grammar.KEY_VARIABLE,
                "valueFrom": {"secretKeyRef": {"name": API_KEY_SECRET, "key": grammar.KEY_VARIABLE, "optional": True}}})
    return env


def _readiness(resolved: Resolved) -> dict[str, Any]:
    serving = resolved.recipe.serving
    return {"httpGet": {"path": serving.health, "port": serving.port}, "periodSeconds": 10, "timeoutSeconds": 10,
            "failureThreshold": 3}


def _container(resolved: Resolved, leader: bool) -> dict[str, Any]:
    recipe, topo = resolved.recipe, resolved.topology
    multinode = topo.nodes > 1
    # One pod network namespace per server: 0.0.0.0 there is the pod's own address; the Service exposes it.
    listen = f"$({POD_IP_VARIABLE})" if multinode else "0.0.0.0"  # noqa: S104
    container: dict[str, Any] = {
        "name": "server" if leader else "worker",
        "image": f"{image_name(recipe)}:{grammar.DEFAULT_IMAGE_TAG}",
        "imagePullPolicy": "IfNotPresent",
        "command": api_key_command(recipe.engine.name),
        "args": _lws_argv(resolved, listen, leader) if multinode else server_argv(resolved, recipe.model.path, listen),
        "env": _env(resolved, multinode),
    }
    if leader:
        container["ports"] = [{"name": "http", "containerPort": recipe.serving.port, "protocol": "TCP"}]
        container["readinessProbe"] = _readiness(resolved)
    if recipe.gpu and topo.gpus_per_node:
        count = topo.gpus_per_node  # gpu_ids cannot be pinned here: the device plugin picks the devices
        container["resources"] = {"limits": {GPU_RESOURCE: count}, "requests": {GPU_RESOURCE: count}}
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "cache", "mountPath": "/root/.cache"},
              {"name": "manifests", "mountPath": IMAGE_MANIFEST_DIR}]
    if recipe.model.source == "mount":
        mounts.insert(0, {"name": "model", "mountPath": recipe.model.path, "readOnly": True})
    container["volumeMounts"] = mounts
    return container


def model_claim(resolved: Resolved) -> str:
    """The PersistentVolumeClaim the user creates with the checkpoint on it (ReadOnlyMany for several nodes)."""
    return f"rig-{resolved.recipe.name}-model"


def _pod_spec(resolved: Resolved, leader: bool) -> dict[str, Any]:
    recipe, topo = resolved.recipe, resolved.topology
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": quantity(recipe.serving.shm_size)}},
        {"name": "cache", "emptyDir": {}},
        {"name": "manifests", "emptyDir": {}},
    ]
    if recipe.model.source == "mount":
        volumes.insert(0, {"name": "model", "persistentVolumeClaim": {"claimName": model_claim(resolved), "readOnly": True}})
    spec: dict[str, Any] = {"nodeSelector": {"kubernetes.io/arch": topo.platform.removeprefix("linux/")}}
    if topo.nodes > 1:  # NCCL and the rendezvous need the node's own interfaces (compose: network_mode host)
        spec |= {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}
    return spec | {"containers": [_container(resolved, leader)], "volumes": volumes}


def _metadata(resolved: Resolved, name: str) -> dict[str, Any]:
    recipe = resolved.recipe
    labels = {INSTANCE_LABEL: name, "app.kubernetes.io/name": recipe.name, "app.kubernetes.io/managed-by": "rig"}
    image = recipe.container_image("render")
    digest = image.digest_for(resolved.topology.platform)
    base = f"{image.repository}@{digest}" if digest else f"{image.repository}:{image.tag} (unpinned)"
    annotations = {"rig/recipe": resolved.ref, "rig/base-image": base}
    return {"name": name, "labels": labels, "annotations": annotations}


def _service(resolved: Resolved, name: str, selector: dict[str, str]) -> dict[str, Any]:
    port = resolved.recipe.serving.port
    return {"apiVersion": "v1", "kind": "Service", "metadata": _metadata(resolved, name),
            "spec": {"type": "ClusterIP", "selector": selector,
                     "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}]}}


def _deployment(resolved: Resolved, name: str) -> dict[str, Any]:
    selector = {INSTANCE_LABEL: name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(resolved, name),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # a rolling update would hold the GPUs of two servers at once
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": dict(selector)}, "spec": _pod_spec(resolved, leader=True)},
        },
    }


def _leader_worker_set(resolved: Resolved, name: str) -> dict[str, Any]:
    labels = {INSTANCE_LABEL: name}
    return {
        "apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet", "metadata": _metadata(resolved, name),
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": resolved.topology.nodes,
                # a rank that restarts cannot rejoin a running NCCL group: the whole group starts again
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": dict(labels)}, "spec": _pod_spec(resolved, leader=True)},
                "workerTemplate": {"metadata": {"labels": dict(labels)}, "spec": _pod_spec(resolved, leader=False)},
            },
        },
    }


def _manifests(resolved: Resolved) -> list[dict[str, Any]]:
    """The objects of one recipe variant, in the order `kubectl apply` creates them."""
    name = object_name(resolved)
    if resolved.topology.nodes > 1:
        workload = _leader_worker_set(resolved, name)
        selector = {LWS_NAME_LABEL: name, LWS_INDEX_LABEL: "0"}
    else:
        workload = _deployment(resolved, name)
        selector = {INSTANCE_LABEL: name}
    return [_service(resolved, name, selector), workload]


def render_manifests(resolved: Resolved) -> str:
    recipe, topo = resolved.recipe, resolved.topology
    variant = f" (variant {resolved.variant})" if resolved.variant else ""
    path = f"{K8S_DIR.name}/{k8s_path(resolved).name}"
    header = [f"# Rendered by `rig render` from recipes/{recipe.name}.yaml{variant}: edit the recipe, not this file.",
              f"# Apply: kubectl apply -f {path}   (docs/kubernetes.md; rig renders this, it does not apply it)",
              f"# Image: {image_name(recipe)}:{grammar.DEFAULT_IMAGE_TAG} from `rig build {recipe.name}`, on every node or in your registry."]
    if topo.nodes > 1:
        header.append(f"# {topo.nodes} nodes: a LeaderWorkerSet; needs the LWS controller ({LWS_MIN_RELEASE} or later).")
    if recipe.model.source == "mount":
        header.append(f"# Model: the PersistentVolumeClaim {model_claim(resolved)} holding {recipe.model.id}, mounted read-only.")
    header.append(f"# Optional API key: the Secret {API_KEY_SECRET}, key {grammar.KEY_VARIABLE} (never in this file).")
    documents = [copy.deepcopy(document) for document in _manifests(resolved)]
    body = yaml.safe_dump_all(documents, sort_keys=False, width=120, default_flow_style=False, explicit_start=True)
    return "\n".join(header) + "\n" + body
