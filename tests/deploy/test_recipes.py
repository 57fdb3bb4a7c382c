"""Recipes: all validate; every kind of wrong recipe fails with one line naming file, field, fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import REPO, rig_main

from rig.deploy.recipe import all_recipe_paths, load, parse_recipe
from rig.errors import RigError


def test_every_recipe_validates():
    names = {parse_recipe(p).name for p in all_recipe_paths()}
    assert {"tiny-cpu", "mia-tp4", "glm52-tp6"} <= names
    result = rig_main("validate")
    assert result.returncode == 0, result.stdout + result.stderr


def test_variants_resolve():
    spark = load("mia-tp4:spark")
    assert (spark.topology.nodes, spark.topology.gpus_per_node, spark.topology.platform) == (4, 1, "linux/arm64")
    assert load("mia-tp4").variant == "host"
    assert load("glm52-tp6:a8").full_env()["B12X_MOE_FORCE_A8"] == "1"
    assert load("glm52-tp6:a16").full_env()["VLLM_B12X_MOE_FP4_FORCE_A16"] == "1"
    assert load("mia-tp4").full_env()["DSV41_SHARED_PAD_K"] == "1"


def _mutate(tmp_path: Path, base: str, change) -> Path:
    data = yaml.safe_load((REPO / "recipes" / f"{base}.yaml").read_text())
    change(data)
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _set(path: str, value):
    def change(data):
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[last] = value
    return change


BAD = {
    "unknown key": ("mia-tp4", _set("model.flavour", "x"), "model.flavour", "remove it"),
    "tp x nodes": ("mia-tp4", _set("topology.gpus_per_node", 2), "topology", "nodes x gpus_per_node"),
    "no digest": ("mia-tp4", _set("image.digests", {}), "image.digests.linux/amd64", "rig pin"),
    "unknown adapter": ("mia-tp4", _set("adapters", [{"name": "turbo", "gates": {"X": "1"}}]), "adapters", "rig adapters list"),
    "bare latest": ("mia-tp4", _set("image.tag", "latest"), "image.tag", "latest"),
    "fork knob on stock vllm": ("glm52-tp6", _set("engine.fork", None), "env.VLLM_DCP_A2A_", "fork"),
    "malformed digest": ("glm52-tp6", _set("image.digests", {"linux/amd64": "sha256:abc"}), "image.digests.linux/amd64", "64"),
    "wrong gate": ("mia-tp4", _set("adapters", [{"name": "shared_pad_k", "gates": {"PAD": "1"}}]), "adapters.shared_pad_k.gates", "DSV41"),
    "adapter for another engine": ("tiny-cpu", _set("adapters", [{"name": "shared_pad_k", "gates": {"DSV41_SHARED_PAD_K": "1"}}]), "adapters.shared_pad_k", "remove"),
    "adapter out of scope": ("mia-tp4", lambda d: d.update(name="mia-tp8"), "adapters.mxfp8_b12x", "scope"),
    "bad regex": ("mia-tp4", _set("boot_log", {"must": ["(unclosed"]}), "boot_log.must", "compile"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_recipe_is_one_clear_line(tmp_path, case):
    base, change, field, fix_word = BAD[case]
    path = _mutate(tmp_path, base, change)
    with pytest.raises(RigError) as caught:
        parse_recipe(path)
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message and field in message and "fix:" in message, message
    assert fix_word in message, message


def test_cli_reports_bad_recipe_without_traceback(tmp_path):
    path = _mutate(tmp_path, "mia-tp4", _set("image.tag", "latest"))
    result = rig_main("validate", str(path))
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(lines) == 1 and "image.tag" in lines[0]


def test_broken_yaml_and_missing_file(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(RigError, match="not valid YAML"):
        parse_recipe(broken)
    result = rig_main("up", "no-such-recipe")
    assert result.returncode == 2 and "no such recipe" in result.stderr and "Traceback" not in result.stderr


def test_unpinned_recipe_validates_but_build_refuses(tmp_path):
    def change(data):
        data["image"]["digests"] = {}
        data["image"]["unpinned"] = True
    path = _mutate(tmp_path, "mia-tp4", change)
    assert parse_recipe(path).image.unpinned
    result = rig_main("validate", str(path))
    assert result.returncode == 0 and "UNPINNED" in result.stdout
