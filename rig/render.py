"""Render a recipe into `docker/<name>/Dockerfile` and `compose/<name>[.<variant>].yaml`.

Both are committed; `rig render --check` (and a test) fails when either is stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from rig import __version__, grammar
from rig.atomic import write_text_atomic
from rig.engines import server_argv
from rig.errors import RigError
from rig.lab import is_lab_image
from rig.recipe import REPO_ROOT, Recipe, Resolved, parse_recipe

DOCKER_DIR = REPO_ROOT / "docker"
COMPOSE_DIR = REPO_ROOT / "compose"
IMAGE_MANIFEST_DIR = "/rig/manifests"
CACHE_VOLUME = "rig-cache"
# The API key is read from the container's environment at start (RIG_API_KEY), never written to a
# layer, and never put on the engine's command line (host `ps`, `docker top` and /proc/*/cmdline
# show argv to anyone). Each engine gets it the one non-argv way it reads one, and RIG_API_KEY is
# unset before the engine starts:
#  - vLLM reads the environment variable VLLM_API_KEY.
#  - SGLang reads --api-key only from its arguments, but prepare_server_args merges a
#    `--config <file>.yaml` into them inside the process (sglang/srt/server_args.py,
#    utils/server_args_config_parser.py): the key goes into such a file, mode 0600, on a tmpfs
#    mounted at SECRET_DIR (never on disk, gone with the container); argv carries only the path.
#  - transformers serve takes no API key at all: with RIG_API_KEY set the container refuses to
#    start (one line on stderr) instead of serving an open endpoint the user believes is closed.
SECRET_DIR = "/run/rig"  # noqa: S105 - a directory name, not a secret
SGLANG_KEY_FILE = f"{SECRET_DIR}/api-key.yaml"
API_KEY_SCRIPTS = {
    "sglang": (
        'if [ -n "${RIG_API_KEY:-}" ]; then umask 077'
        " && python3 -c 'import json, os; print(\"api-key: \" + json.dumps(os.environ[\"RIG_API_KEY\"]))'"
        f' > {SGLANG_KEY_FILE} || exit 2; unset RIG_API_KEY; exec "$@" --config {SGLANG_KEY_FILE}; fi;'
        ' unset RIG_API_KEY; exec "$@"'
    ),
    "vllm": 'if [ -n "${RIG_API_KEY:-}" ]; then export VLLM_API_KEY="$RIG_API_KEY"; fi; unset RIG_API_KEY; exec "$@"',
    "transformers": (
        'if [ -n "${RIG_API_KEY:-}" ]; then echo "rig: RIG_API_KEY is set but transformers serve has no API key;'
        ' unset RIG_API_KEY (this server cannot be protected by a key)" >&2; exit 2; fi; exec "$@"'
    ),
}


def api_key_entrypoint(engine: str) -> list[str]:
    """The compose entrypoint that hands RIG_API_KEY to `engine` without argv ($ doubled for compose)."""
    script = API_KEY_SCRIPTS.get(engine)
    if script is None:
        raise RigError("rig/render.py", "API_KEY_SCRIPTS", f"no known way to pass an API key to {engine} outside argv",
                       "add the engine's environment variable or config-file mechanism there")
    return ["/bin/sh", "-c", script.replace("$", "$$"), "rig-serve"]


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
    """A double-quoted LABEL value: JSON escapes quotes and backslashes, and `$` is escaped so
    the builder does not substitute build arguments into recipe text."""
    return json.dumps(value).replace("$", "\\$")


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
    environment = {**resolved.full_env(), "RIG_ADAPTER_MANIFEST_DIR": IMAGE_MANIFEST_DIR}
    service: dict[str, Any] = {
        "image": f"{image_name(recipe)}:${{RIG_IMAGE_TAG:-dev}}",
        "build": {
            "context": "..",
            "dockerfile": f"docker/{recipe.name}/Dockerfile",
            "args": {"BASE_DIGEST": recipe.container_image("render").digest_for(topo.platform) or ""},
        },
        "platform": topo.platform,
        "entrypoint": api_key_entrypoint(recipe.engine.name),
        "command": server_argv(resolved, recipe.model.path, listen, node_rank),
        "environment": {**environment, "RIG_API_KEY": "${RIG_API_KEY:-}"},
    }
    if recipe.engine.name == "sglang":
        if "--config" in service["command"]:
            raise RigError(f"recipes/{recipe.name}.yaml", "server_args", "--config is how rig hands SGLang its API key "
                           "(SGLang accepts one config file)", "write those settings as server_args instead")
        service["tmpfs"] = [f"{SECRET_DIR}:mode=0700,size=64k"]  # the API key file lives in memory only
    if multinode:
        service["network_mode"] = "host"  # NCCL and SGLang's rendezvous need the node's own interfaces
        service["profiles"] = [f"node{node_rank}"]
    else:
        service["ports"] = [f"{_host_ip(recipe.serving.bind)}:{recipe.serving.port}:{recipe.serving.port}"]
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


def _host_ip(bind: str) -> str:
    """An IPv6 address is bracketed in a compose port mapping (host:published:target)."""
    return f"[{bind}]" if ":" in bind else bind


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


def _refuse_control_characters(recipe: Recipe) -> None:
    """Defence in depth behind the recipe schema: no rendered value may carry a control
    character (a newline in a value is a new Dockerfile instruction or compose key)."""
    found = grammar.find_control_characters(recipe.model_dump(mode="json"))
    if found:
        field, char = found
        raise RigError(f"recipes/{recipe.name}.yaml", field, f"contains the control character {char}; nothing was rendered",
                       "remove it from the recipe")


def _inside(path: Path, root: Path, recipe: Recipe) -> Path:
    resolved = path.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise RigError(f"recipes/{recipe.name}.yaml", "name/variants", f"would write {resolved}, outside {root}",
                       "name the recipe and its variants with lowercase letters, digits and - only")
    return path


def rendered_files(recipe: Recipe) -> dict[Path, str]:
    """Every file a recipe renders to, by path; each path is checked to lie in docker/ or compose/."""
    _refuse_control_characters(recipe)
    if recipe.image is None:  # native-only: nothing to build or compose
        return {}
    files = {_inside(dockerfile_path(recipe), DOCKER_DIR, recipe): render_dockerfile(recipe)}
    for name in recipe.variants or [None]:
        resolved = recipe.variant(name)
        files[_inside(compose_path(resolved), COMPOSE_DIR, recipe)] = render_compose(resolved)
    return files


def render(paths: list[Path], check: bool = False) -> list[Path]:
    """Write (or, with check, compare) every rendered file; returns the stale or written ones.
    Every recipe is rendered (and refused) before anything is written; each write is atomic."""
    planned = {path: content for recipe_file in paths for path, content in rendered_files(parse_recipe(recipe_file)).items()}
    changed = [path for path, content in planned.items() if not (path.exists() and path.read_text() == content)]
    if not check:
        for path in changed:
            write_text_atomic(path, planned[path])
    return changed
