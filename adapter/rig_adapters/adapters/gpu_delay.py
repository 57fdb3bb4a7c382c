"""gpu_delay (test-only): a fixed amount of GPU time in every engine step (vLLM, SGLang), on the critical path.

token_delay sleeps on the host, and vLLM's asynchronous scheduling hides a host delay while the
GPU is the bottleneck (0.165 ms per step changed nothing on an H200). This adapter instead
launches a spin kernel (`torch.cuda._sleep`, which counts SM clock cycles) on the step's own CUDA
stream, just before the worker runs the step (vLLM's Worker.execute_model; SGLang's
TpModelWorker.forward_batch_generation, which its overlap scheduler calls inside the forward stream): every kernel of the step, CUDA-graph replays
included, is stream-ordered after it, so the step's GPU time grows whatever runs on the host. It
is launched outside the compiled and captured region, so torch.compile and the graphs are the
engine's own.

What it adds is measured on the GPU, in place, not assumed. A spin costs more than its own cycles:
on an H200 under vLLM 0.24 a 44 us spin (events around it) lengthened the step by 51.8 us, the rest
being the launch and the wait of the step's next operation on it. So the first MEASURE_STEPS steps
(inside the discarded warmup) alternate blocks with and without the spin, an event marks the start
of every one of those steps, and the difference of the median step period (GPU time from one
step's start to the next's) with and without the spin is what the adapter adds: `added_us` in the
manifest, with `measured_until` (wall time) so a comparison can check that no measured round saw
the alternation. From then on every step spins; one step in SAMPLE_EVERY also times its spin alone
(`spin_us`). RIG_GPU_DELAY_US is both the gate and the spin length in microseconds; the spin's
cycles per microsecond come from two timed spins at the first step (one synchronisation).
"""

from __future__ import annotations

import collections
import functools
import os
import statistics
import time
from typing import Any

from rig_adapters.gates import env_float
from rig_adapters.registry import BY_NAME
from rig_adapters.runtime import AdapterContext, Refused

GATE = "RIG_GPU_DELAY_US"
CALIBRATION_CYCLES = (100_000, 300_000)  # two spin lengths: their slope is cycles per us, free of launch cost
CALIBRATION_REPEATS = 5
MEASURE_STEPS = 1024  # steps of alternating blocks at the start (about 4.5 s at 4.4 ms a step)
BLOCK_STEPS = 32  # steps per block of the alternation
SAMPLE_EVERY = 64  # after the measurement, one step in this many times its spin (its launch included)
MAX_PENDING = 4096  # sampled spins not yet read back; beyond this the oldest are dropped unmeasured


def _delay_us() -> float:
    problem = BY_NAME["gpu_delay"].gate_problem(os.environ.get(GATE, ""))
    if problem:
        raise Refused(f"{problem} (microseconds of spin per step)")
    return env_float(GATE, 0.0)


def _torch_cuda() -> Any:
    """torch with a CUDA device and its spin kernel, or a refusal saying which is missing."""
    try:
        import torch
    except ImportError:
        raise Refused("torch is not importable in this process") from None
    if not hasattr(torch.cuda, "_sleep"):
        raise Refused(f"torch {torch.__version__} has no torch.cuda._sleep (the spin kernel this adapter launches)")
    # NVML's count, not torch.cuda.is_available(): that initialises the CUDA driver, and a process
    # that forks workers afterwards (vLLM's multiprocessing executor) could not use CUDA in them.
    count = torch.cuda._device_count_nvml() if hasattr(torch.cuda, "_device_count_nvml") else 1
    if count <= 0:
        raise Refused("no CUDA device: gpu_delay adds GPU time to each step and needs a GPU (token_delay delays CPU engines)")
    return torch


def added_per_step(marks: list[tuple[bool, float]]) -> tuple[float, int, int] | None:
    """(median step period with the spin - without it, steps with, steps without) from the GPU time
    (ms) at the start of consecutive steps, each flagged whether that step spun. A period counts
    only between two steps of the same kind (the block transitions and the last mark are left out);
    medians, so a prefill step or an idle gap between requests moves nothing."""
    periods: dict[bool, list[float]] = {True: [], False: []}
    for (spun, start), (next_spun, next_start) in zip(marks, marks[1:]):
        if spun == next_spun:
            periods[spun].append(next_start - start)
    if not periods[True] or not periods[False]:
        return None
    return (1000.0 * (statistics.median(periods[True]) - statistics.median(periods[False])),
            len(periods[True]), len(periods[False]))


