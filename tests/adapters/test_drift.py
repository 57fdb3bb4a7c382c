"""The drift matrix: hook targets verified statically against the engine wheels the recipes pin
(downloaded from PyPI once, cached), plus the checker itself on synthetic sources."""

from __future__ import annotations

from conftest import rig_main

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
    result = rig_main("adapters", "check")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    expect = {
        ("mia-tp4", "mxfp8_b12x"): "would arm",
        ("mia-tp4", "shared_pad_k"): "would arm",
        ("glm52-tp6", "w4a8_pad"): "redundant",
        ("tiny-cpu", "token_delay"): "would arm",
    }
    # gpu_delay is enabled by comparison arms (RIG_GPU_DELAY_US=...), not by a variant of its recipe.
    row = next(line for line in lines if line.startswith("llama8b-h200") and " gpu_delay " in line)
    assert "no      would arm: vllm.v1.worker.gpu_worker.Worker.execute_model" in row, row
    row = next(line for line in lines if line.startswith("llama8b-sglang-h200") and " gpu_delay " in line)
    assert "no      would arm: sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation" in row, row
    for (recipe, adapter), state in expect.items():
        row = next(line for line in lines if line.startswith(recipe) and f" {adapter} " in line)
        assert f"yes     {state}" in row, row
    assert "stand-in for dev-dsv41" in result.stdout and "sglang-0.5.23" in result.stdout


# ---- call sites, argument order and the kernel library --------------------------------------

import ast  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from rig.drift import fetch_wheel  # noqa: E402
from rig_adapters.targets import check_caller  # noqa: E402

FP8_UTILS = "sglang/srt/layers/quantization/fp8_utils.py"
FP8 = "sglang/srt/layers/quantization/fp8.py"
LINEAR = "sglang/srt/layers/linear.py"
GEMM_BASE = "flashinfer/gemm/gemm_base.py"
FI_UTILS = "flashinfer/utils.py"


def _in_function(source: str, dotted: str, old: str, new: str) -> str:
    """Replace `old` with `new` only inside the function `dotted` (Class.method or function)."""
    tree = ast.parse(source)
    body, node = tree.body, None
    for part in dotted.split("."):
        node = next(n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)
        body = node.body
    lines = source.splitlines(keepends=True)
    start, end = node.lineno - 1, node.end_lineno
    chunk = "".join(lines[start:end])
    assert old in chunk, f"{old!r} not in {dotted}"
    return "".join(lines[:start]) + chunk.replace(old, new) + "".join(lines[end:])


