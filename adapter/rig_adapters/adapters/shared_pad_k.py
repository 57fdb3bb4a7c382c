"""shared_pad_k: zero-pad the shared expert's down_proj K to the next multiple of 128.

At TP4 DeepSeek-V4.1's shared down_proj is N=5120, K=2304/4=576 (288 at TP8): b12x rejects
it (K % 128), so it falls back to a CUTLASS tile that wastes most of the GPU at decode
(58 -> 17 us/call once padded to 640, on the DeepSeek-V4.1-Flash DGX Spark deployment). K comes
from the layer; a layer whose K is already a multiple of 128 is left alone.

1. Before SGLang prepares MXFP8 (`Fp8LinearMethod._prepare_block_fp8_as_mxfp8`), the FP8
   weight is zero-padded and its 32x32 ue8m0 scales padded with ones, so SGLang's own
   e8m0 conversion and swizzle run on the padded shape. A zero e4m3 weight times any scale
   is zero, so outputs are unchanged.
2. At call time the input is padded through a persistent buffer, zeroed once, one per weight
   and CUDA stream (the shared expert runs on an alternate stream), so CUDA graphs see a
   stable address. DSV41_SHARED_PAD_BUF_ROWS sets its rows (default 256); a larger batch
   (eager prefill) gets a fresh zeroed tensor, logged once.

The layer is found by the name the model gives it. Stock SGLang's LinearBase and
RowParallelLinear (the shared down_proj's class, models/deepseek_v2.py) receive that name as
`prefix` and never store it (0.5.23 layers/linear.py:248-287, 1553-1700), so a wrapper of
`LinearBase.__init__` records it on every linear layer as it is built, and the MXFP8 preparation
reads it from there. A layer that reaches the preparation without one was built some other way:
that raises rather than leaving the layer unpadded unnoticed.

Every shape, dtype or scale-layout surprise raises: silent degradation under 32x32 scales
is what produced garbage in the peer's wo_a path.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any

from rig_adapters.gates import env_int
from rig_adapters.runtime import AdapterContext

logger = logging.getLogger("rig_adapters")

LAYER_MARK = "shared_experts.down_proj"
NAME_ATTRIBUTE = "_rig_layer_name"  # the name (prefix) a linear layer was built with
K_MULTIPLE = 128
BLOCK = 32
BUF_ROWS_ENV = "DSV41_SHARED_PAD_BUF_ROWS"
DEFAULT_BUF_ROWS = 256

# (N, source K) -> padded K, for every layer this process padded.
PADDED: dict[tuple[int, int], int] = {}
# (weight storage pointer, dtype, device, stream) -> persistent zeroed input buffer.
_BUFFERS: dict[tuple[Any, ...], Any] = {}
_WARNED_LARGE: list[bool] = [False]


def padded_k(k: int) -> int:
    return -(-k // K_MULTIPLE) * K_MULTIPLE


def _check_scales(prefix: str, weight: Any, scales: Any) -> None:
    import torch

    n, k = (int(d) for d in weight.shape)
    want = (-(-n // BLOCK), k // BLOCK)
    if tuple(scales.shape) != want:
        raise RuntimeError(
            f"{prefix}: weight {(n, k)} needs {BLOCK}x{BLOCK} block scales of shape {want}, found "
            f"{tuple(scales.shape)}: the block layout is not {BLOCK}x{BLOCK}, refusing to pad"
        )
    if scales.dtype is not torch.float32:
        raise RuntimeError(f"{prefix}: weight_scale_inv is {scales.dtype}, expected torch.float32 block scales")
    values = scales.detach().float().contiguous()
    bits = values.view(torch.int32)
    if not bool((((bits & 0x7FFFFF) == 0) & (values > 0)).all()):
        raise RuntimeError(f"{prefix}: weight_scale_inv holds values that are not positive powers of two (not ue8m0)")


def pad_layer(layer: Any, prefix: str) -> tuple[int, int, int] | None:
    """Pad one shared down_proj in place; returns (N, K, padded K) or None if none is needed."""
    import torch

    weight = getattr(layer, "weight", None)
    if weight is None or weight.ndim != 2:
        raise RuntimeError(f"{prefix}: expected a 2-D weight, found {None if weight is None else tuple(weight.shape)}")
    if weight.dtype is not torch.float8_e4m3fn:
        raise RuntimeError(f"{prefix}: weight dtype is {weight.dtype}, expected torch.float8_e4m3fn")
    n, k = (int(d) for d in weight.shape)
    if k % K_MULTIPLE == 0:
        return None
    if k % BLOCK != 0:
        raise RuntimeError(f"{prefix}: K={k} is not a multiple of {BLOCK}, so it is not an MXFP8 operand")
    scales = getattr(layer, "weight_scale_inv", None)
    if scales is None:
        raise RuntimeError(f"{prefix}: no weight_scale_inv, this is not the block-FP8 path shared_pad_k expects")
    _check_scales(prefix, weight, scales)
    target = padded_k(k)
    new_weight = torch.zeros((n, target), dtype=weight.dtype, device=weight.device)
    new_weight[:, :k] = weight.data
    new_scales = torch.ones((scales.shape[0], target // BLOCK), dtype=scales.dtype, device=scales.device)
    new_scales[:, : k // BLOCK] = scales.data
    keep_format = getattr(scales, "format_ue8m0", None)
    weight.data = new_weight
    scales.data = new_scales
    if keep_format is not None:
        scales.format_ue8m0 = keep_format
    layer._rig_shared_pad_k = (k, target)
    PADDED[(n, k)] = target
    return n, k, target


def pad_input(x: Any, weight: Any, target: int) -> Any:
    """[.., K] -> [.., target] with a zero tail, through a persistent per-(weight, stream) buffer."""
    import torch

    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise RuntimeError(f"shared_pad_k: input dtype {x.dtype} is not a floating activation")
    k = int(x.shape[-1])
    rows_in = x.reshape(-1, k)
    rows = int(rows_in.shape[0])
    capacity = env_int(BUF_ROWS_ENV, DEFAULT_BUF_ROWS)
    if rows > capacity:
        if not _WARNED_LARGE[0]:
            _WARNED_LARGE[0] = True
            logger.warning(
                "shared_pad_k: %d rows exceed the %d-row buffer, allocating on the fly (expected for eager "
                "prefill; raise %s if this appears for a decode batch)", rows, capacity, BUF_ROWS_ENV,
            )
        out = torch.zeros((rows, target), dtype=x.dtype, device=x.device)
        out[:, :k] = rows_in
        return out.view(*x.shape[:-1], target)
    stream = torch.cuda.current_stream(x.device).cuda_stream if x.device.type == "cuda" else 0
    key = (weight.untyped_storage().data_ptr(), x.dtype, str(x.device), stream)
    buffer = _BUFFERS.get(key)
    if buffer is None or buffer.shape[0] < capacity or buffer.shape[1] != target:
        buffer = torch.zeros((capacity, target), dtype=x.dtype, device=x.device)
        _BUFFERS[key] = buffer
    buffer[:rows, :k].copy_(rows_in)  # the tail columns are never written and stay zero
    return buffer[:rows].view(*x.shape[:-1], target)


def layer_name(layer: Any) -> str:
    """The name a linear layer was built with: recorded by `install_names`, else the `prefix` the
    few stock classes that keep one store (MergedColumnParallelLinear); raises for neither."""
    name = getattr(layer, NAME_ATTRIBUTE, None)
    if name is None:
        name = getattr(layer, "prefix", None)
    if not isinstance(name, str):
        raise RuntimeError(
            f"shared_pad_k: a {type(layer).__name__} reached MXFP8 preparation without the name it was built "
            "with (LinearBase.__init__ did not run through rig's wrapper): cannot tell whether it is the shared "
            "down_proj, refusing to guess"
        )
    return name


def install_names(ctx: AdapterContext) -> None:
    original = ctx.current
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        prefix = signature.bind(self, *args, **kwargs).arguments.get("prefix", "")
        object.__setattr__(self, NAME_ATTRIBUTE, prefix)  # as given: layer_name refuses one that is not a str

    ctx.replace(init, "records each linear layer's name (its prefix), which stock LinearBase does not keep")


def install_prepare(ctx: AdapterContext) -> None:
    original = ctx.current

    @functools.wraps(original)
    def prepare(self: Any, layer: Any) -> Any:
        prefix = layer_name(layer)
        if LAYER_MARK in prefix and not getattr(layer, "_rig_shared_pad_k", None):
            padded = pad_layer(layer, prefix)
            if padded is not None:
                n, k, target = padded
                ctx.layer_patched(prefix, f"weight {(n, k)} -> {(n, target)}, scales padded with ones", shape=(n, target))
        return original(self, layer)

    ctx.replace(prepare, "pads shared down_proj weights and scales before SGLang's MXFP8 swizzle")


def install_linear(ctx: AdapterContext) -> None:
    inner = ctx.current

    @functools.wraps(inner)
    def linear(
        input: Any,
        weight: Any,
        weight_scale: Any,
        input_scale: Any = None,
        bias: Any = None,
        output_dtype: Any = None,
        backend: str = "cutlass",
        pin_tactic: bool = False,
    ) -> Any:
        n, k_weight, k_input = int(weight.shape[0]), int(weight.shape[1]), int(input.shape[-1])
        if k_input != k_weight and PADDED.get((n, k_input)) == k_weight:
            if input_scale is not None:
                raise RuntimeError(
                    f"shared_pad_k: N={n} K={k_input} arrived pre-quantized (input_scale set); the pad must happen "
                    "before quantization, refusing to compute a wrong result"
                )
            out = inner(pad_input(input, weight, k_weight), weight, weight_scale, input_scale, bias,
                        output_dtype, backend=backend, pin_tactic=pin_tactic)
            from rig_adapters.adapters import mxfp8_b12x

            ctx.first_use(
                f"N={n} K={k_input}->{k_weight}; b12x accepted the padded shape: "
                f"{(n, k_weight) not in mxfp8_b12x.REJECTED}; {len(PADDED)} shape(s) padded"
            )
            return out
        return inner(input, weight, weight_scale, input_scale, bias, output_dtype,
                     backend=backend, pin_tactic=pin_tactic)

    ctx.replace(linear, "pads inputs of padded shared down_proj layers")
