"""The drift matrix: hook targets verified statically against the engine wheels the recipes pin
(downloaded from PyPI once, cached), plus the checker itself on synthetic sources."""

from __future__ import annotations

from conftest import rig_cli

from rig_adapters.registry import BY_NAME, Target
from rig_adapters.targets import check_target, verdict

SOURCE = '''
from x import imported_name

class Fp8LinearMethod:
    def _prepare_block_fp8_as_mxfp8(self, layer):
        pass

def flashinfer_mxfp8_blockscaled_linear(input, weight, weight_scale, input_scale=None, bias=None, output_dtype=None):
    pass
'''


def reader(module: str):
    return SOURCE if module == "pkg.mod" else None


def test_checker_finds_moves():
    assert check_target(Target("pkg.mod", "Fp8LinearMethod._prepare_block_fp8_as_mxfp8", "i", ("self", "layer")), reader) is None
    assert "does not exist" in check_target(Target("pkg.other", "x", "i"), reader)
    assert "does not exist" in check_target(Target("pkg.mod", "Fp8LinearMethod.gone", "i"), reader)
    moved = check_target(Target("pkg.mod", "flashinfer_mxfp8_blockscaled_linear", "i", ("input", "backend", "pin_tactic")), reader)
    assert "lacks parameter(s) backend, pin_tactic" in moved
    assert check_target(Target("pkg.mod", "imported_name", "i"), reader) is None


def test_verdict_refuses_on_an_older_sglang_signature():
    spec = BY_NAME["mxfp8_b12x"]
    state, detail = verdict(spec, lambda module: SOURCE.replace("class Fp8", "class Old") if module == spec.targets[0].module else None)
    assert state == "refuses" and "pin_tactic" in detail


def test_matrix_for_every_recipe():
    result = rig_cli("adapters", "check")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    expect = {
        ("mia-tp4", "mxfp8_b12x"): "would arm",
        ("mia-tp4", "shared_pad_k"): "would arm",
        ("glm52-tp6", "w4a8_pad"): "redundant",
        ("tiny-cpu", "token_delay"): "would arm",
    }
    for (recipe, adapter), state in expect.items():
        row = next(line for line in lines if line.startswith(recipe) and f" {adapter} " in line)
        assert f"yes     {state}" in row, row
    assert "stand-in for dev-dsv41" in result.stdout and "sglang-0.5.23" in result.stdout
