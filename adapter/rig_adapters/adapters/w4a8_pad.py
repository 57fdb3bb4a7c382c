"""w4a8_pad: zero-pad B12X MoE expert shards that the selected mode cannot take.

GLM-5.2 at TP6 has a 352-wide per-rank expert shard (2048/6, rounded by virtual TP). Older
b12x plans only some alignments per mode (MODE_ALIGNMENT); this pads to the smallest one the
selected mode accepts, never a blanket 128: every padded column is expert work spent on zeros.
Padded gate/up rows give silu(0) * 0 = 0 and the padded down columns multiply only those zeros:
outputs stay bit-exact.
When the installed b12x plans such shards natively, the adapter refuses as redundant.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from rig_adapters.runtime import AdapterContext, Redundant

# Smallest per-rank intermediate alignment each b12x MoE mode accepted before native tails.
# w4a8_mx: the QMMA repack tiles N in 128 columns; w4a16: smallest tile_k of its tile tables.
MODE_ALIGNMENT: dict[str, int] = {"w4a8_mx": 128, "w4a16": 64}
FP4_PER_BYTE = 2
SCALE_BLOCK = 32
E8M0_ONE = 127


def native_tail_support() -> str | None:
    """A b12x that has the registry's probe attribute plans non-aligned shards itself."""
    from rig_adapters.registry import BY_NAME

    _, module_name, attribute = BY_NAME["w4a8_pad"].redundant_if  # type: ignore[misc]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    if hasattr(module, attribute):
        version = getattr(importlib.import_module("b12x"), "__version__", "?")
        return f"b12x {version} plans non-aligned shards natively ({module_name}.{attribute})"
    return None


def padded_size(intermediate: int, alignment: int) -> int:
    return -(-intermediate // alignment) * alignment


def pad_rows_per_half(tensor: Any, rows: int, target: int, fill: int) -> Any:
    """[E, 2*rows, C] (gate then up) -> [E, 2*target, C], each half padded with `fill`."""
    import torch

    experts, double, cols = tensor.shape
    if double != 2 * rows:
        raise RuntimeError(f"w4a8_pad: gate/up tensor has {double} rows, expected 2 x {rows}")
    out = torch.full((experts, 2 * target, cols), fill, dtype=tensor.dtype, device=tensor.device)
    out[:, :rows] = tensor[:, :rows]
    out[:, target : target + rows] = tensor[:, rows:]
    return out


def pad_cols(tensor: Any, cols: int, target: int, fill: int) -> Any:
    import torch

    experts, rows, have = tensor.shape
    if have != cols:
        raise RuntimeError(f"w4a8_pad: down tensor has {have} columns, expected {cols}")
    out = torch.full((experts, rows, target), fill, dtype=tensor.dtype, device=tensor.device)
    out[:, :, :cols] = tensor
    return out


def pad_experts(w1: Any, w2: Any, w1_scale: Any, w2_scale: Any, alignment: int) -> tuple[Any, Any, Any, Any, int, int]:
    """Pad packed-FP4 expert weights and their e8m0 scales; returns the four tensors and (I, padded I)."""
    intermediate = int(w2.shape[2]) * FP4_PER_BYTE
    if intermediate % SCALE_BLOCK != 0:
        raise RuntimeError(f"w4a8_pad: intermediate {intermediate} is not a multiple of {SCALE_BLOCK}")
    target = padded_size(intermediate, alignment)
    hidden = int(w2.shape[1])
    expected = {
        "w1": (w1, (w1.shape[0], 2 * intermediate, hidden // FP4_PER_BYTE)),
        "w1_scale": (w1_scale, (w1.shape[0], 2 * intermediate, hidden // SCALE_BLOCK)),
        "w2_scale": (w2_scale, (w2.shape[0], hidden, intermediate // SCALE_BLOCK)),
    }
    for name, (tensor, shape) in expected.items():
        if tuple(tensor.shape) != tuple(int(d) for d in shape):
            raise RuntimeError(f"w4a8_pad: {name} has shape {tuple(tensor.shape)}, expected {tuple(shape)}")
    return (
        pad_rows_per_half(w1, intermediate, target, 0),
        pad_cols(w2, intermediate // FP4_PER_BYTE, target // FP4_PER_BYTE, 0),
        pad_rows_per_half(w1_scale, intermediate, target, E8M0_ONE),
        pad_cols(w2_scale, intermediate // SCALE_BLOCK, target // SCALE_BLOCK, E8M0_ONE),
        intermediate,
        target,
    )


def install_prepare(ctx: AdapterContext) -> None:
    native = native_tail_support()
    if native:
        raise Redundant(f"{native}; padding would only add expert GEMM work")
    original = ctx.current

    @functools.wraps(original)
    def prepare(self: Any, *, w1: Any, w2: Any, activation: Any, params_dtype: Any) -> Any:
        mode = getattr(self, "_quant_mode", None)
        alignment = MODE_ALIGNMENT.get(str(mode))
        intermediate = int(w2.shape[2]) * FP4_PER_BYTE
        if alignment is None or intermediate % alignment == 0:
            return original(self, w1=w1, w2=w2, activation=activation, params_dtype=params_dtype)
        layout = str(getattr(self, "_w13_layout", ""))
        if "interleav" in layout:
            raise RuntimeError(f"w4a8_pad: w13 layout {layout!r} interleaves gate/up rows; per-half padding would be wrong")
        config = self.quant_config
        w1, w2, w1_scale, w2_scale, before, after = pad_experts(w1, w2, config._w1.scale, config._w2.scale, alignment)
        config._w1.scale, config._w2.scale = w1_scale, w2_scale
        ctx.layer_patched(
            f"B12xExperts[{mode}]",
            f"intermediate {before} -> {after} (alignment {alignment}, +{100 * (after - before) / before:.1f}% expert work)",
        )
        ctx.first_use(f"{mode} shard {before} padded to {after}")
        return original(self, w1=w1, w2=w2, activation=activation, params_dtype=params_dtype)

    ctx.replace(prepare, f"pads expert shards to the mode's alignment {MODE_ALIGNMENT}")
