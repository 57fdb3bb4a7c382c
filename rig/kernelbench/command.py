"""`rig kernelbench`: per shape M, a row per backend (us/call [p10-p90], GB/s, ms/step, vs the
production backend) and a bitwise losslessness check; kernelbench.json holds the same.

    rig kernelbench --n 5120 --k 576 --pad-k 640 --m 6 --production torch-fp8-rowwise \\
        --candidate flashinfer-mxfp8-b12x --calls-per-step 43
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from rig.kernelbench.backends import BACKENDS, backend
from rig.kernelbench.bench import BitwiseCheck, Row, Variant, run_shape
from rig.typed import Typed

ROLE_TEXT = {"production": "(production)", "candidate": "(candidate, padded)", "control": "(control: padding alone)",
             "unpadded": "", "padded": "(padded)"}


def build_variants(backends: list[str], production: str, candidate: str | None, k: int, pad_k: int) -> list[Variant]:
    variants = [Variant(backend(production), k, "production")]
    if candidate:
        variants.append(Variant(backend(candidate), pad_k, "candidate"))
    variants.append(Variant(backend(production), pad_k, "control"))
    for name in backends:
        if name in (production, candidate):
            continue
        variants += [Variant(backend(name), k, "unpadded"), Variant(backend(name), pad_k, "padded")]
    return variants


def format_row(row: Row) -> str:
    label = f"{row.label} {ROLE_TEXT[row.role]}".strip()
    if row.unavailable:
        return f"{label:58} unavailable: {row.unavailable}"
    low, high = row.spread_us or (0, 0)
    delta = f"{row.vs_baseline_pct:+6.1f}%" if row.role != "production" else "       "
    return (f"{label:58} {row.us_per_call:8.2f} us/call [{low:.2f}-{high:.2f}]  {row.gb_s:7.1f} GB/s  "
            f"{row.ms_per_step:7.3f} ms/step  {delta}")


class DeviceFacts(Typed):
    device: str
    capability: tuple[int, int] | None
    torch: str
    cuda: str | None
    time: float


class ShapeResult(Typed):
    m: int
    rows: list[Row]
    lossless: dict[str, BitwiseCheck]


class KernelbenchReport(Typed):
    """kernelbench.json."""

    n: int
    k: int
    pad_k: int
    calls_per_step: int
    rounds: int
    device: DeviceFacts
    shapes: list[ShapeResult]


def kernelbench(n: int, k: int, pad_k: int, ms: list[int], backends: list[str], production: str, candidate: str | None,
                calls_per_step: int, rounds: int, out: Path | None, device_name: str | None = None) -> KernelbenchReport:
    device = torch.device(device_name or ("cuda" if torch.cuda.is_available() else "cpu"))
    facts = DeviceFacts(device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                        capability=tuple(torch.cuda.get_device_capability(device)) if device.type == "cuda" else None,
                        torch=str(torch.__version__), cuda=torch.version.cuda, time=time.time())
    report = KernelbenchReport(n=n, k=k, pad_k=pad_k, calls_per_step=calls_per_step, rounds=rounds, device=facts, shapes=[])
    print(f"# kernelbench N={n} K={k} -> {pad_k} on {facts.device} (torch {facts.torch}), "
          f"{rounds} interleaved rounds, median [p10-p90], {calls_per_step} calls/step")
    for m in ms:
        rows, checks = run_shape(build_variants(backends, production, candidate, k, pad_k), m, n, k, device, rounds, calls_per_step)
        print(f"\nM={m}  (weight copies for a cold L2: {max(r.copies for r in rows)})")
        for row in rows:
            print("  " + format_row(row))
        for name, check in checks.items():
            print(f"  lossless {name}: {check.differing} of {check.elements} elements differ bitwise, "
                  f"max |diff| {check.max_abs_diff or 0:.3e}" if check.differing is not None else f"  lossless {name}: {check.model_dump()}")
        report.shapes.append(ShapeResult(m=m, rows=rows, lossless=checks))
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "kernelbench.json").write_text(report.model_dump_json(indent=1))
    return report


def default_backends() -> list[str]:
    return list(BACKENDS)
