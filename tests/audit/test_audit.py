"""Shape audit: derivation for every recipe, the constraint table, and the two headline findings."""

from __future__ import annotations

import json

import pytest
from conftest import rig_main

from rig.audit.check import check_experts, check_gemm, constraints
from rig.audit.command import audit_variant, recipe_dims
from rig.audit.shapes import ExpertShard, Gemm, ModelDims, derive, load_dims
from rig.deploy.recipe import all_recipe_paths, load, parse_recipe


def test_mia_tp4_reports_the_k576_shape_with_its_fix():
    report = audit_variant(load("mia-tp4:host"), None)
    (off,) = report.off_fast_path
    assert (off.layer, off.n, off.k, off.backend) == ("shared_experts.down_proj", 5120, 576, "b12x-mm-mxfp8")
    assert off.padded == [5120, 640] or tuple(off.padded) == (5120, 640)
    assert off.extra_work_pct == pytest.approx(11.1, abs=0.05) and off.adapter == "shared_pad_k"
    cutlass = [v for r in report.gemms if r.layer == "shared_experts.down_proj" for v in r.verdicts
               if v.backend == "flashinfer-cutlass-mxfp8-sm12x"]
    assert cutlass[0].accepted  # stock SGLang accepts K=576 on cutlass: the slow path, not a failure
    result = rig_main("audit", "mia-tp4")
    assert result.returncode == 0 and "+11.1% work" in result.stdout and "shared_pad_k" in result.stdout


def test_tp8_pads_288_to_384():
    gemm = Gemm("shared_expert", "shared_experts.down_proj", 5120, 288)
    verdict = check_gemm(gemm, "b12x-mm-mxfp8", constraints()["b12x-mm-mxfp8"])
    assert tuple(verdict.padded) == (5120, 384) and verdict.extra_work_pct == pytest.approx(33.33, abs=0.01)


def test_glm52_reports_the_352_shard_per_mode_and_b12x_version():
    a8 = audit_variant(load("glm52-tp6:a8"), None)
    a16 = audit_variant(load("glm52-tp6:a16"), None)
    assert a8.experts.intermediate == 352 and "341.333" in a8.experts.note
    by_backend = {v.backend: v for v in a8.experts.verdicts + a16.experts.verdicts}
    legacy_a8 = by_backend["b12x-w4a8-qmma-legacy"]
    assert not legacy_a8.accepted and tuple(legacy_a8.padded) == (6144, 384) and legacy_a8.adapter == "w4a8_pad"
    assert legacy_a8.extra_work_pct == pytest.approx(9.09, abs=0.01)
    assert by_backend["b12x-w4a8-native"].accepted and by_backend["b12x-w4a16-native"].accepted
    legacy_a16 = by_backend["b12x-w4a16-tiles-legacy"]
    assert not legacy_a16.accepted and legacy_a16.reasons == ["intermediate % 64"]


def test_smallest_alignment_not_a_blanket_128():
    shard = ExpertShard(6144, 320, 320, "")
    rules = constraints()
    assert check_experts(shard, "b12x-w4a16-tiles-legacy", rules["b12x-w4a16-tiles-legacy"]).accepted  # 320 % 64 == 0
    assert tuple(check_experts(shard, "b12x-w4a8-qmma-legacy", rules["b12x-w4a8-qmma-legacy"]).padded) == (6144, 384)


@pytest.mark.parametrize("path", all_recipe_paths(), ids=lambda p: p.stem)
def test_every_recipe_and_variant_derives(path):
    recipe = parse_recipe(path)
    for name in recipe.variants or [None]:
        resolved = recipe.variant(name)
        dims, _ = recipe_dims(resolved, None)
        gemms, shard, _ = derive(resolved, dims)
        assert gemms and all(g.n > 0 and g.k > 0 for g in gemms)
        json.dumps(audit_variant(resolved, None).model_dump(mode="json"))


def test_tiny_dims_match_the_generated_model(tmp_path):
    from rig.tinymodel import ensure_tiny_model

    model = ensure_tiny_model(tmp_path)
    shipped, _ = load_dims("tiny-llama", None)
    read, source = load_dims(None, str(model))
    assert source.endswith("config.json")
    assert {k: v for k, v in read.model_dump().items() if v} == {k: v for k, v in shipped.model_dump().items()
                                                                 if v and not k.startswith("_") and k != "name"}
    gemms, _, unknown = derive(load("tiny-cpu"), read)
    assert not unknown and {g.family for g in gemms} == {"dense_mlp", "attention", "lm_head"}


def test_constraint_rows_name_their_source():
    for name, row in constraints().items():
        assert row.source and row.versions and row.kind in ("dense", "experts"), name


def test_uneven_split_is_reported_not_guessed():
    dims = ModelDims(hidden_size=5120, moe_intermediate_size=2304, n_shared_experts=1)
    resolved = load("mia-tp4:host")
    resolved.topology = resolved.topology.model_copy(update={"tp": 5, "gpus_per_node": 5})
    _, _, unknown = derive(resolved, dims)
    assert any("does not split evenly over 5 ranks" in u for u in unknown)
