"""GPU telemetry during a run, through NVML: did the clocks hold, what did the tokens cost.

A 1% tok/s difference means nothing if one arm ran at a lower SM clock, under a power cap or
hot. A daemon thread samples every local GPU a few times a second and appends one JSON line
per sample (time + per-GPU readings) as it is taken; `summarize_gpu` reduces a window of them
to clocks, power, energy (from the board's energy counter) and the clock-event reasons seen.
Without NVML or GPUs (a CPU box) that is noted once and nothing is sampled.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from rig.observe import jsonl
from rig.typed import Typed

# NVML's clock-event ("throttle") reason bits, nvml.h nvmlClocksEventReason* / nvmlClocksThrottleReason*.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
# Reasons that say nothing about the run's conditions: an idle GPU lowers its clocks by design.
BENIGN_REASONS = {"gpu_idle"}


def decode_clock_events(mask: int) -> list[str]:
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    return names + ([f"unknown_0x{unknown:x}"] if unknown else [])


def nvml() -> Any:
    """pynvml, initialised; raises pynvml.NVMLError (or ImportError) where there is no NVML."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def _read(call: Any, *args: Any) -> Any:
    """One NVML reading, or None where this GPU does not support it (energy on older boards, say)."""
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def read_gpu(pynvml: Any, index: int) -> dict[str, Any]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    power = _read(pynvml.nvmlDeviceGetPowerUsage, handle)
    limit = _read(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    utilization = _read(pynvml.nvmlDeviceGetUtilizationRates, handle)
    reasons = _read(pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle)
    if reasons is None:  # drivers before the "event" rename
        reasons = _read(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
    return {
        "index": index,
        "sm_mhz": _read(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
        "mem_mhz": _read(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM),
        "power_w": None if power is None else power / 1000,
        "power_limit_w": None if limit is None else limit / 1000,
        "temp_c": _read(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
        "util_gpu_pct": None if utilization is None else utilization.gpu,
        "util_mem_pct": None if utilization is None else utilization.memory,
        "energy_mj": _read(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle),
        "clock_event_mask": reasons,
        "clock_events": [] if reasons is None else decode_clock_events(reasons),
    }


class GpuSampler:
    """Samples all local GPUs every `interval_s` into `out_path` (JSONL) in a daemon thread.

    `note` holds why nothing was sampled (no NVML, no GPU); it is also written once to the file.
    """

    def __init__(self, out_path: Path | str, interval_s: float = 0.25, indices: list[int] | None = None) -> None:
        self.out_path = Path(out_path)
        self.interval_s = interval_s
        self.indices = indices
        self.note: str | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            pynvml = nvml()
            count = pynvml.nvmlDeviceGetCount()
        except Exception as error:  # ImportError or any NVMLError: no telemetry on this host, not a failure
            self._write_note(f"no GPU telemetry: {type(error).__name__}: {error}")
            return
        indices = self.indices if self.indices is not None else list(range(count))
        if not indices:
            self._write_note("no GPU telemetry: NVML sees no GPU")
            return
        self._thread = threading.Thread(target=self._loop, args=(pynvml, indices), name="gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 10)
            self._thread = None

    def _loop(self, pynvml: Any, indices: list[int]) -> None:
        with open(self.out_path, "a") as out:
            next_at = time.monotonic()
            while True:
                stopping = self._stop.is_set()
                jsonl.append(out, {"time": time.time(), "gpus": [read_gpu(pynvml, index) for index in indices]})
                self.samples += 1
                if stopping:
                    break
                next_at += self.interval_s
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        pynvml.nvmlShutdown()

    def _write_note(self, note: str) -> None:
        self.note = note
        with open(self.out_path, "a") as out:
            jsonl.append(out, {"time": time.time(), "note": note})



class Spread(Typed):
    mean: float
    min: float
    max: float


class GpuTelemetry(Typed):
    """One GPU over the window (None: NVML reported nothing for the field)."""

    samples: int
    sm_mhz: Spread | None
    mem_mhz: Spread | None
    power_w: Spread | None
    power_limit_w: float | None
    temp_c: Spread | None
    util_gpu_pct: Spread | None
    util_mem_pct: Spread | None
    energy_j: float | None
    energy_source: str | None  # "energy counter" or "power integral"
    clock_events: list[str]  # clock-event reasons seen, idle excluded
    serving: bool  # the server runs on it: its energy is billed to the tokens


class GpuSummary(Typed):
    """Per GPU and in total over the window (summarize_gpu_samples)."""

    samples: int
    window: tuple[float, float] | None
    notes: list[str]
    gpus: dict[str, GpuTelemetry]  # by NVML index (a JSON key)
    serving_gpus: list[int]
    power_w_mean_total: float | None
    energy_j: float | None
    output_tokens: float | None
    j_per_output_token: float | None
    clock_events: list[str]


def _stats(values: list[float]) -> Spread | None:
    if not values:
        return None
    return Spread(mean=sum(values) / len(values), min=min(values), max=max(values))


def _energy_j(samples: list[tuple[float, dict[str, Any]]]) -> tuple[float | None, str | None]:
    """Joules from the energy counter's increase; where the board has none, the power integral."""
    counters = [gpu["energy_mj"] for _, gpu in samples if gpu.get("energy_mj") is not None]
    if len(counters) >= 2:
        return (counters[-1] - counters[0]) / 1000, "energy counter"
    powered = [(when, gpu["power_w"]) for when, gpu in samples if gpu.get("power_w") is not None]
    if len(powered) >= 2:
        return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(powered, powered[1:])), "power integral"
    return None, None


GPU_NUMBERS = ("sm_mhz", "mem_mhz", "power_w", "power_limit_w", "temp_c", "util_gpu_pct", "util_mem_pct", "energy_mj",
               "clock_event_mask")


def gpu_sample_or_note(entry: dict[str, Any]) -> bool:
    """A note, or a sample as GpuSampler writes it: its time and per GPU an index, numbers or None
    (read_gpu's fields) and a list of clock-event names."""
    if "note" in entry:
        return isinstance(entry["note"], str)
    gpus = entry.get("gpus")
    return "time" in entry and isinstance(gpus, list) and all(
        isinstance(gpu, dict) and isinstance(gpu.get("index"), int) and not isinstance(gpu["index"], bool)
        and all(gpu.get(field) is None or jsonl.finite(gpu[field]) for field in GPU_NUMBERS)
        and isinstance(gpu.get("clock_events") or [], list) and all(isinstance(e, str) for e in gpu.get("clock_events") or [])
        for gpu in gpus)


def summarize_gpu_samples(path: Path | str, window: tuple[float, float] | None = None,
                          output_tokens: float | None = None, serving: list[int] | None = None) -> GpuSummary:
    """Per GPU and in total over the window: clocks, power, temperature, utilisation, energy, and
    the clock-event reasons seen (idle excluded); J per output token given the window's tokens.
    `serving`: the NVML indices the server runs on; totals count only those (an idle neighbour's
    ~77 W would otherwise be billed to the tokens), every GPU is still listed."""
    path = Path(path)
    entries = jsonl.read(path, gpu_sample_or_note) if path.exists() else []
    notes = [entry["note"] for entry in entries if "note" in entry]
    samples = [entry for entry in entries if "gpus" in entry]
    if window is not None:
        samples = [entry for entry in samples if window[0] <= entry["time"] <= window[1]]
    per_gpu: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    for entry in sorted(samples, key=lambda e: e["time"]):
        for gpu in entry["gpus"]:
            per_gpu.setdefault(gpu["index"], []).append((entry["time"], gpu))
    gpus: dict[str, GpuTelemetry] = {}
    for index, readings in sorted(per_gpu.items()):
        def values(field: str, readings: list[tuple[float, dict[str, Any]]] = readings) -> list[float]:
            return [gpu[field] for _, gpu in readings if gpu.get(field) is not None]

        energy, source = _energy_j(readings)
        events = sorted({name for _, gpu in readings for name in gpu.get("clock_events") or []} - BENIGN_REASONS)
        limits = values("power_limit_w")
        gpus[str(index)] = GpuTelemetry(
            samples=len(readings), sm_mhz=_stats(values("sm_mhz")), mem_mhz=_stats(values("mem_mhz")),
            power_w=_stats(values("power_w")), power_limit_w=limits[-1] if limits else None,
            temp_c=_stats(values("temp_c")), util_gpu_pct=_stats(values("util_gpu_pct")),
            util_mem_pct=_stats(values("util_mem_pct")), energy_j=energy, energy_source=source, clock_events=events,
            serving=serving is None or index in serving)
    counted = {key: gpu for key, gpu in gpus.items() if gpu.serving}
    energies = [gpu.energy_j for gpu in counted.values()]
    total_energy = sum(energies) if energies and None not in energies else None  # type: ignore[arg-type]
    powers = [gpu.power_w.mean for gpu in counted.values() if gpu.power_w]
    return GpuSummary(
        samples=len(samples), window=window, notes=notes, gpus=gpus,
        serving_gpus=sorted(int(key) for key in counted),
        power_w_mean_total=sum(powers) if powers else None,
        energy_j=total_energy,
        output_tokens=output_tokens,
        j_per_output_token=total_energy / output_tokens if total_energy is not None and output_tokens else None,
        clock_events=sorted({name for gpu in gpus.values() for name in gpu.clock_events}),
    )