class SpinInjector:
    """Launches the spin on the current stream; measures what it adds (see the module docstring)."""

    def __init__(self, ctx: AdapterContext, torch: Any, delay_us: float) -> None:
        self.ctx, self.torch, self.delay_us = ctx, torch, delay_us
        self.cycles: int | None = None  # set by the first step's calibration
        self.steps = 0
        self.origin: Any = None  # the first mark: every mark's time is read against it
        self.marks: collections.deque[tuple[bool, Any]] = collections.deque()
        self.marked: list[tuple[bool, float]] = []  # (spun, ms since the origin), read back
        self.measured = False
        self.spins: collections.deque[tuple[Any, Any]] = collections.deque()

    def _event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True)

    def _timed_spin(self, cycles: int) -> float:
        start, end = self._event(), self._event()
        stream = self.torch.cuda.current_stream()
        start.record(stream)
        self.torch.cuda._sleep(cycles)
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) * 1000.0

    def calibrate(self) -> float:
        """Cycles per microsecond of the spin now, from the slope between two spin lengths (so the
        launch cost inside the events cancels); synchronises, at the first step only. A slope that is
        not positive (the spins' times did not grow with their cycles) is retried with more repeats,
        then raised: the engine's step fails loudly rather than running without the known effect."""
        short, long = CALIBRATION_CYCLES
        for repeats in (CALIBRATION_REPEATS, 4 * CALIBRATION_REPEATS):
            times = {n: statistics.median(self._timed_spin(n) for _ in range(repeats)) for n in CALIBRATION_CYCLES}
            if times[long] > times[short]:
                break
        else:
            raise RuntimeError(f"gpu_delay: spins of {short} and {long} cycles took {times[short]:.2f} and {times[long]:.2f} us: "
                               "the spin's clock cannot be calibrated on this GPU; not running without the known effect")
        rate = (long - short) / (times[long] - times[short])
        self.cycles = max(1, round(self.delay_us * rate))
        self.ctx.record_stat("calibrated_cycles_per_us", rate)
        return rate

    def inject(self) -> None:
        if self.cycles is None:
            rate = self.calibrate()
            # Until measured_until appears, every step may be inside the alternation (a comparison
            # leaves out any round that began before it, or every round when it never appears).
            self.ctx.record_stat("measuring_from", time.time())
            self.ctx.first_use(f"engine step given a {self.delay_us:g} us spin ({self.cycles} cycles at {rate:.0f} "
                               f"cycles/us); the first {MEASURE_STEPS} steps measure what it adds to the step")
        stream = self.torch.cuda.current_stream()
        measuring = self.steps < MEASURE_STEPS
        if measuring:
            spin = (self.steps // BLOCK_STEPS) % 2 == 0
            mark = self._event()
            mark.record(stream)
            if self.origin is None:
                self.origin = mark
            self.marks.append((spin, mark))
            if spin:
                self.torch.cuda._sleep(self.cycles)
        elif self.steps % SAMPLE_EVERY == 0:
            start, end = self._event(), self._event()
            start.record(stream)
            self.torch.cuda._sleep(self.cycles)
            end.record(stream)
            self.spins.append((start, end))
        else:
            self.torch.cuda._sleep(self.cycles)
        self.steps += 1
        self._read_back()

    def _read_back(self) -> None:
        """What the GPU has finished, without a sync: marks of the measurement, then sampled spins."""
        while self.marks and self.marks[0][1].query():
            spun, mark = self.marks.popleft()
            self.marked.append((spun, self.origin.elapsed_time(mark)))
        if not self.measured and len(self.marked) >= MEASURE_STEPS:
            self.measured = True
            measured = added_per_step(self.marked)
            if measured is not None:
                added, with_spin, without = measured
                self.ctx.record_stat("added_us", added)
                self.ctx.record_stat("measured_steps_with_spin", with_spin)
                self.ctx.record_stat("measured_steps_without", without)
            self.ctx.record_stat("measured_until", time.time())
            if measured:
                self.ctx.note(f"each step is {measured[0]:.2f} us longer with the spin (GPU step periods, medians of "
                              f"{measured[1]} steps with and {measured[2]} without)")
            else:
                self.ctx.note("the alternation gave no step periods to compare")
            self.marked.clear()
        while self.spins and self.spins[0][1].query():
            start, end = self.spins.popleft()
            self.ctx.record_stat("spin_us", start.elapsed_time(end) * 1000.0)
        while len(self.spins) > MAX_PENDING:
            self.spins.popleft()


def install_execute_model(ctx: AdapterContext) -> None:
    """vLLM: Worker.execute_model runs once per engine step in every worker process (V1 and V2 model
    runners). A step that schedules no tokens runs no forward pass and gets no spin."""
    delay_us = _delay_us()
    injector = SpinInjector(ctx, _torch_cuda(), delay_us)
    original = ctx.current

    @functools.wraps(original)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(scheduler_output, "total_num_scheduled_tokens", 1) > 0:
            injector.inject()
        return original(self, scheduler_output, *args, **kwargs)

    ctx.replace(execute_model, f"{delay_us:g} us spin kernel per engine step on the step's stream")


def install_forward_batch_generation(ctx: AdapterContext) -> None:
    """SGLang: TpModelWorker.forward_batch_generation runs once per forward batch in every TP
    scheduler process. The overlap scheduler calls it inside its forward stream's context and the
    plain one on the default stream: either way the current stream is the one the batch's kernels
    (and CUDA-graph replays) run on. An idle batch (data-parallel attention's filler) runs no model
    and gets no spin."""
    delay_us = _delay_us()
    injector = SpinInjector(ctx, _torch_cuda(), delay_us)
    original = ctx.current

    @functools.wraps(original)
    def forward_batch_generation(self: Any, batch: Any = None, *args: Any, **kwargs: Any) -> Any:
        forward = batch if batch is not None else kwargs.get("forward_batch", args[0] if args else None)
        mode = getattr(forward, "forward_mode", None)
        if mode is None or not mode.is_idle():
            injector.inject()
        return original(self, batch, *args, **kwargs)

    ctx.replace(forward_batch_generation, f"{delay_us:g} us spin kernel per forward batch on the batch's stream")
