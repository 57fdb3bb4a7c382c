"""The container path's pieces that need no Docker engine: the engine registry, lab pins, the
build context, the rendered lab recipe, the tiny model's entry point."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

import rig.deploy.pins as lab
from rig.deploy.build import context_size
from rig.deploy.recipe import load
from rig.deploy.recipe_model import EngineName
from rig.deploy.render import render_compose, render_dockerfile
from rig.engines import ENGINES, engine
from rig.paths import REPO_ROOT


def test_every_engine_is_one_declaration_that_the_recipe_schema_follows():
    assert set(EngineName.__args__) == set(ENGINES)
    rounding = yaml.safe_load((REPO_ROOT / "rig" / "audit" / "engine_rounding.yaml").read_text())
    for spec in ENGINES.values():
        assert spec.package and spec.moe_intermediate_multiple() == rounding[spec.name]["moe_intermediate_multiple"]
    assert engine("vllm").moe_intermediate_multiple() == 32
    assert [name for name, spec in ENGINES.items() if not spec.gpu] == ["transformers"]
    assert load("mia-tp4").recipe.gpu and not load("tiny-cpu-docker").recipe.gpu


def test_the_build_context_holds_only_what_dockerfiles_copy():
    files, size = context_size()
    assert size < 1_000_000, (files, size)  # adapter/ and rig/tinymodel.py, not .venv, results/ or .git


def test_a_lab_base_is_pinned_per_machine_and_rendered_from_the_build_argument(tmp_path, monkeypatch):
    monkeypatch.setattr(lab, "PINS_FILE", tmp_path / "pins.yaml")
    recipe = load("tiny-cpu-docker").recipe
    assert lab.is_lab_image(recipe.image.repository) and not recipe.image.digests
    assert lab.lab_digests(recipe.image) == {}
    digest = "sha256:" + "a" * 64
    lab.write_lab_digests(recipe.image, {"linux/amd64": digest})
    assert lab.lab_digests(recipe.image) == {"linux/amd64": digest}
    dockerfile = render_dockerfile(recipe)
    assert f"FROM {recipe.image.repository}@${{BASE_DIGEST}}" in dockerfile and digest not in dockerfile


def test_a_cpu_compose_file_carries_no_gpu_only_settings():
    for ref in ("tiny-cpu-docker", "tiny-cpu-docker:delay", "tiny-cpu"):
        service = yaml.safe_load(render_compose(load(ref)))["services"]["server"]
        assert not {"ipc", "ulimits", "deploy"} & set(service), ref
    gpu = yaml.safe_load(render_compose(load("mia-tp4")))["services"]["server"]
    assert gpu["ipc"] == "host" and gpu["ulimits"]["memlock"] == -1 and "deploy" in gpu


def test_tinymodel_runs_standalone_as_the_image_build_does(tmp_path):
    usage = subprocess.run([sys.executable, str(REPO_ROOT / "rig" / "tinymodel.py")], capture_output=True, text=True, check=False)
    assert usage.returncode == 2 and "usage" in usage.stderr


@pytest.mark.parametrize("repository", ["lmsysorg/sglang", "voipmonitor/vllm"])
def test_standins_are_served_under_the_real_repository_names(repository):
    assert lab.standin_reference(repository) == f"127.0.0.1:5000/{repository}:standin-lab"
