"""GEMM backends as plugins: each says whether this device can run it, and builds `copies`
independent weight copies whose first K columns are identical across K allocations, so a
padded variant computes exactly the same product as the unpadded one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


@dataclass
class Prepared:
    run: Callable[[int], torch.Tensor]  # copy index -> output [M, N]
    weight_bytes: int  # per copy, including scales
    activation_bytes: int
    output_bytes: int
    # the operands as the kernel sees them, dequantized to float64 (x [M, K_alloc], w [N, K_alloc]),
    # for checks against the exact product; None where the backend cannot expose them
    dequantized: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None


def _data(m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=generator), torch.randn(n, k, generator=generator) * 0.05


def _pad(t: torch.Tensor, k_alloc: int) -> torch.Tensor:
    out = torch.zeros(t.shape[0], k_alloc, dtype=t.dtype)
    out[:, : t.shape[1]] = t
    return out


class Backend:
    name = "?"
    description = ""

    def unavailable(self, device: torch.device) -> str | None:
        return None

    def prepare(self, m: int, n: int, k: int, k_alloc: int, copies: int, device: torch.device, seed: int = 0) -> Prepared:
        raise NotImplementedError


class TorchBf16(Backend):
    name = "torch-bf16"
    description = "torch.matmul in bfloat16"

    def prepare(self, m, n, k, k_alloc, copies, device, seed=0):
        x, w = _data(m, n, k, seed)
        x = _pad(x, k_alloc).to(device, torch.bfloat16)
        weights = [_pad(w, k_alloc).to(device, torch.bfloat16) for _ in range(copies)]
        return Prepared(lambda i: x @ weights[i].t(), n * k_alloc * 2, m * k_alloc * 2, m * n * 2,
                        lambda: (x.cpu().double(), weights[0].cpu().double()))


class TorchFp8(Backend):
    """torch._scaled_mm on e4m3 operands; scales come from the real K columns only, so padding
    changes no scale."""

    def __init__(self, rowwise: bool) -> None:
        self.rowwise = rowwise
        self.name = f"torch-fp8-{'rowwise' if rowwise else 'tensorwise'}"
        self.description = f"torch._scaled_mm, {'per-row' if rowwise else 'per-tensor'} fp32 scales"

    def unavailable(self, device):
        if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 9):
            return "FP8 GEMMs need SM89 or newer"
        return None

    def prepare(self, m, n, k, k_alloc, copies, device, seed=0):
        x, w = _data(m, n, k, seed)
        if self.rowwise:
            sx = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / FP8_MAX
            sw = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / FP8_MAX
        else:
            sx = (x.abs().amax().clamp(min=1e-12) / FP8_MAX).reshape(())
            sw = (w.abs().amax().clamp(min=1e-12) / FP8_MAX).reshape(())
        xq = _pad((x / sx).to(FP8).float(), k_alloc).to(FP8).to(device)
        wq = (_pad((w / sw).to(FP8).float(), k_alloc).to(FP8)).to(device)
        weights = [wq.clone() for _ in range(copies)]
        scale_a = sx.float().to(device)
        scale_b = (sw.float().t() if self.rowwise else sw.float()).to(device).contiguous()

        def run(i: int) -> torch.Tensor:
            return torch._scaled_mm(xq, weights[i].t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)

        def dequantized() -> tuple[torch.Tensor, torch.Tensor]:
            return xq.cpu().double() * sx.double(), wq.cpu().double() * sw.double()

        return Prepared(run, n * k_alloc + 4 * scale_b.numel(), m * k_alloc, m * n * 2, dequantized)


class FlashInferMxfp8(Backend):
    """FlashInfer mm_mxfp8 with a named backend (cutlass, b12x): Blackwell only."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.name = f"flashinfer-mxfp8-{backend}"
        self.description = f"flashinfer.mm_mxfp8(backend={backend!r})"

    def unavailable(self, device):
        if device.type != "cuda":
            return "needs a CUDA GPU"
        major, minor = torch.cuda.get_device_capability(device)
        if self.backend == "b12x" and major != 12:
            return f"b12x kernels run on SM120/SM121 only; this GPU is sm{major}{minor}"
        if major < 10:
            return f"MXFP8 block-scaled GEMMs need Blackwell (SM100+); this GPU is sm{major}{minor}"
        try:
            import flashinfer  # noqa: F401
        except ImportError:
            return "flashinfer is not installed"
        return None

    def prepare(self, m, n, k, k_alloc, copies, device, seed=0):
        from flashinfer import mm_mxfp8, mxfp8_quantize

        x, w = _data(m, n, k, seed)
        xq, xs = mxfp8_quantize(_pad(x, k_alloc).to(device, torch.bfloat16), True)
        wq, ws = mxfp8_quantize(_pad(w, k_alloc).to(device, torch.bfloat16), True)
        weights = [(wq.clone(), ws.clone()) for _ in range(copies)]

        def run(i: int) -> torch.Tensor:
            wi, si = weights[i]
            return mm_mxfp8(xq, wi.t(), xs, si, out_dtype=torch.bfloat16, backend=self.backend)

        return Prepared(run, n * k_alloc + ws.numel(), m * k_alloc, m * n * 2)


BACKENDS: dict[str, Backend] = {b.name: b for b in (TorchBf16(), TorchFp8(rowwise=False), TorchFp8(rowwise=True),
                                                     FlashInferMxfp8("cutlass"), FlashInferMxfp8("b12x"))}


def backend(name: str) -> Backend:
    from rig.errors import RigError

    if name not in BACKENDS:
        raise RigError("command line", "--backend", f"unknown backend {name!r}", f"use one of {', '.join(BACKENDS)}")
    return BACKENDS[name]
