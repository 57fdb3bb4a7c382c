"""The measurement method, device-agnostic where it can be (the CPU path is what tests exercise)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import Field

from rig.kernelbench.backends import Backend, Prepared
from rig.typed import Typed

DEFAULT_L2_BYTES = 50 * 2**20


@dataclass
class Variant:
    backend: Backend
    k_alloc: int
    role: str  # "production", "padded", "control"

    @property
    def label(self) -> str:
        return f"{self.backend.name} K={self.k_alloc}"


class BitwiseCheck(Typed):
    """Two outputs compared bit by bit (None: they cannot be compared; `note` says why)."""

    elements: int
    differing: int | None
    max_abs_diff: float | None
    note: str | None = None


class Row(Typed):
    label: str
    backend: str
    role: str
    m: int
    n: int
    k: int
    k_alloc: int
    copies: int
    us_per_call: float | None = None
    spread_us: tuple[float, float] | None = None
    gb_s: float | None = None
    ms_per_step: float | None = None
    unavailable: str | None = None
    vs_baseline_pct: float | None = None
    samples_us: list[float] = Field(default_factory=list)


def l2_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", DEFAULT_L2_BYTES))
    return DEFAULT_L2_BYTES


def copies_for_cold_l2(weight_bytes: int, l2: int, factor: float = 2.0, minimum: int = 2) -> int:
    """Enough distinct weight copies that one pass over them moves more than `factor` x L2."""
    return max(minimum, math.ceil(factor * l2 / max(1, weight_bytes)) + 1)


def interleaved(variants: list[Any], rounds: int, measure: Callable[[Any], float]) -> dict[int, list[float]]:
    """A B C A B C ...: slow drift (clocks, temperature) lands on every variant alike."""
    samples: dict[int, list[float]] = {i: [] for i in range(len(variants))}
    for _ in range(rounds):
        for index, variant in enumerate(variants):
            samples[index].append(measure(variant))
    return samples


def spread(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    low = ordered[int(0.1 * (len(ordered) - 1))]
    high = ordered[int(math.ceil(0.9 * (len(ordered) - 1)))]
    return low, high


def bitwise(a: torch.Tensor, b: torch.Tensor) -> BitwiseCheck:
    """Elements whose bits differ, and the largest absolute difference."""
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.shape != b.shape or a.dtype != b.dtype:
        return BitwiseCheck(elements=a.numel(), differing=None, max_abs_diff=None, note=f"{a.shape}/{a.dtype} vs {b.shape}/{b.dtype}")
    view = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}.get(a.dtype)
    differing = int((a.view(view) != b.view(view)).sum()) if view is not None else int((a != b).sum())
    return BitwiseCheck(elements=a.numel(), differing=differing, max_abs_diff=float((a.float() - b.float()).abs().max()))


class Timer:
    """CUDA: one graph per variant that runs every copy once; replay timed with events.
    CPU: the same loop, timed with perf_counter (no graphs)."""

    def __init__(self, device: torch.device, graphs: bool = True) -> None:
        self.device, self.graphs = device, graphs and device.type == "cuda"
        self.compiled: dict[int, Any] = {}

    def compile(self, key: int, prepared: Prepared, copies: int) -> None:
        if not self.graphs:
            self.compiled[key] = lambda: [prepared.run(i) for i in range(copies)]
            return
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for i in range(copies):  # warm up outside the graph (cuBLAS picks and caches its kernel)
                prepared.run(i)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(copies):
                prepared.run(i)
        torch.cuda.synchronize(self.device)
        self.compiled[key] = graph.replay

    def time_us(self, key: int, copies: int) -> float:
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.compiled[key]()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1000 / copies
        begin = time.perf_counter()
        self.compiled[key]()
        return (time.perf_counter() - begin) * 1e6 / copies


def run_shape(variants: list[Variant], m: int, n: int, k: int, device: torch.device, rounds: int = 20,
              calls_per_step: int = 1, graphs: bool = True, l2: int | None = None) -> tuple[list[Row], dict[str, BitwiseCheck]]:
    """Measure every variant of one (M, N, K); the first available variant is the baseline."""
    l2 = l2 or l2_bytes(device)
    rows: list[Row] = []
    runnable: list[tuple[Row, Prepared]] = []
    timer = Timer(device, graphs)
    outputs: dict[str, torch.Tensor] = {}
    for variant in variants:
        why = variant.backend.unavailable(device)
        probe_copies = 1
        row = Row(label=variant.label, backend=variant.backend.name, role=variant.role, m=m, n=n, k=k, k_alloc=variant.k_alloc,
                  copies=probe_copies, unavailable=why)
        rows.append(row)
        if why:
            continue
        probe = variant.backend.prepare(m, n, k, variant.k_alloc, 1, device)
        row.copies = copies_for_cold_l2(probe.weight_bytes, l2)
        try:
            prepared = variant.backend.prepare(m, n, k, variant.k_alloc, row.copies, device)
            outputs[variant.label] = prepared.run(0).clone()
            timer.compile(len(runnable), prepared, row.copies)
        except (RuntimeError, ValueError) as error:
            row.unavailable = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
            continue
        runnable.append((row, prepared))
    samples = interleaved(list(range(len(runnable))), rounds, lambda key: timer.time_us(key, runnable[key][0].copies))
    baseline = None
    for key, (row, prepared) in enumerate(runnable):
        values = samples[key]
        row.samples_us = values
        row.us_per_call = statistics.median(values)
        row.spread_us = spread(values)
        moved = prepared.weight_bytes + prepared.activation_bytes + prepared.output_bytes
        row.gb_s = moved / (row.us_per_call * 1e-6) / 1e9
        row.ms_per_step = row.us_per_call * calls_per_step / 1000
        baseline = baseline or row.us_per_call
        row.vs_baseline_pct = (row.us_per_call - baseline) / baseline * 100
    checks = lossless_checks(variants, outputs)
    return rows, checks


def lossless_checks(variants: list[Variant], outputs: dict[str, torch.Tensor]) -> dict[str, BitwiseCheck]:
    """Each padded output against the same backend unpadded (padding alone must change no bit),
    and the candidate against the production row (what the fix serves instead)."""
    checks: dict[str, BitwiseCheck] = {}
    production = next((v for v in variants if v.role == "production" and v.label in outputs), None)
    for variant in variants:
        if variant.label not in outputs:
            continue
        unpadded = next((v for v in variants if v.backend is variant.backend and v.k_alloc < variant.k_alloc
                         and v.label in outputs), None)
        if unpadded is not None:
            checks[f"{variant.label} vs {unpadded.label}"] = bitwise(outputs[variant.label], outputs[unpadded.label])
        if variant.role == "candidate" and production is not None:
            checks[f"{variant.label} vs {production.label} (production)"] = bitwise(outputs[variant.label], outputs[production.label])
    return checks

