"""Render a recipe into `docker/<name>/Dockerfile` and `compose/<name>[.<variant>].yaml`.

Both are committed; `rig render --check` (and a test) fails when either is stale.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

from rig import __version__
from rig.engines import server_argv
from rig.recipe import REPO_ROOT, Recipe, Resolved, parse_recipe

DOCKER_DIR = REPO_ROOT / "docker"
COMPOSE_DIR = REPO_ROOT / "compose"
IMAGE_MANIFEST_DIR = "/rig/manifests"
CACHE_VOLUME = "rig-cache"
# The key is read from the environment at container start and never written to a file or layer.
API_KEY_ENTRYPOINT = ["/bin/sh", "-c", 'exec "$$@" $${RIG_API_KEY:+--api-key "$$RIG_API_KEY"}', "rig-serve"]


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def image_name(recipe: Recipe) -> str:
    return f"rig/{recipe.name}"


def dockerfile_path(recipe: Recipe) -> Path:
    return DOCKER_DIR / recipe.name / "Dockerfile"


def compose_path(resolved: Resolved) -> Path:
    return COMPOSE_DIR / f"{resolved.slug if resolved.variant != resolved.recipe.default_variant else resolved.recipe.name}.yaml"


def _label(value: str) -> str:
    return json.dumps(value)


def render_dockerfile(recipe: Recipe) -> str:
    image = recipe.image
    platform = recipe.variant(None).topology.platform
    digest = image.digest_for(platform)
    lines = [
        f"# Rendered by `rig render` from recipes/{recipe.name}.yaml: edit the recipe, not this file.",
        f"# Build: make build {recipe.name}   (passes BASE_DIGEST for the target platform)",
    ]
    if image.digests:
        lines.append("# Per-platform base digests: " + ", ".join(f"{p} {d}" for p, d in sorted(image.digests.items())))
    if digest:
        lines += [f"ARG BASE_DIGEST={digest}", f"FROM {image.repository}@${{BASE_DIGEST}}"]
    else:
        lines += ["# UNPINNED: `rig pin` must write this base's digests before a build counts.",
                  "ARG BASE_DIGEST=", f"FROM {image.repository}:{image.tag}"]
    lines += [
        "ARG BASE_DIGEST",
        "ARG RIG_SOURCE_COMMIT=unknown",
        "LABEL " + " \\\n      ".join([
            f"org.opencontainers.image.title={_label('rig ' + recipe.name)}",
            f"org.opencontainers.image.description={_label(recipe.description)}",
            'org.opencontainers.image.revision="${RIG_SOURCE_COMMIT}"',
            f"org.opencontainers.image.base.name={_label(image.repository + ':' + image.tag)}",
            'org.opencontainers.image.base.digest="${BASE_DIGEST}"',
            f"io.rig.recipe={_label(recipe.name)}",
            f"io.rig.engine={_label(recipe.engine.name + ' ' + recipe.engine.version)}",
            f"io.rig.adapters.version={_label(__version__)}",
        ]),
    ]
    if image.pip_install:
        lines += [
            "# PIP_INDEX_URL / PIP_EXTRA_INDEX_URL may point pip at a CPU-only torch index.",
            "RUN python3 -m pip install --no-cache-dir " + " ".join(shlex.quote(p) for p in image.pip_install),
        ]
    lines += [
        "COPY adapter /opt/rig/adapter",
        "# rig_adapters needs nothing beyond the engine image; the .pth arms it in every engine process.",
        "RUN python3 -m pip install --no-cache-dir --no-deps /opt/rig/adapter \\",
        " && python3 -m rig_adapters install-pth",
    ]
    if recipe.model.source == "generated":
        lines += [
            "COPY rig/tinymodel.py /opt/rig/tinymodel.py",
            f"RUN python3 /opt/rig/tinymodel.py {recipe.model.path}",
        ]
    lines += [f"ENV RIG_ADAPTER_MANIFEST_DIR={IMAGE_MANIFEST_DIR}", f"EXPOSE {recipe.serving.port}", ""]
    return "\n".join(lines)


def _healthcheck(resolved: Resolved) -> dict[str, Any]:
    serving = resolved.recipe.serving
    url = f"http://127.0.0.1:{serving.port}{serving.health}"
    return {
        "test": ["CMD", "python3", "-c", f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)"],
        "interval": "30s",
        "timeout": "10s",
        "retries": 3,
        "start_period": f"{serving.boot_timeout_s}s",
    }


def _service(resolved: Resolved, node_rank: int | None) -> dict[str, Any]:
    recipe, topo = resolved.recipe, resolved.topology
    multinode = topo.nodes > 1
    listen = recipe.serving.bind if multinode else "0.0.0.0"  # noqa: S104 - inside the container; published on serving.bind
    environment = {**resolved.full_env(), "RIG_ADAPTER_MANIFEST_DIR": IMAGE_MANIFEST_DIR}
    service: dict[str, Any] = {
        "image": f"{image_name(recipe)}:${{RIG_IMAGE_TAG:-dev}}",
        "build": {
            "context": "..",
            "dockerfile": f"docker/{recipe.name}/Dockerfile",
            "args": {"BASE_DIGEST": recipe.image.digest_for(topo.platform) or ""},
        },
        "platform": topo.platform,
        "entrypoint": API_KEY_ENTRYPOINT,
        "command": server_argv(resolved, recipe.model.path, listen, node_rank),
        "environment": {**environment, "RIG_API_KEY": "${RIG_API_KEY:-}"},
    }
    if multinode:
        service["network_mode"] = "host"  # NCCL and SGLang's rendezvous need the node's own interfaces
        service["profiles"] = [f"node{node_rank}"]
    else:
        service["ports"] = [f"{recipe.serving.bind}:{recipe.serving.port}:{recipe.serving.port}"]
    service["ipc"] = "host"
    service["shm_size"] = recipe.serving.shm_size
    service["ulimits"] = {"memlock": -1, "stack": 67108864}
    volumes = [f"{CACHE_VOLUME}:/root/.cache", f"${{RIG_MANIFEST_DIR:-../results/manifests}}:{IMAGE_MANIFEST_DIR}"]
    if recipe.model.source == "mount":
        volumes.insert(0, f"${{RIG_MODEL_DIR:?set RIG_MODEL_DIR to the host directory holding {recipe.model.id}}}:{recipe.model.path}:ro")
    service["volumes"] = volumes
    if recipe.gpu:
        device: dict[str, Any] = {"driver": "nvidia", "capabilities": ["gpu"]}
        if topo.gpu_ids is not None:
            device["device_ids"] = [str(i) for i in topo.gpu_ids]
        else:
            device["count"] = topo.gpus_per_node
        service["deploy"] = {"resources": {"reservations": {"devices": [device]}}}
    if node_rank in (None, 0):
        service["healthcheck"] = _healthcheck(resolved)
    service["restart"] = "no"
    return service


def render_compose(resolved: Resolved) -> str:
    recipe, topo = resolved.recipe, resolved.topology
    variant = f" (variant {resolved.variant})" if resolved.variant else ""
    path = compose_path(resolved).relative_to(REPO_ROOT)
    header = [f"# Rendered by `rig render` from recipes/{recipe.name}.yaml{variant}: edit the recipe, not this file."]
    if topo.nodes > 1:
        services = {f"node{rank}": _service(resolved, rank) for rank in range(topo.nodes)}
        header += [
            f"# {topo.nodes} nodes: on node N run",
            f"#   RIG_MODEL_DIR=... RIG_DIST_INIT_ADDR=<node0 ip>:5000 docker compose -f {path} --profile nodeN up",
        ]
    else:
        services = {"server": _service(resolved, None)}
        if recipe.model.source == "mount":
            header.append(f"# Run: RIG_MODEL_DIR=/path/to/checkpoint docker compose -f {path} up")
        else:
            header.append(f"# Run: docker compose -f {path} up")
    header.append("# Optional: RIG_API_KEY=... (read from the environment only). Boots via rig: rig up " + resolved.ref)
    document = {"name": f"rig-{resolved.slug.replace('.', '-')}", "services": services, "volumes": {CACHE_VOLUME: {}}}
    body = yaml.dump(document, Dumper=_NoAliasDumper, sort_keys=False, width=120, default_flow_style=False)
    return "\n".join(header) + "\n" + body


def rendered_files(recipe: Recipe) -> dict[Path, str]:
    files = {dockerfile_path(recipe): render_dockerfile(recipe)}
    for name in recipe.variants or [None]:
        resolved = recipe.variant(name)
        files[compose_path(resolved)] = render_compose(resolved)
    return files


def render(paths: list[Path], check: bool = False) -> list[Path]:
    """Write (or, with check, compare) every rendered file; returns the stale or written ones."""
    changed: list[Path] = []
    for recipe_file in paths:
        for path, content in rendered_files(parse_recipe(recipe_file)).items():
            if path.exists() and path.read_text() == content:
                continue
            changed.append(path)
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
    return changed
