"""What a Locust process measures about itself: its event loop's lag, its CPU, and the collections
it ran. rig reads these to say how far the client could have moved a figure (rig.load.client_error).
"""

from __future__ import annotations

import gc
import os
import random
import time
from dataclasses import dataclass, field

from rig.load.kernel_timer import KernelTimer, TimerUnavailable
from rig.load.wire import LAG_PERIOD_S, LAG_PROBE_KERNEL, LAG_PROBE_SLEEP, ClientStats, LagProbe

# With the collector off, the reference cycles requests/urllib3 leave per request (measured: ~45
# objects, ~10 kB) are never freed. Past this many objects since the last collection the client
# collects once, and that pause is in the lag samples like any other: a run it disturbed says so.
GC_BUDGET = 1_000_000


@dataclass
class Samples:
    """One process's raw samples, as ClientStats carries them (rig computes percentiles over the
    measurement window, spawning bursts excluded)."""

    lag: list[tuple[float, float]] = field(default_factory=list)  # (wall time, lag seconds)
    cpu: list[float] = field(default_factory=list)  # CPU percent, once a second
    cpu_time: list[tuple[float, float]] = field(default_factory=list)  # (wall time, user + system CPU seconds)
    gc_pauses: list[tuple[float, float]] = field(default_factory=list)  # (wall time, seconds the collection took)
    lag_probe: LagProbe = LAG_PROBE_KERNEL  # which event the monitor times

    def stats(self, process: str) -> ClientStats:
        cpu = self.cpu
        return ClientStats(process=process, lag=[(round(t, 4), round(value, 6)) for t, value in self.lag], lag_probe=self.lag_probe,
                           gc_pauses=[(t, seconds) for t, seconds in self.gc_pauses],
                           cpu_percent_mean=sum(cpu) / len(cpu) if cpu else None, cpu_percent_max=max(cpu) if cpu else None,
                           cpu_time=[(round(t, 3), round(seconds, 3)) for t, seconds in self.cpu_time])

    def take(self) -> Samples:
        """The samples so far, leaving this empty (a worker ships them to its master)."""
        taken = Samples(self.lag[:], self.cpu[:], self.cpu_time[:], self.gc_pauses[:], self.lag_probe)
        self.lag.clear()
        self.cpu.clear()
        self.cpu_time.clear()
        self.gc_pauses.clear()
        return taken


class LagMonitor:
    """Event-loop lag: how late the loop runs an event that is due. High lag means the client
    distorts timings. The event is a kernel timer the loop waits on as on a socket, so it is late
    exactly as a chunk's read is (rig.load.kernel_timer says why a gevent sleep is not); without one
    (not Linux), a gevent sleep, whose lag overstates a socket's by up to 1 ms. Each wait is drawn
    between half and all of LAG_PERIOD_S: a fixed period locks onto an engine whose step is near it
    (or a divisor of it) and then samples only the quiet part of every step. The once-a-second work
    (CPU samples, a collection past its budget) runs after the next event is due, so a pause it
    causes is in the next sample like any other stall."""

    def __init__(self) -> None:
        self.samples = Samples()

    def run(self) -> None:
        import gevent
        import psutil
        from gevent.socket import wait_read

        process = psutil.Process()
        process.cpu_percent(None)
        last_cpu = time.monotonic()
        try:
            timer: KernelTimer | None = KernelTimer()
        except TimerUnavailable:
            timer = None
        samples = self.samples
        samples.lag_probe = LAG_PROBE_KERNEL if timer is not None else LAG_PROBE_SLEEP
        phases = random.Random(os.getpid())
        while True:
            due = time.monotonic() + phases.uniform(LAG_PERIOD_S / 2, LAG_PERIOD_S)
            if time.monotonic() - last_cpu >= 1.0:
                samples.cpu.append(process.cpu_percent(None))
                times = process.cpu_times()
                samples.cpu_time.append((time.time(), times.user + times.system))
                last_cpu = time.monotonic()
                self.collect_if_over_budget()
            if timer is not None:
                timer.arm(due)
                wait_read(timer.fileno())
                woke = time.monotonic()
                timer.consume()
            else:
                gevent.sleep(max(0.0, due - time.monotonic()))
                woke = time.monotonic()
            samples.lag.append((time.time(), woke - due))

    def collect_if_over_budget(self) -> None:
        if not gc.isenabled() and gc.get_count()[0] > GC_BUDGET:
            start = time.perf_counter()
            gc.collect()
            self.samples.gc_pauses.append((time.time(), time.perf_counter() - start))


def collect_rarely() -> None:
    """Thousands of live streams keep many objects alive; default GC thresholds then stop the event
    loop for full collections of ~10 ms, which shows up as client lag. Collect rarely until the users
    exist; during the measured run the collector is off (collector_off)."""
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)


def collector_off() -> None:
    """Everything alive once the users have spawned (users, sessions, prompts) lives to the end: move
    it out of the collector's reach, then stop collecting during the window. Reference counting
    still frees a request's objects when it ends; only cycles wait for the stop (or GC_BUDGET)."""
    gc.collect()
    gc.freeze()
    gc.disable()