def _mini_wheel(source: Path, target: Path, members: list[str], mutate: dict[str, callable]) -> None:
    """A wheel holding only the engine files the drift check reads, some of them mutated."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as copy:
        metadata = next(n for n in original.namelist() if n.endswith(".dist-info/METADATA"))
        for name in [metadata, *members]:
            text = original.read(name).decode("utf-8")
            copy.writestr(name, mutate[name](text) if name in mutate else text)


@pytest.fixture(scope="module")
def pinned_wheels():
    sglang = fetch_wheel("sglang", "0.5.23")
    flashinfer = fetch_wheel("flashinfer_python", "0.7.2")
    return sglang, flashinfer


def _check_mutated(tmp_path, pinned_wheels, sglang_mutations=None, flashinfer_mutations=None):
    sglang, flashinfer = pinned_wheels
    engines = tmp_path / "cache" / "engines"
    _mini_wheel(sglang, engines / "sglang-0.5.23" / sglang.name, [FP8_UTILS, FP8, LINEAR], sglang_mutations or {})
    _mini_wheel(flashinfer, engines / "flashinfer_python-0.7.2" / flashinfer.name, [GEMM_BASE, FI_UTILS],
                flashinfer_mutations or {})
    return rig_main("adapters", "check", "mia-tp4", env={"RIG_CACHE_DIR": str(tmp_path / "cache")})


def _row(result, adapter: str) -> str:
    return next(line for line in result.stdout.splitlines() if line.startswith("mia-tp4") and f" {adapter} " in line)


def test_unmutated_copy_arms_and_reads_flashinfer(tmp_path, pinned_wheels):
    result = _check_mutated(tmp_path, pinned_wheels)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "flashinfer_python-0.7.2" in result.stdout
    row = _row(result, "mxfp8_b12x")
    assert "would arm" in row and "called from dispatch_block_fp8_mxfp8_linear" in row and "mm_mxfp8 backend='b12x'" in row


MUTATIONS = {
    "prepare no longer called": (
        {FP8: lambda s: _in_function(s, "Fp8LinearMethod.process_weights_after_loading_block_quant",
                                     "self._prepare_block_fp8_as_mxfp8(layer)", "pass")},
        {}, "shared_pad_k",
        "process_weights_after_loading_block_quant no longer calls sglang.srt.layers.quantization.fp8.Fp8LinearMethod._prepare_block_fp8_as_mxfp8"),
    "linear no longer dispatched": (
        {FP8_UTILS: lambda s: _in_function(s, "dispatch_block_fp8_mxfp8_linear", "flashinfer_mxfp8_blockscaled_linear,",
                                           "flashinfer_mxfp8_blockscaled_linear_v2,")},
        {}, "mxfp8_b12x", "dispatch_block_fp8_mxfp8_linear no longer calls"),
    "two parameters swap places": (
        {FP8_UTILS: lambda s: _in_function(s, "flashinfer_mxfp8_blockscaled_linear",
                                           "    weight: torch.Tensor,\n    weight_scale: torch.Tensor,\n",
                                           "    weight_scale: torch.Tensor,\n    weight: torch.Tensor,\n")},
        {}, "mxfp8_b12x", "takes (input, weight_scale, weight, input_scale, bias, output_dtype, backend, pin_tactic) by position"),
    "call site passes an extra positional": (
        {FP8: lambda s: _in_function(s, "Fp8LinearMethod.process_weights_after_loading_block_quant",
                                     "self._prepare_block_fp8_as_mxfp8(layer)", "self._prepare_block_fp8_as_mxfp8(layer, weight)")},
        {}, "shared_pad_k", "passes 3 argument(s) by position"),
    "b12x gone from mm_mxfp8": (
        {}, {GEMM_BASE: lambda s: _in_function(s, "mm_mxfp8", '"cudnn", "b12x", "auto"', '"cudnn", "auto"')},
        "mxfp8_b12x", "mm_mxfp8 no longer lists backend='b12x'"),
    "fallback exception renamed": (
        {}, {FI_UTILS: lambda s: s.replace("class BackendSupportedError(Exception):", "class BackendError(Exception):")},
        "mxfp8_b12x", "catches flashinfer.utils.BackendSupportedError, which no longer exists"),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_mutated_engine_or_kernel_library_makes_the_check_refuse(tmp_path, pinned_wheels, case):
    sglang_mutations, flashinfer_mutations, adapter, reason = MUTATIONS[case]
    result = _check_mutated(tmp_path, pinned_wheels, sglang_mutations, flashinfer_mutations)
    assert result.returncode == 1, result.stdout + result.stderr
    row = _row(result, adapter)
    assert "refuses" in row and reason in row, row
    assert "would refuse to arm" in result.stderr


CALLER_SOURCE = '''
from functools import partial
from pkg.mod import flashinfer_mxfp8_blockscaled_linear as fi_linear

def keywords(x, w, s):
    return fi_linear(input=x, weight=w, weight_scale=s)

def swapped(input, weight, weight_scale):
    return fi_linear(input, weight_scale, weight)

def starred(args):
    return fi_linear(*args)

def unknown_keyword(x):
    return partial(fi_linear, backend="b12x", tile=128)
'''


METHOD_SOURCE = '''
class Worker:
    def step(self, batch, forward=None):
        pass
'''

METHOD_CALLERS = '''
from pkg.worker import Worker

class Scheduler:
    def through_an_attribute(self, batch):
        return self.worker.step(batch)

    def through_super(self, batch):
        return super().step(batch)

    def through_the_class(self, batch):
        return Worker.step(self.worker, batch)

    def class_with_batch_first(self, batch):
        return Worker.step(batch)

    def too_many(self, batch, forward):
        return self.worker.step(batch, forward)
'''


@pytest.mark.parametrize("caller,problem", [
    ("through_an_attribute", None),
    ("through_super", None),
    ("through_the_class", None),
    ("class_with_batch_first", "passes batch in the position of self"),
    ("too_many", "passes 3 argument(s) by position"),
])
def test_a_method_called_on_an_object_has_its_self_bound(caller, problem):
    """SGLang's scheduler calls `self.model_worker.forward_batch_generation(batch)`: the object before
    the dot is self, so batch is the second parameter, not the first."""
    target = Target("pkg.worker", "Worker.step", "i", ("self", "batch"), positional=2)
    sources = {"pkg.worker": METHOD_SOURCE, "pkg.callers": METHOD_CALLERS}
    found = check_caller(target, f"pkg.callers.Scheduler.{caller}", ["self", "batch", "forward"], sources.get)
    assert found == problem if problem is None else problem in found, found


def _caller_reader(module: str):
    return {"pkg.mod": SOURCE, "pkg.callers": CALLER_SOURCE}.get(module)


@pytest.mark.parametrize("caller,problem", [
    ("keywords", None),
    ("swapped", "passes weight_scale in the position of weight"),
    ("starred", "passes *args"),
    ("unknown_keyword", "passes tile=, which pkg.mod.flashinfer_mxfp8_blockscaled_linear does not take"),
    ("gone", "call site pkg.callers.gone does not exist"),
])
def test_call_sites_through_an_alias(caller, problem):
    target = Target("pkg.mod", "flashinfer_mxfp8_blockscaled_linear", "i", ("input", "weight", "weight_scale"))
    params = ["input", "weight", "weight_scale", "input_scale", "bias", "output_dtype", "backend", "pin_tactic"]
    found = check_caller(target, f"pkg.callers.{caller}", params, _caller_reader)
    assert found == problem if problem is None else problem in found, found
