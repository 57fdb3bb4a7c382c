"""Render a recipe into `docker/<name>/Dockerfile`, `compose/<name>[.<variant>].yaml` and
`k8s/<name>[.<variant>].yaml` (rig/deploy/k8s.py).

All are committed; `rig render --check` (and a test) fails when any is stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from rig import __version__, grammar
from rig.atomic import write_files_atomic
from rig.deploy import k8s
from rig.deploy.container import IMAGE_MANIFEST_DIR, api_key_command, file_stem, image_name
from rig.deploy.pins import is_lab_image
from rig.deploy.recipe import Recipe, Resolved, parse_recipe
from rig.deploy.recipe_owned import check_rig_owned
from rig.engines import MULTINODE_ADDR_VAR, MULTINODE_HOST_VAR, MULTINODE_PORT_VAR, NO_NETWORK_ENV, server_argv
from rig.errors import RigError
from rig.paths import REPO_ROOT

DOCKER_DIR = REPO_ROOT / "docker"
COMPOSE_DIR = REPO_ROOT / "compose"
CACHE_VOLUME = "rig-cache"


def api_key_entrypoint(engine: str) -> list[str]:
    """`api_key_command` for a compose file ($ doubled: compose would interpolate it)."""
    return [word.replace("$", "$$") for word in api_key_command(engine)]


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dockerfile_path(recipe: Recipe) -> Path:
    return DOCKER_DIR / recipe.name / "Dockerfile"


def compose_path(resolved: Resolved) -> Path:
    return COMPOSE_DIR / f"{file_stem(resolved)}.yaml"


def project_name(recipe: str, variant: str | None) -> str:
    """The compose project (containers, network, the boot's identity in Docker): `_` cannot occur in
    a recipe or variant name, so recipe `a-b` and recipe `a` variant `b` never share one."""
    return f"rig-{recipe}" + (f"_{variant}" if variant else "")


def compose_project(resolved: Resolved) -> str:
    return project_name(resolved.recipe.name, resolved.variant)


# Variables a rendered compose file may leave to compose (besides a recipe's host_env names), and
# the one place the API key's may appear.
COMPOSE_VARIABLES = frozenset({grammar.IMAGE_TAG_VARIABLE, "RIG_MODEL_DIR", "RIG_MANIFEST_DIR", MULTINODE_ADDR_VAR, MULTINODE_HOST_VAR,
                               MULTINODE_PORT_VAR})
API_KEY_ENTRY = f"${{{grammar.KEY_VARIABLE}:-}}"


def _label(value: str) -> str:
    """A double-quoted LABEL value: JSON escapes quotes and backslashes, and `$` is escaped so
    the builder does not substitute build arguments into recipe text. Other characters stay as they
    are (the builder reads \\u00e9 as those six characters: "Café" was labelled "Caf\\u00e9");
    a recipe's text holds no control character (rig.grammar), so JSON escapes nothing else."""
    return json.dumps(value, ensure_ascii=False).replace("$", "\\$")


def _exec_form(argv: list[str]) -> str:
    """`RUN ["a", "b"]`: no shell parses the arguments, so a recipe value stays one argument."""
    return "RUN " + json.dumps(argv)


def render_dockerfile(recipe: Recipe) -> str:
    image = recipe.container_image("render")
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
    elif is_lab_image(image.repository):
        lines += ["# Lab base: `rig pin` writes its digest to .rig/lab/pins.yaml (per machine); `rig build` passes it.",
                  "ARG BASE_DIGEST", f"FROM {image.repository}@${{BASE_DIGEST}}"]
    else:
        lines += ["# UNPINNED: `rig pin` must write this base's digests before a build counts.",
                  "ARG BASE_DIGEST=", f"FROM {image.repository}:{image.tag}"]
    lines.append("ARG BASE_DIGEST")
    if image.pip_install:
        lines += [
            "# PIP_INDEX_URL / PIP_EXTRA_INDEX_URL may point pip at a CPU-only torch index.",
            _exec_form(["python3", "-m", "pip", "install", "--no-cache-dir", *image.pip_install]),
        ]
    lines += [
        "COPY adapter /opt/rig/adapter",
        "# rig_adapters needs nothing beyond the engine image; the .pth arms it in every engine process.",
        "RUN python3 -m pip install --no-cache-dir --no-deps /opt/rig/adapter \\",
        " && python3 -m rig_adapters install-pth",
    ]
    if recipe.model.source == "generated":
        lines += [
            "COPY rig/tinymodel.py rig/data/generated_models.json /opt/rig/",
            _exec_form(["python3", "/opt/rig/tinymodel.py", "--preset", recipe.model.generate or "", recipe.model.path]),
        ]
    # Labels last: the commit changes with every build, and a LABEL above the engine packages
    # would rebuild their layers (1.15 GB of torch for tiny-cpu) on every commit.
    lines += [
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
    # RIG_ENGINE tells an adapter that serves several engines which one's targets to patch.
    lines += [f"ENV RIG_ADAPTER_MANIFEST_DIR={IMAGE_MANIFEST_DIR} RIG_ENGINE={recipe.engine.name}", f"EXPOSE {recipe.serving.port}", ""]
    return "\n".join(lines)


def _healthcheck(resolved: Resolved) -> dict[str, Any]:
    serving = resolved.recipe.serving
    url = f"http://127.0.0.1:{serving.port}{serving.health}"
    return {
        "test": ["CMD", "python3", "-c", f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)"],
        "interval": "10s",  # `compose up --wait` sees healthy at most 10 s after the server is
        "timeout": "10s",
        "retries": 3,
        "start_period": f"{serving.boot_timeout_s}s",
    }


def _service(resolved: Resolved, node_rank: int | None) -> dict[str, Any]:
    recipe, topo = resolved.recipe, resolved.topology
    multinode = topo.nodes > 1
    listen = recipe.serving.bind if multinode else "0.0.0.0"  # noqa: S104 - inside the container; published on serving.bind
    host_env = {name: f"${{{name}:-{default}}}" for name, default in resolved.host_env().items()}
    environment = {**NO_NETWORK_ENV, **resolved.full_env(), **host_env, "RIG_ADAPTER_MANIFEST_DIR": IMAGE_MANIFEST_DIR}
    service: dict[str, Any] = {
        "image": f"{image_name(recipe)}:${{{grammar.IMAGE_TAG_VARIABLE}:-{grammar.DEFAULT_IMAGE_TAG}}}",
        "build": {
            "context": "..",
            "dockerfile": f"docker/{recipe.name}/Dockerfile",
            "args": {"BASE_DIGEST": recipe.container_image("render").digest_for(topo.platform) or ""},
        },
        "platform": topo.platform,
        "entrypoint": api_key_entrypoint(recipe.engine.name),
        "command": server_argv(resolved, recipe.model.path, listen, node_rank),
        "environment": {**environment, grammar.KEY_VARIABLE: API_KEY_ENTRY},
    }
    if multinode:
        service["network_mode"] = "host"  # NCCL and SGLang's rendezvous need the node's own interfaces
        service["profiles"] = [f"node{node_rank}"]
    else:
        service["ports"] = [f"{host_ip(recipe.serving.bind)}:{recipe.serving.port}:{recipe.serving.port}"]
    if recipe.gpu:  # NCCL wants these on GPU hosts; a CPU container needs neither (memlock cannot be raised everywhere)
        service["ipc"] = "host"
    service["shm_size"] = recipe.serving.shm_size
    if recipe.gpu:
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


def host_ip(bind: str) -> str:
    """An IPv6 address is bracketed in a compose port mapping (host:published:target)."""
    return f"[{bind}]" if ":" in bind else bind


def render_compose(resolved: Resolved) -> str:
    recipe, topo = resolved.recipe, resolved.topology
    variant = f" (variant {resolved.variant})" if resolved.variant else ""
    path = compose_path(resolved).relative_to(REPO_ROOT)
    header = [f"# Rendered by `rig render` from recipes/{recipe.name}.yaml{variant}: edit the recipe, not this file."]
    if topo.nodes > 1:
        services = {f"node{rank}": _service(resolved, rank) for rank in range(topo.nodes)}
        # the head's address as the engine's launch takes it: host:port (SGLang), or host and port apart (vLLM)
        head = {MULTINODE_ADDR_VAR: "<node0 ip>:5000", MULTINODE_HOST_VAR: "<node0 ip>", MULTINODE_PORT_VAR: "5000"}
        named = " ".join(f"{name}={value}" for name, value in head.items() if "${" + name in str(services["node0"]["command"]))
        header += [
            f"# {topo.nodes} nodes: on node N run",
            f"#   {'RIG_MODEL_DIR=... ' if recipe.model.source == 'mount' else ''}{named} docker compose -f {path} --profile nodeN up",
        ]
    else:
        services = {"server": _service(resolved, None)}
        if recipe.model.source == "mount":
            header.append(f"# Run: RIG_MODEL_DIR=/path/to/checkpoint docker compose -f {path} up")
        else:
            header.append(f"# Run: docker compose -f {path} up")
    header.append("# Optional: RIG_API_KEY=... (read from the environment only). Boots via rig: rig up " + resolved.ref)
    document = {"name": compose_project(resolved), "services": services, "volumes": {CACHE_VOLUME: {}}}
    _refuse_interpolation(document, frozenset(resolved.host_env()), resolved)
    body = yaml.dump(document, Dumper=_NoAliasDumper, sort_keys=False, width=120, default_flow_style=False)
    return "\n".join(header) + "\n" + body


def _strings(value: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        return [hit for key, item in value.items() for hit in [*_strings(str(key), path), *_strings(item, (*path, str(key)))]]
    if isinstance(value, list):
        return [hit for index, item in enumerate(value) for hit in _strings(item, (*path, str(index)))]
    return []


def _refuse_interpolation(document: dict[str, Any], host_env: frozenset[str], resolved: Resolved) -> None:
    """Defence in depth behind the recipe schema: compose substitutes only rig's own variables and
    the recipe's host_env names, and the API key's variable only as the service's RIG_API_KEY."""
    for path, text in _strings(document):
        for name in grammar.compose_interpolations(text):
            key_entry = name == grammar.KEY_VARIABLE and path[-2:] == ("environment", grammar.KEY_VARIABLE) and text == API_KEY_ENTRY
            if not (key_entry or name in COMPOSE_VARIABLES or name in host_env):
                raise RigError(f"recipes/{resolved.recipe.name}.yaml", ".".join(path),
                               f"would make compose substitute {'$' if name == '$' else '${' + name + '}'}; nothing was rendered",
                               "write recipe values without '$'")


def _refuse_unsafe(recipe: Recipe) -> None:
    """Defence in depth behind the recipe schema, for a Recipe built without it: no rendered value
    may carry a control character (a newline in a value is a new Dockerfile instruction or compose
    key), and no flag or variable rig owns."""
    found = grammar.find_control_characters(recipe.model_dump(mode="json"))
    if found:
        field, char = found
        raise RigError(f"recipes/{recipe.name}.yaml", field, f"contains the control character {char}; nothing was rendered",
                       "remove it from the recipe")
    check_rig_owned(recipe, f"recipes/{recipe.name}.yaml")


def _inside(path: Path, root: Path, recipe: Recipe) -> Path:
    resolved = path.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise RigError(f"recipes/{recipe.name}.yaml", "name/variants", f"would write {resolved}, outside {root}",
                       "name the recipe and its variants with lowercase letters, digits and - only")
    return path


def rendered_files(recipe: Recipe) -> dict[Path, str]:
    """Every file a recipe renders to, by path; each path is checked to lie in docker/, compose/ or k8s/."""
    _refuse_unsafe(recipe)
    if recipe.image is None:  # native-only: nothing to build or compose
        return {}
    files = {_inside(dockerfile_path(recipe), DOCKER_DIR, recipe): render_dockerfile(recipe)}
    for name in recipe.variants or [None]:
        resolved = recipe.variant(name)
        files[_inside(compose_path(resolved), COMPOSE_DIR, recipe)] = render_compose(resolved)
        files[_inside(k8s.k8s_path(resolved), k8s.K8S_DIR, recipe)] = k8s.render_manifests(resolved)
    return files


def render(paths: list[Path], check: bool = False) -> list[Path]:
    """Write (or, with check, compare) every rendered file; returns the stale or written ones.
    Every recipe is rendered (and refused) before anything is written, and the writes are one
    all-or-nothing step (rig/atomic.py): a failure halfway leaves docker/, compose/ and k8s/ as they were."""
    planned: dict[Path, str] = {}
    for recipe_file in paths:
        for path, content in rendered_files(parse_recipe(recipe_file)).items():
            if path in planned and planned[path] != content:
                raise RigError(str(recipe_file), "name", f"renders {path.relative_to(REPO_ROOT)}, which another recipe renders too",
                               "give each recipe its own name")
            planned[path] = content
    changed = [path for path, content in planned.items() if not (path.exists() and path.read_text() == content)]
    if not check:
        try:
            write_files_atomic({path: planned[path] for path in changed})
        except OSError as error:
            target = error.filename or "docker/, compose/"
            raise RigError(str(target), "(write)", f"could not be written ({error.strerror or error}); nothing was changed",
                           "free space or fix the permissions, then render again") from None
    return changed
