"""The adapters' own logic on CPU tensors: padded values and shapes, scale-layout checks,
buffer reuse and stable addresses, b12x routing and rejection, w4a8 per-mode padding and
bit-exact MoE outputs, and every raise path."""

from __future__ import annotations

import importlib.util
import logging
import types
from pathlib import Path

import pytest
import torch
from conftest import REPO

from rig_adapters.adapters import mxfp8_b12x, shared_pad_k, w4a8_pad
from rig_adapters.registry import BY_NAME
from rig_adapters.runtime import AdapterContext, Redundant

STANDINS = REPO / "tests" / "standins"


def load_standin(relative: str) -> types.ModuleType:
    """A private copy of a stand-in module, so patching it does not leak between tests."""
    path = STANDINS / relative
    spec = importlib.util.spec_from_file_location(f"standin_{path.stem}_{id(path)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def context(adapter: str, installer: str, module: types.ModuleType) -> AdapterContext:
    spec = BY_NAME[adapter]
    (target,) = [t for t in spec.targets if t.installer == installer]
    return AdapterContext(spec, target, module)


def fp8_layer(n: int, k: int, prefix: str = "model.layers.3.mlp.shared_experts.down_proj", seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    weight = (torch.randn(n, k, generator=generator) * 0.5).to(torch.float8_e4m3fn)
    exponents = torch.randint(-8, 2, (-(-n // 32), k // 32), generator=generator).float()
    scales = torch.pow(2.0, exponents)
    layer = types.SimpleNamespace(prefix=prefix, weight=torch.nn.Parameter(weight, requires_grad=False),
                                  weight_scale_inv=torch.nn.Parameter(scales, requires_grad=False))
    layer.weight_scale_inv.format_ue8m0 = True
    return layer


@pytest.fixture(autouse=True)
def _fresh_state():
    shared_pad_k.PADDED.clear()
    shared_pad_k._BUFFERS.clear()
    shared_pad_k._WARNED_LARGE[0] = False
    mxfp8_b12x.REJECTED.clear()
    yield
    mxfp8_b12x.device_capability = mxfp8_b12x._cuda_capability


# ---- shared_pad_k: weights -------------------------------------------------------------

@pytest.mark.parametrize("k,target", [(576, 640), (288, 384), (768, 768), (32, 128)])
def test_pad_layer_shapes_and_values(k, target):
    layer = fp8_layer(256, k)
    before_w, before_s = layer.weight.data.clone(), layer.weight_scale_inv.data.clone()
    result = shared_pad_k.pad_layer(layer, layer.prefix)
    if k == target:
        assert result is None and layer.weight.shape == (256, k)
        return
    assert result == (256, k, target)
    assert layer.weight.shape == (256, target) and layer.weight.dtype == torch.float8_e4m3fn
    assert torch.equal(layer.weight.data[:, :k].view(torch.uint8), before_w.view(torch.uint8))
    assert not layer.weight.data[:, k:].float().any()
    assert layer.weight_scale_inv.shape == (8, target // 32)
    assert torch.equal(layer.weight_scale_inv.data[:, : k // 32], before_s)
    assert torch.all(layer.weight_scale_inv.data[:, k // 32 :] == 1.0)
    assert layer.weight_scale_inv.format_ue8m0 is True
    assert shared_pad_k.PADDED[(256, k)] == target


def test_seed_shape_scale_grid():
    layer = fp8_layer(5120, 576)
    assert layer.weight_scale_inv.shape == (160, 18)
    shared_pad_k.pad_layer(layer, layer.prefix)
    assert layer.weight.shape == (5120, 640) and layer.weight_scale_inv.shape == (160, 20)


def _broken(kind: str):
    layer = fp8_layer(256, 576)
    if kind == "dtype":
        layer.weight = torch.nn.Parameter(layer.weight.data.float(), requires_grad=False)
    elif kind == "ndim":
        layer.weight = torch.nn.Parameter(layer.weight.data.reshape(-1), requires_grad=False)
    elif kind == "k32":
        layer = fp8_layer(256, 576)
        layer.weight = torch.nn.Parameter(torch.zeros(256, 580).to(torch.float8_e4m3fn), requires_grad=False)
    elif kind == "no scales":
        del layer.weight_scale_inv
    elif kind == "scale shape":
        layer.weight_scale_inv = torch.nn.Parameter(torch.ones(2, 18), requires_grad=False)
    elif kind == "scale dtype":
        layer.weight_scale_inv = torch.nn.Parameter(torch.ones(8, 18, dtype=torch.float16), requires_grad=False)
    elif kind == "not ue8m0":
        layer.weight_scale_inv.data[0, 0] = 0.3
    return layer


@pytest.mark.parametrize("kind,match", [("dtype", "float8_e4m3fn"), ("ndim", "2-D"), ("k32", "multiple of 32"),
                                        ("no scales", "weight_scale_inv"), ("scale shape", "32x32"),
                                        ("scale dtype", "float32"), ("not ue8m0", "powers of two")])
def test_pad_layer_raises_on_every_mismatch(kind, match):
    layer = _broken(kind)
    with pytest.raises(RuntimeError, match=match):
        shared_pad_k.pad_layer(layer, layer.prefix)


def built_layer(linear: types.ModuleType, cls: str, n: int, k: int, prefix: str):
    """A stand-in linear layer built as SGLang builds one (the name given as `prefix`, which the
    class itself does not keep), carrying fp8_layer's block-FP8 weight and scales."""
    layer = getattr(linear, cls)(k, n, prefix=prefix) if cls == "RowParallelLinear" else getattr(linear, cls)(k, [n // 2, n // 2], prefix=prefix)
    loaded = fp8_layer(n, k, prefix)
    layer.weight, layer.weight_scale_inv = loaded.weight, loaded.weight_scale_inv
    return layer


def test_prepare_hook_pads_the_layer_the_model_named_before_sglang_prepares(monkeypatch):
    monkeypatch.syspath_prepend(str(STANDINS))
    fp8 = load_standin("sglang/srt/layers/quantization/fp8.py")
    linear = load_standin("sglang/srt/layers/linear.py")
    shared_pad_k.install_names(context("shared_pad_k", "install_names", linear))
    shared_pad_k.install_prepare(context("shared_pad_k", "install_prepare", fp8))
    method = fp8.Fp8LinearMethod.__new__(fp8.Fp8LinearMethod)
    shared = built_layer(linear, "RowParallelLinear", 5120, 576, "model.layers.3.mlp.shared_experts.down_proj")
    assert not hasattr(shared, "prefix")  # the stock class keeps no name: the adapter recorded it
    other = built_layer(linear, "RowParallelLinear", 256, 576, "model.layers.3.self_attn.o_proj")
    method._prepare_block_fp8_as_mxfp8(shared)
    method._prepare_block_fp8_as_mxfp8(other)
    assert shared.prepared == ((5120, 640), (160, 20))  # SGLang saw the padded shapes
    assert other.prepared == ((256, 576), (8, 18))  # not a shared expert: untouched
    method._prepare_block_fp8_as_mxfp8(shared)  # idempotent per layer
    assert shared.weight.shape == (5120, 640)
    gate_up = built_layer(linear, "MergedColumnParallelLinear", 512, 576, "model.layers.3.mlp.shared_experts.gate_up_proj")
    method._prepare_block_fp8_as_mxfp8(gate_up)
    assert gate_up.prepared == ((512, 576), (16, 18))  # the shared expert's other linear: untouched


def test_prepare_hook_refuses_a_layer_without_its_name(monkeypatch):
    """A layer built without the wrapper (no recorded name, no prefix of its own) cannot be told
    apart from the shared down_proj: the preparation raises rather than leave it unpadded."""
    monkeypatch.syspath_prepend(str(STANDINS))
    fp8 = load_standin("sglang/srt/layers/quantization/fp8.py")
    linear = load_standin("sglang/srt/layers/linear.py")
    shared_pad_k.install_prepare(context("shared_pad_k", "install_prepare", fp8))
    unnamed = built_layer(linear, "RowParallelLinear", 5120, 576, "model.layers.3.mlp.shared_experts.down_proj")
    with pytest.raises(RuntimeError, match="without the name it was built with"):
        fp8.Fp8LinearMethod.__new__(fp8.Fp8LinearMethod)._prepare_block_fp8_as_mxfp8(unnamed)


# ---- shared_pad_k: inputs ---------------------------------------------------------------

def test_pad_input_zero_tail_and_stable_address():
    weight = torch.zeros(64, 640)
    first = shared_pad_k.pad_input(torch.randn(6, 576, dtype=torch.bfloat16), weight, 640)
    ptr = first.data_ptr()
    x = torch.randn(3, 576, dtype=torch.bfloat16)
    second = shared_pad_k.pad_input(x, weight, 640)
    assert second.data_ptr() == ptr  # the same persistent buffer: CUDA-graph safe
    assert second.shape == (3, 640) and torch.equal(second[:, :576], x)
    assert not second[:, 576:].float().any()


def test_pad_input_keeps_leading_dims_and_separates_weights():
    w1, w2 = torch.zeros(8, 640), torch.zeros(8, 640)
    a = shared_pad_k.pad_input(torch.randn(2, 3, 576), w1, 640)
    b = shared_pad_k.pad_input(torch.randn(2, 3, 576), w2, 640)
    assert a.shape == (2, 3, 640) and a.data_ptr() != b.data_ptr()
    assert len(shared_pad_k._BUFFERS) == 2


def test_pad_input_large_batch_allocates_and_warns_once(monkeypatch, caplog):
    monkeypatch.setenv("DSV41_SHARED_PAD_BUF_ROWS", "4")
    weight = torch.zeros(8, 640)
    with caplog.at_level(logging.WARNING, logger="rig_adapters"):
        big = shared_pad_k.pad_input(torch.randn(10, 576), weight, 640)
        shared_pad_k.pad_input(torch.randn(12, 576), weight, 640)
    assert big.shape == (10, 640) and not big[:, 576:].any()
    assert sum("exceed the 4-row buffer" in r.message for r in caplog.records) == 1
    assert shared_pad_k._BUFFERS == {}


def test_pad_input_rejects_integer_activations():
    with pytest.raises(RuntimeError, match="not a floating activation"):
        shared_pad_k.pad_input(torch.ones(2, 576, dtype=torch.int32), torch.zeros(8, 640), 640)


def _linear_stack():
    utils = load_standin("sglang/srt/layers/quantization/fp8_utils.py")
    mxfp8_b12x.install_linear(context("mxfp8_b12x", "install_linear", utils))
    shared_pad_k.install_linear(context("shared_pad_k", "install_linear", utils))
    return utils


def test_padded_linear_matches_unpadded():
    utils = _linear_stack()
    layer = fp8_layer(256, 576)
    reference_weight = layer.weight.data.clone()
    shared_pad_k.pad_layer(layer, layer.prefix)
    x = torch.randn(6, 576, dtype=torch.bfloat16)
    out = utils.flashinfer_mxfp8_blockscaled_linear(x, layer.weight.data, None, backend="cutlass", pin_tactic=True)
    expected = (x.float() @ reference_weight.float().t()).to(torch.bfloat16)
    assert out.shape == (6, 256)
    torch.testing.assert_close(out, expected)
    assert utils.CALLS[-1][1] == (6, 640)


def test_prequantized_input_raises():
    utils = _linear_stack()
    layer = fp8_layer(256, 576)
    shared_pad_k.pad_layer(layer, layer.prefix)
    with pytest.raises(RuntimeError, match="pre-quantized"):
        utils.flashinfer_mxfp8_blockscaled_linear(torch.randn(2, 576), layer.weight.data, None, input_scale=torch.ones(1))


def test_unpadded_mismatch_still_raises_upstream():
    utils = _linear_stack()
    with pytest.raises(ValueError, match="does not match"):
        utils.flashinfer_mxfp8_blockscaled_linear(torch.randn(2, 500), torch.zeros(64, 640), None)


# ---- mxfp8_b12x --------------------------------------------------------------------------

def test_b12x_routes_accepted_shapes_and_rejects_k576_once(caplog):
    mxfp8_b12x.device_capability = lambda device: (12, 0)
    utils = load_standin("sglang/srt/layers/quantization/fp8_utils.py")
    ctx = context("mxfp8_b12x", "install_linear", utils)
    mxfp8_b12x.install_linear(ctx)
    linear = utils.flashinfer_mxfp8_blockscaled_linear
    with caplog.at_level(logging.WARNING, logger="rig_adapters"):
        linear(torch.randn(6, 640), torch.zeros(5120, 640), None, backend="cutlass")
        linear(torch.randn(6, 576), torch.zeros(5120, 576), None, backend="cutlass")
        linear(torch.randn(6, 576), torch.zeros(5120, 576), None, backend="cutlass")
    assert [c[0] for c in utils.CALLS] == ["b12x", "cutlass", "cutlass"]
    rejected = [r.message for r in caplog.records if "rejected" in r.message]
    assert rejected == ["MXFP8 backend 'b12x' rejected N=5120 K=576 (b12x mm_mxfp8 requires the contraction dim K "
                        "to be a multiple of 128 (one full BK128 tile). Got K=576.)"]
    assert (5120, 576) in mxfp8_b12x.REJECTED and ctx.rejected((5120, 576))


def test_b12x_rejects_everything_off_sm12x():
    mxfp8_b12x.device_capability = lambda device: (9, 0)
    assert "SM120/SM121 only, this is sm90" in mxfp8_b12x.reject_reason(5120, 640, None)
    mxfp8_b12x.device_capability = lambda device: (12, 1)
    assert "n >= 128" in mxfp8_b12x.reject_reason(64, 640, None)


def test_b12x_runtime_error_falls_back():
    mxfp8_b12x.device_capability = lambda device: (12, 0)
    calls = []

    def upstream(input, weight, weight_scale, input_scale=None, bias=None, output_dtype=None, backend="cutlass", pin_tactic=False):
        calls.append(backend)
        if backend == "b12x":
            raise RuntimeError("b12x: unsupported scale layout")
        return "stock"

    module = types.SimpleNamespace(flashinfer_mxfp8_blockscaled_linear=upstream)
    mxfp8_b12x.install_linear(context("mxfp8_b12x", "install_linear", module))
    assert module.flashinfer_mxfp8_blockscaled_linear(torch.randn(2, 640), torch.zeros(256, 640), None) == "stock"
    assert calls == ["b12x", "cutlass"]
    assert (256, 640) in mxfp8_b12x.REJECTED


# ---- w4a8_pad ----------------------------------------------------------------------------

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def dequant(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Packed e2m1 nibbles (low first) with per-32 e8m0 scales -> float64."""
    low, high = packed & 0xF, packed >> 4
    values = E2M1.double()[torch.stack([low, high], dim=-1).long()].flatten(-2)
    return values * torch.pow(2.0, scales.double() - 127).repeat_interleave(32, dim=-1)


def reference_moe(x, w1, w2, w1_scale, w2_scale, intermediate):
    gate_up = dequant(w1, w1_scale)  # [E, 2I, H]
    down = dequant(w2, w2_scale)  # [E, H, I]
    gate, up = gate_up[:, :intermediate], gate_up[:, intermediate:]
    # Sequential sums (cumsum) fix the reduction order: trailing zero terms cannot change them,
    # so a difference could only come from the padded values, not from BLAS tiling.
    def project(a, b):  # a [T, H], b [E, I, H] -> [E, T, I]
        return (a[None, :, None, :] * b[:, None, :, :]).cumsum(-1)[..., -1]

    hidden = torch.nn.functional.silu(project(x, gate)) * project(x, up)
    products = hidden.unsqueeze(2) * down.unsqueeze(1)  # [E, T, H, I]
    return hidden, products.cumsum(-1)[..., -1]


def experts(n_experts=2, hidden=256, intermediate=352, seed=0):
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randint(0, 256, (n_experts, 2 * intermediate, hidden // 2), generator=g, dtype=torch.uint8)
    w2 = torch.randint(0, 256, (n_experts, hidden, intermediate // 2), generator=g, dtype=torch.uint8)
    s1 = torch.randint(120, 130, (n_experts, 2 * intermediate, hidden // 32), generator=g, dtype=torch.uint8)
    s2 = torch.randint(120, 130, (n_experts, hidden, intermediate // 32), generator=g, dtype=torch.uint8)
    return w1, w2, s1, s2


@pytest.mark.parametrize("alignment,target", [(128, 384), (64, 384), (32, 352)])
def test_w4a8_pad_sizes(alignment, target):
    assert w4a8_pad.padded_size(352, alignment) == target


def test_w4a8_pad_is_bit_exact():
    w1, w2, s1, s2 = experts()
    x = torch.randn(5, 256, dtype=torch.float64)
    hidden_before, before = reference_moe(x, w1, w2, s1, s2, 352)
    p1, p2, ps1, ps2, was, now = w4a8_pad.pad_experts(w1, w2, s1, s2, 128)
    assert (was, now) == (352, 384)
    assert p1.shape == (2, 768, 128) and p2.shape == (2, 256, 192) and ps1.shape == (2, 768, 8) and ps2.shape == (2, 256, 12)
    hidden_after, after = reference_moe(x, p1, p2, ps1, ps2, 384)
    assert torch.equal(hidden_after[..., :352], hidden_before)
    assert torch.count_nonzero(hidden_after[..., 352:]) == 0  # silu(0) * 0
    assert torch.equal(before, after)


def test_w4a8_wrapper_pads_per_mode_and_passes_aligned_through(monkeypatch):
    monkeypatch.setattr(w4a8_pad, "native_tail_support", lambda: None)
    module = load_standin("vllm/model_executor/layers/fused_moe/b12x.py")
    w4a8_pad.install_prepare(context("w4a8_pad", "install_prepare", module))
    w1, w2, s1, s2 = experts()
    a8 = module.B12xExperts("w4a8_mx", s1, s2)
    assert a8._prepare_experts(w1=w1, w2=w2, activation="silu", params_dtype=torch.bfloat16)["intermediate_size"] == 384
    assert a8.quant_config._w1.scale.shape == (2, 768, 8)
    a16 = module.B12xExperts("w4a16", s1, s2)
    assert a16._prepare_experts(w1=w1, w2=w2, activation="silu", params_dtype=torch.bfloat16)["intermediate_size"] == 384
    w1b, w2b, s1b, s2b = experts(intermediate=384)
    aligned = module.B12xExperts("w4a8_mx", s1b, s2b)
    result = aligned._prepare_experts(w1=w1b, w2=w2b, activation="silu", params_dtype=torch.bfloat16)
    assert result["w1"] is w1b  # untouched
    nvfp4 = module.B12xExperts("nvfp4", s1, s2)
    assert nvfp4._prepare_experts(w1=w1, w2=w2, activation="silu", params_dtype=torch.bfloat16)["intermediate_size"] == 352


def test_w4a8_raise_paths(monkeypatch):
    monkeypatch.setattr(w4a8_pad, "native_tail_support", lambda: None)
    module = load_standin("vllm/model_executor/layers/fused_moe/b12x.py")
    w4a8_pad.install_prepare(context("w4a8_pad", "install_prepare", module))
    w1, w2, s1, s2 = experts()
    interleaved = module.B12xExperts("w4a8_mx", s1, s2, w13_layout="interleaved")
    with pytest.raises(RuntimeError, match="interleaves"):
        interleaved._prepare_experts(w1=w1, w2=w2, activation="silu", params_dtype=torch.bfloat16)
    wrong_scales = module.B12xExperts("w4a8_mx", s1[:, :10], s2)
    with pytest.raises(RuntimeError, match="w1_scale has shape"):
        wrong_scales._prepare_experts(w1=w1, w2=w2, activation="silu", params_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="not a multiple of 32"):
        w4a8_pad.pad_experts(w1, w2[:, :, :170], s1, s2, 128)


def test_w4a8_refuses_as_redundant_when_b12x_plans_tails_natively(tmp_path, monkeypatch):
    package = tmp_path / "b12x"
    (package / "moe" / "fused_moe").mkdir(parents=True)
    (package / "__init__.py").write_text("__version__ = '1.5.1'\n")
    (package / "moe" / "__init__.py").write_text("")
    (package / "moe" / "fused_moe" / "__init__.py").write_text("")
    (package / "moe" / "fused_moe" / "_impl.py").write_text("def _dynamic_kernel_intermediate_size(n, mode):\n    return n\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = load_standin("vllm/model_executor/layers/fused_moe/b12x.py")
    with pytest.raises(Redundant, match="b12x 1.5.1 plans non-aligned shards natively"):
        w4a8_pad.install_prepare(context("w4a8_pad", "install_prepare", module))


def test_token_delay_needs_a_delay_in_its_range(monkeypatch):
    from rig_adapters.adapters import token_delay
    from rig_adapters.runtime import Refused

    monkeypatch.setenv("RIG_TOKEN_DELAY_MS", "-3")
    module = types.SimpleNamespace(LlamaForCausalLM=type("LlamaForCausalLM", (), {"forward": lambda self, input_ids=None: 1}))
    with pytest.raises(Refused, match=r"must be a number in \(0, 60000\] \(milliseconds per step\)"):
        token_delay.install_forward(context("token_delay", "install_forward", module))
    assert Path(token_delay.__file__).exists()
