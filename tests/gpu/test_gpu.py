"""GPU tests (marked gpu, skipped without CUDA): shared_pad_k's padding with real FP8 GEMMs and
inside a captured CUDA graph, per-stream buffers, and kernelbench's CUDA-graph path."""

from __future__ import annotations

import importlib.util
import types

import pytest
import torch
from conftest import REPO

from rig_adapters.adapters import mxfp8_b12x, shared_pad_k
from rig_adapters.registry import BY_NAME
from rig_adapters.runtime import AdapterContext

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
FP8 = torch.float8_e4m3fn


@pytest.fixture(autouse=True)
def _fresh():
    shared_pad_k.PADDED.clear()
    shared_pad_k._BUFFERS.clear()
    yield


def quantized(m: int, n: int, k: int, rowwise: bool, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.05
    if rowwise:
        sw = (w.abs().amax(dim=1, keepdim=True) / 448.0).float()
    else:
        sw = (w.abs().amax() / 448.0).float().reshape(())
    return x, (w / sw).to(FP8), sw


def fp8_linear(x: torch.Tensor, wq: torch.Tensor, sw: torch.Tensor) -> torch.Tensor:
    """A real FP8 GEMM: quantize the (padded) activation per row or per tensor, then _scaled_mm."""
    rowwise = sw.dim() == 2
    x2 = x.reshape(-1, x.shape[-1]).float()
    # Scales from the values, which are the same with or without a zero tail.
    sx = (x2.abs().amax(dim=1, keepdim=True) if rowwise else x2.abs().amax().reshape(())).clamp(min=1e-12) / 448.0
    xq = (x2 / sx).to(FP8)
    return torch._scaled_mm(xq, wq.t(), scale_a=sx.float(), scale_b=(sw.t() if rowwise else sw).contiguous(),
                            out_dtype=torch.bfloat16)


@pytest.mark.parametrize("rowwise", [True, False], ids=["rowwise", "tensorwise"])
@pytest.mark.parametrize("m", [1, 6, 64, 256])
def test_padding_is_bitwise_lossless_with_real_fp8_gemms(m, rowwise):
    x, wq, sw = quantized(m, 5120, 576, rowwise)
    reference = fp8_linear(x, wq, sw)
    layer = types.SimpleNamespace(prefix="model.layers.0.mlp.shared_experts.down_proj",
                                  weight=torch.nn.Parameter(wq.clone(), requires_grad=False),
                                  weight_scale_inv=torch.nn.Parameter(torch.ones(160, 18, device="cuda"), requires_grad=False))
    assert shared_pad_k.pad_layer(layer, layer.prefix) == (5120, 576, 640)
    padded_input = shared_pad_k.pad_input(x, layer.weight, 640)
    out = fp8_linear(padded_input, layer.weight.data, sw)
    differing = int((out.view(torch.int16) != reference.view(torch.int16)).sum())
    print(f"M={m} {'rowwise' if rowwise else 'tensorwise'}: {differing} of {out.numel()} elements differ, "
          f"max |diff| {(out.float() - reference.float()).abs().max().item():.3e}")
    assert differing == 0


def _wrapped_linear():
    path = REPO / "tests" / "standins" / "sglang" / "srt" / "layers" / "quantization" / "fp8_utils.py"
    spec = importlib.util.spec_from_file_location("gpu_fp8_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def real(input, weight, weight_scale, input_scale=None, bias=None, output_dtype=None, backend="cutlass", pin_tactic=False):
        return fp8_linear(input, weight, weight_scale)

    module.flashinfer_mxfp8_blockscaled_linear = real
    mxfp8_b12x.install_linear(AdapterContext(BY_NAME["mxfp8_b12x"], BY_NAME["mxfp8_b12x"].targets[0], module))
    (target,) = [t for t in BY_NAME["shared_pad_k"].targets if t.installer == "install_linear"]
    shared_pad_k.install_linear(AdapterContext(BY_NAME["shared_pad_k"], target, module))
    return module.flashinfer_mxfp8_blockscaled_linear


def test_padded_input_path_replays_inside_a_cuda_graph():
    linear = _wrapped_linear()
    x, wq, sw = quantized(6, 5120, 576, rowwise=True)
    weight = wq.clone()
    layer = types.SimpleNamespace(prefix="m.shared_experts.down_proj", weight=torch.nn.Parameter(weight, requires_grad=False),
                                  weight_scale_inv=torch.nn.Parameter(torch.ones(160, 18, device="cuda"), requires_grad=False))
    shared_pad_k.pad_layer(layer, layer.prefix)
    static_x = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        linear(static_x, layer.weight.data, sw)  # allocates the persistent buffer outside capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        static_out = linear(static_x, layer.weight.data, sw)
    buffers_before = {k: v.data_ptr() for k, v in shared_pad_k._BUFFERS.items()}
    for seed in range(3):
        fresh, _, _ = quantized(6, 5120, 576, rowwise=True, seed=100 + seed)
        static_x.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        eager = linear(fresh.clone(), layer.weight.data, sw)  # the same padded path, outside the graph
        torch.cuda.synchronize()
        assert torch.equal(static_out, eager), f"replay {seed} differs from the eager padded path"
    # the captured stream's buffer kept its address through every replay (the eager calls ran on
    # the default stream and got a buffer of their own)
    assert {k: shared_pad_k._BUFFERS[k].data_ptr() for k in buffers_before} == buffers_before


def test_one_buffer_per_stream():
    weight = torch.zeros(5120, 640, device="cuda", dtype=FP8)
    x = torch.randn(6, 576, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    main_buffer = shared_pad_k.pad_input(x, weight, 640)
    with torch.cuda.stream(side):
        side_buffer = shared_pad_k.pad_input(x, weight, 640)
    torch.cuda.synchronize()
    assert main_buffer.data_ptr() != side_buffer.data_ptr()
    assert len(shared_pad_k._BUFFERS) == 2


def test_kernelbench_graph_path_on_gpu():
    from rig.kernelbench.bench import run_shape
    from rig.kernelbench.command import build_variants

    rows, checks = run_shape(build_variants(["torch-bf16"], "torch-fp8-rowwise", "flashinfer-mxfp8-b12x", 576, 640),
                             6, 5120, 576, torch.device("cuda"), rounds=5, calls_per_step=43)
    production = rows[0]
    assert production.us_per_call > 0 and production.copies * 5120 * 576 > 2 * torch.cuda.get_device_properties(0).L2_cache_size
    assert rows[1].unavailable and "SM120" in rows[1].unavailable
