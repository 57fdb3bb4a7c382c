"""kernelbench's own logic on CPU tensors: cold-L2 copies, interleaving, statistics, bitwise checks."""

from __future__ import annotations

import pytest
import torch

from rig.kernelbench.backends import BACKENDS, TorchFp8
from rig.kernelbench.bench import Variant, bitwise, copies_for_cold_l2, interleaved, run_shape, spread
from rig.kernelbench.command import build_variants, format_row


def test_copies_exceed_twice_the_l2():
    weight = 5120 * 576  # one fp8 copy of DeepSeek-V4.1-Flash's shared down_proj at TP4
    copies = copies_for_cold_l2(weight, 50 * 2**20)
    assert copies * weight > 2 * 50 * 2**20 and (copies - 2) * weight <= 2 * 50 * 2**20
    assert copies_for_cold_l2(10**12, 50 * 2**20) == 2


def test_interleaving_order():
    calls = []
    samples = interleaved(["a", "b", "c"], 3, lambda v: calls.append(v) or len(calls))
    assert calls == ["a", "b", "c"] * 3
    assert samples == {0: [1, 4, 7], 1: [2, 5, 8], 2: [3, 6, 9]}


def test_spread_and_bitwise():
    assert spread([float(i) for i in range(11)]) == (1.0, 9.0)
    a = torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)
    b = a.clone()
    b[1] = 2.015625
    assert bitwise(a, a.clone()).model_dump(exclude={"note"}) == {"elements": 3, "differing": 0, "max_abs_diff": 0.0}
    result = bitwise(a, b)
    assert result.differing == 1 and result.max_abs_diff == pytest.approx(0.015625)
    assert bitwise(torch.tensor([0.0]), torch.tensor([-0.0])).differing == 1  # bits, not values


def _bf16_ulp(magnitude: torch.Tensor) -> torch.Tensor:
    """The spacing of bfloat16 numbers at each magnitude (8 significant bits)."""
    exponent = torch.floor(torch.log2(magnitude.clamp(min=2.0**-126)))
    return torch.pow(2.0, exponent - 7)


@pytest.mark.parametrize("name", ["torch-bf16", "torch-fp8-tensorwise", "torch-fp8-rowwise"])
def test_padding_adds_only_zeros_and_both_gemms_give_the_exact_product_within_their_rounding_on_cpu(name):
    """What holds on any CPU: the padded operands are the unpadded ones plus exact zero columns, and
    each GEMM's output is the exact product of its operands within fp32 accumulation (K+2 roundings
    with the scales) plus the output's rounding to bfloat16. Bitwise equality of the two outputs is
    not: a CPU kernel may split K=576 and K=640 into different blocks, and summing in another order
    rounds differently (torch 2.13 CPU, AVX512: torch-fp8-tensorwise differs in 1 of 1536 elements by
    one bfloat16 ulp). The GPU kernels' bitwise claim is tests/gpu/test_gpu.py's."""
    backend = BACKENDS[name]
    device = torch.device("cpu")
    small = backend.prepare(6, 256, 576, 576, 1, device)
    padded = backend.prepare(6, 256, 576, 640, 1, device)
    x, w = small.dequantized()
    padded_x, padded_w = padded.dequantized()
    assert torch.equal(padded_x[:, :576], x) and torch.equal(padded_w[:, :576], w)
    assert not padded_x[:, 576:].any() and not padded_w[:, 576:].any()
    exact = x @ w.t()
    accumulation = (576 + 2) * 2.0**-24 * (x.abs() @ w.abs().t())
    bound = accumulation + _bf16_ulp(exact.abs() + accumulation) / 2
    for prepared in (small, padded):
        error = (prepared.run(0).double() - exact).abs()
        assert (error <= bound).all(), float((error / bound).max())
    differing = small.run(0) != padded.run(0)
    steps = (small.run(0).double() - padded.run(0).double()).abs()[differing]
    assert (steps <= _bf16_ulp(exact.abs()[differing] + accumulation[differing]) * 2).all()


def test_run_shape_rows_checks_and_unavailable_backends():
    variants = build_variants(["torch-bf16"], "torch-fp8-rowwise", "flashinfer-mxfp8-b12x", 576, 640)
    assert [v.role for v in variants] == ["production", "candidate", "control", "unpadded", "padded"]
    rows, checks = run_shape(variants, 6, 256, 576, torch.device("cpu"), rounds=3, calls_per_step=43, l2=2**20)
    by_label = {r.label: r for r in rows}
    assert by_label["flashinfer-mxfp8-b12x K=640"].unavailable == "needs a CUDA GPU"
    production = by_label["torch-fp8-rowwise K=576"]
    assert production.copies == copies_for_cold_l2(256 * 576 + 4 * 256, 2**20)
    assert len(production.samples_us) == 3 and production.vs_baseline_pct == 0
    assert production.ms_per_step == pytest.approx(production.us_per_call * 43 / 1000)
    assert checks["torch-fp8-rowwise K=640 vs torch-fp8-rowwise K=576"].differing == 0
    assert "unavailable" in format_row(by_label["flashinfer-mxfp8-b12x K=640"])
    assert "us/call" in format_row(production)


def test_fp8_scales_come_from_the_real_columns():
    backend = TorchFp8(rowwise=True)
    a = backend.prepare(2, 128, 96, 96, 1, torch.device("cpu"))
    b = backend.prepare(2, 128, 96, 128, 1, torch.device("cpu"))
    assert torch.equal(a.run(0), b.run(0))
    assert isinstance(Variant(backend, 128, "padded").label, str)
