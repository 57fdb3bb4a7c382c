"""mxfp8_b12x: route SGLang's MXFP8 dense linears to FlashInfer's `b12x` mm_mxfp8 backend.

b12x runs on SM120/SM121 only and takes K in whole BK128 tiles (plus FlashInfer's common
n >= 128, k >= 128). A shape it cannot take keeps the backend SGLang chose, is recorded once
in the manifest and logged once as `MXFP8 backend 'b12x' rejected N=.. K=.. (reason)`.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from rig_adapters.registry import BY_NAME
from rig_adapters.runtime import AdapterContext

BACKEND = "b12x"
K_TILE = 128
MIN_DIM = 128
# Shapes this process sent back to the stock backend; shared_pad_k reads it for its log line.
REJECTED: set[tuple[int, int]] = set()


def _cuda_capability(device: Any) -> tuple[int, int] | None:
    import torch

    if getattr(device, "type", None) != "cuda":
        return None
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


# Replaceable in tests that run on the CPU.
device_capability: Callable[[Any], tuple[int, int] | None] = _cuda_capability

# What SGLang's wrapper and FlashInfer's checks raise for a shape or layout b12x cannot take.
BUILTIN_REFUSALS: tuple[type[Exception], ...] = (RuntimeError, ValueError, NotImplementedError)


@functools.cache
def refusal_errors() -> tuple[type[Exception], ...]:
    """BUILTIN_REFUSALS plus FlashInfer's own classes for "cannot run here": its
    `backend_requirement` raises flashinfer.utils.BackendSupportedError for an unsupported
    backend or compute capability, and LibraryError when an optional kernel library is missing;
    neither derives from the builtins. The class names are the registry's (the drift check
    verifies they exist in the FlashInfer version SGLang pins); they are imported on first use,
    inside the engine, where FlashInfer is already loaded. Without FlashInfer: the builtins."""
    found: list[type[Exception]] = []
    for kernel in BY_NAME["mxfp8_b12x"].kernels:
        for dotted in kernel.raises:
            module, _, name = dotted.rpartition(".")
            try:
                error = getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError):
                continue
            if isinstance(error, type) and issubclass(error, Exception):
                found.append(error)
    return BUILTIN_REFUSALS + tuple(found)


def reject_reason(n: int, k: int, device: Any) -> str | None:
    capability = device_capability(device)
    if capability is None or capability[0] != 12:
        where = "a non-CUDA tensor" if capability is None else f"sm{capability[0]}{capability[1]}"
        return f"b12x kernels run on SM120/SM121 only, this is {where}"
    if k % K_TILE != 0:
        return (
            f"b12x mm_mxfp8 requires the contraction dim K to be a multiple of {K_TILE} "
            f"(one full BK128 tile). Got K={k}."
        )
    if n < MIN_DIM or k < MIN_DIM:
        return f"mm_mxfp8 needs n >= {MIN_DIM} and k >= {MIN_DIM}, got n={n} k={k}"
    return None


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
        n, k = int(weight.shape[0]), int(weight.shape[1])
        if (n, k) not in REJECTED:
            reason = reject_reason(n, k, weight.device)
            if reason is None:
                try:
                    out = inner(input, weight, weight_scale, input_scale, bias, output_dtype,
                                backend=BACKEND, pin_tactic=pin_tactic)
                except refusal_errors() as error:
                    reason = f"b12x raised {type(error).__name__}: {error}"
                else:
                    ctx.first_use(f"N={n} K={k} served by b12x")
                    return out
            REJECTED.add((n, k))
            ctx.reject_shape((n, k), f"MXFP8 backend 'b12x' rejected N={n} K={k} ({reason})")
        return inner(input, weight, weight_scale, input_scale, bias, output_dtype,
                     backend=backend, pin_tactic=pin_tactic)

    ctx.replace(linear, "MXFP8 dense linears try b12x first")
