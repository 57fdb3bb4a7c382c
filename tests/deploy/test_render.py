"""Rendered files: fresh, accepted by the real Docker Compose parser and hadolint, pinned."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml
from conftest import COMPOSE_ENV, REPO, compose_binary, rig_main, tool

from rig.deploy.pins import LAB_REGISTRY
from rig.deploy.recipe import all_recipe_paths, parse_recipe
from rig.deploy.render import rendered_files

COMPOSE_FILES = sorted((REPO / "compose").glob("*.yaml"))
DOCKERFILES = sorted((REPO / "docker").glob("*/Dockerfile"))
K8S_FILES = sorted((REPO / "k8s").glob("*.yaml"))


def test_rendered_files_are_fresh():
    result = rig_main("render", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    expected = {p for r in all_recipe_paths() for p in rendered_files(parse_recipe(r))}
    assert set(COMPOSE_FILES) | set(DOCKERFILES) | set(K8S_FILES) == expected


def test_stale_file_is_detected(rendered_copy):
    import rig.deploy.render as render

    recipe = parse_recipe(REPO / "recipes" / "tiny-cpu.yaml")
    path = render.dockerfile_path(recipe)
    assert path.is_relative_to(rendered_copy)  # the hand edit lands in a copy, never in the checkout
    path.write_text(path.read_text() + "# hand edit\n")
    assert path in render.render([REPO / "recipes" / "tiny-cpu.yaml"], check=True)


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_file_passes_docker_compose_config(path):
    result = subprocess.run([compose_binary(), "-f", str(path), "config", "-q"], capture_output=True, text=True,
                            env={**os.environ, **COMPOSE_ENV}, check=False)
    assert result.returncode == 0, result.stderr


def test_compose_parser_rejects_a_broken_file(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("services:\n  server:\n    image: x\n    ulimits: {memlock: lots}\n")
    result = subprocess.run([compose_binary(), "-f", str(broken), "config", "-q"], capture_output=True, text=True, check=False)
    assert result.returncode != 0


def test_compose_requires_the_model_dir():
    result = subprocess.run([compose_binary(), "-f", str(REPO / "compose" / "mia-tp4.yaml"), "config", "-q"],
                            capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "RIG_MODEL_DIR"}, check=False)
    assert result.returncode != 0 and "RIG_MODEL_DIR" in result.stderr


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_security_and_gpu_settings(path):
    document = yaml.safe_load(path.read_text())
    recipe = parse_recipe(REPO / "recipes" / f"{path.name.split('.')[0]}.yaml")
    for service in document["services"].values():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), port
        assert service["environment"]["RIG_API_KEY"] == "${RIG_API_KEY:-}"
        if recipe.gpu:
            assert service["ipc"] == "host" and service["ulimits"]["memlock"] == -1
            device = service["deploy"]["resources"]["reservations"]["devices"][0]
            assert device["driver"] == "nvidia" and device["count"] >= 1
            if recipe.model.source == "mount":  # a generated model is in the image
                assert any(v.endswith(":ro") and "RIG_MODEL_DIR" in v for v in service["volumes"])
        if "healthcheck" in service:
            assert int(service["healthcheck"]["start_period"].rstrip("s")) >= 900 or not recipe.gpu


def test_multinode_has_one_service_per_node():
    document = yaml.safe_load((REPO / "compose" / "mia-tp4.spark.yaml").read_text())
    assert sorted(document["services"]) == ["node0", "node1", "node2", "node3"]
    ranks = [s["command"][s["command"].index("--node-rank") + 1] for s in document["services"].values()]
    assert ranks == ["0", "1", "2", "3"]
    assert all(s["network_mode"] == "host" and s["platform"] == "linux/arm64" for s in document["services"].values())


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_passes_hadolint(path):
    result = subprocess.run([tool("hadolint"), str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_flags_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get install curl\n")
    assert subprocess.run([tool("hadolint"), str(bad)], capture_output=True, check=False).returncode != 0


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_is_pinned_and_copies_what_exists(path):
    text = path.read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))
    for image in re.findall(r"^FROM (\S+)", text, re.MULTILINE):
        image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""), image)
        if image.startswith(LAB_REGISTRY + "/") and image.endswith("@"):
            continue  # a lab base: its per-machine digest comes from .rig/lab/pins.yaml at `rig build`
        assert re.search(r"@sha256:[0-9a-f]{64}$", image), f"{path}: FROM {image} is not digest-pinned"
    for source in re.findall(r"^COPY (\S+) ", text, re.MULTILINE):
        assert (REPO / source).exists(), f"{path}: COPY source {source} does not exist"
    assert "rig_adapters install-pth" in text
    assert not re.search(r"(API_KEY|TOKEN|PASSWORD)=\S", text), "a secret would be baked into a layer"


def test_mia_dockerfile_installs_the_adapters():
    text = (REPO / "docker" / "mia-tp4" / "Dockerfile").read_text()
    assert "pip install --no-cache-dir --no-deps /opt/rig/adapter" in text
    compose = yaml.safe_load((REPO / "compose" / "mia-tp4.yaml").read_text())
    env = compose["services"]["server"]["environment"]
    assert env["DSV41_SHARED_PAD_K"] == "1" and env["RIG_MXFP8_B12X"] == "1"
    command = compose["services"]["server"]["command"]
    assert command[command.index("--fp8-gemm-backend") + 1] == "flashinfer_cutlass"
    assert command[command.index("--tp-size") + 1] == "4"


def test_glm_compose_serving_shape():
    for name in ("glm52-tp6.yaml", "glm52-tp6.a8.yaml"):
        command = yaml.safe_load((REPO / "compose" / name).read_text())["services"]["server"]["command"]
        flags = dict(zip(command, command[1:]))
        assert flags["--tensor-parallel-size"] == "6" and flags["--decode-context-parallel-size"] == "1"
        assert flags["--gpu-memory-utilization"] == "0.957" and flags["--max-model-len"] == "128000"
        assert flags["--max-num-batched-tokens"] == "2048" and flags["--moe-backend"] == "b12x"


def test_build_without_engine_is_one_line():
    result = rig_main("build", "tiny-cpu", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert result.returncode == 2
    assert "no Docker engine" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert sys.executable


def test_up_of_a_docker_recipe_without_engine_is_one_line():
    result = rig_main("up", "mia-tp4", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert result.returncode == 2 and "no Docker engine" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_make_build_takes_the_recipe_positionally_or_by_variable():
    positional = subprocess.run(["make", "-n", "build", "mia-tp4"], cwd=REPO, capture_output=True, text=True, check=False)
    variable = subprocess.run(["make", "-n", "build", "RECIPE=glm52-tp6"], cwd=REPO, capture_output=True, text=True, check=False)
    assert "rig build mia-tp4" in positional.stdout, positional.stdout + positional.stderr
    assert "rig build glm52-tp6" in variable.stdout, variable.stdout + variable.stderr


def test_pin_writes_digests_into_the_recipe(tmp_path):
    from rig.deploy.pin import write_digests

    source = (REPO / "recipes" / "mia-tp4.yaml").read_text()
    path = tmp_path / "mia-tp4.yaml"
    path.write_text(source.replace("sha256:c4ca", "sha256:0000"))
    digests = {"linux/amd64": "sha256:" + "1" * 64, "linux/arm64": "sha256:" + "2" * 64}
    write_digests(path, digests)
    recipe = parse_recipe(path)
    assert dict(recipe.image.digests) == digests
    assert "# DeepSeek-V4.1-Flash on SGLang" in path.read_text()  # comments survive


def test_pin_without_registry_access_is_one_line():
    result = rig_main("pin", "tiny-cpu", env={"DOCKER_CONFIG": "/nonexistent", "HTTPS_PROXY": "http://127.0.0.1:9"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "rig pin" in result.stderr
