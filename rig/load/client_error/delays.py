"""The delays of one Locust process's event loop, as its lag monitor met them (docs/client-error.md,
R1-R3). Every time the client records is late by however long its loop took to get to the socket;
the monitor is itself such an event (rig.load.kernel_timer), so its samples are that delay's
distribution. Samples under the monitor's period are short stretches (R1); a later sample is one
long stretch, placed in time (R2)."""

from __future__ import annotations

import bisect
import functools
import math
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from rig.load.wire import LAG_PERIOD_S, ClientStats

# The records' clock (time.time()), and a float's step at today's epoch seconds (until 2038), the coarser
CLOCK_RESOLUTION_S = max(time.get_clock_info("time").resolution, math.ulp(2.0**31))
STRETCH_MARGIN_S = 1.0  # stretches this far either side of the window still reach its requests' reads


class Stretch(NamedTuple):
    """R2: a long stretch in time. An event recorded inside [start_s, end_s] may be late by up to
    delay_s: from the stretch's earliest start (the wake-up, less the lag and a period) to the
    monitor's next wake-up (by then the loop has read what the stretch held back)."""

    start_s: float
    end_s: float
    delay_s: float


@dataclass(frozen=True)
class DelayLevel:
    """R1: one candidate delay level L of one process, and the events it does not cover."""

    level_s: float  # the clock's resolution included
    beyond_share: float  # share of the monitor's samples from short stretches later than L


@dataclass(frozen=True)
class ShortDelays:
    """R1: the delays of stretches under the monitor's period. Rare ones (a quiet loop) are far from
    normal, so a bound on their sum carries the largest once besides the normal spread."""

    mean_s: float
    sd_s: float
    largest_s: float


def longest_reaching_s(stretches: tuple[Stretch, ...], t_s: float) -> float:
    """The longest delay of the stretches (sorted by start) that reached time t_s (0: none)."""
    i = bisect.bisect_right(stretches, (t_s, math.inf, math.inf))
    return max((s.delay_s for s in stretches[max(0, i - 2):i] if s.start_s <= t_s <= s.end_s), default=0.0)


@dataclass(frozen=True)
class LagProfile:
    """One Locust process's event delays: the monitor's samples inside the window (R1), its long
    stretches near the window (`stretches`) and over the whole run up to the window's end
    (`run_stretches`: the spawn's and the ramp's too, R2)."""

    process: str | None
    samples_s: tuple[float, ...]  # sorted
    stretches: tuple[Stretch, ...] = ()
    run_stretches: tuple[Stretch, ...] = ()
    # the mean and the largest short delay over the run up to the window's end (the ramp is often busier)
    run_short_mean_s: float = 0.0
    run_short_largest_s: float = 0.0

    @classmethod
    def of(cls, client: ClientStats, start_s: float, end_s: float) -> LagProfile:
        """The samples from start_s to end_s: the window, and after it as long as a request sent inside it was read."""
        timed = sorted((t, max(lag, 0.0)) for t, lag in client.lag)
        inside = sorted(lag for t, lag in timed if start_s <= t <= end_s)
        stretches, run_stretches = [], []
        for i, (wake, lag) in enumerate(timed):
            if lag <= LAG_PERIOD_S:
                continue
            after = timed[i + 1][0] if i + 1 < len(timed) else wake + LAG_PERIOD_S + lag
            stretch = Stretch(wake - lag - LAG_PERIOD_S, after, lag + LAG_PERIOD_S)
            if start_s - STRETCH_MARGIN_S <= wake <= end_s + STRETCH_MARGIN_S:
                stretches.append(stretch)
            if wake <= end_s + STRETCH_MARGIN_S:
                run_stretches.append(stretch)
        short = [lag for t, lag in timed if t <= end_s + STRETCH_MARGIN_S and lag <= LAG_PERIOD_S]
        return cls(client.process, tuple(inside), tuple(stretches), tuple(run_stretches),
                   float(np.mean(short)) if short else 0.0, max(short, default=0.0))

    def lates_s(self, times_s: np.ndarray) -> np.ndarray:
        """R2: how late a long stretch near the window may have made an event recorded at each time;
        a stretch reaching a time is one of the two begun last by it (as longest_reaching_s reads them)."""
        out = np.zeros(len(times_s))
        if not self.stretches:
            return out
        starts, ends, delays = (np.array(column) for column in zip(*self.stretches))
        begun = np.searchsorted(starts, times_s, side="right")
        for back in (1, 2):
            index = begun - back
            held = index >= 0
            index = np.where(held, index, 0)
            held &= (starts[index] <= times_s) & (times_s <= ends[index])
            out = np.maximum(out, np.where(held, delays[index], 0.0))
        return out

    def run_late_s(self, t_s: float) -> float:
        """R2 over the whole run: how long a stretch may have held up what the loop did at t_s."""
        return longest_reaching_s(self.run_stretches, t_s)

    def overlapping_s(self, a_s: float, b_s: float) -> float:
        """The delays of the run's stretches that overlapped [a_s, b_s]: what held up work due in it."""
        return sum(s.delay_s for s in self.run_stretches if s.start_s <= b_s and s.end_s >= a_s)

    def inside_s(self, a_s: float, b_s: float) -> float:
        """The run's stretches clipped to [a_s, b_s]: the most they held up events due in it (an event
        due in a stretch waits at most to its end, and no later than b_s if it was read by b_s)."""
        return sum(max(0.0, min(s.end_s, b_s) - max(s.start_s, a_s)) for s in self.run_stretches if s.start_s <= b_s and s.end_s >= a_s)

    def longest_overlapping_s(self, a_s: float, b_s: float) -> float:
        """The longest of the run's stretches that overlapped [a_s, b_s]: the most it held up one event due in it."""
        return max((s.delay_s for s in self.run_stretches if s.start_s <= b_s and s.end_s >= a_s), default=0.0)

    def begun_by_s(self, t_s: float) -> float:
        """The delays of every stretch of the run begun by t_s."""
        return sum(s.delay_s for s in self.run_stretches if s.start_s <= t_s)

    @functools.cached_property
    def short_stretch_s(self) -> float:
        """R1: the longest stretch a short sample of the run may come from (a sample under the period
        may end a stretch begun up to a period before its timer was due)."""
        return max(self.short().largest_s, self.run_short_largest_s) + LAG_PERIOD_S

    def short(self) -> ShortDelays:
        """R1: the window's samples under the monitor's period."""
        return self._short

    @functools.cached_property
    def _short(self) -> ShortDelays:  # read for every figure and request: computed once per profile
        array = np.asarray(self.samples_s)
        short = array[array <= LAG_PERIOD_S]
        return ShortDelays(float(short.mean()) if short.size else 0.0, float(short.std()) if short.size > 1 else LAG_PERIOD_S,
                           float(short.max()) if short.size else LAG_PERIOD_S)

    def levels(self) -> list[DelayLevel]:
        """R1: L at the monitor's p90, p99, p99.9 and top. A short sample stands for the events'
        delays (the monitor meets a short stretch as often as any event does); a long one counts a
        period longer (R2). The top level is the longest stretch, plus a period where every sample
        was short (one may have fallen between two samples): no event is later."""
        if not self.samples_s:
            return []
        array = np.asarray(self.samples_s)
        long = array > LAG_PERIOD_S
        stretch = array + LAG_PERIOD_S * long  # the longest stretch each sample may have come from
        top = max([float(stretch.max()), *(s.delay_s for s in self.stretches)]) + (0.0 if long.any() else LAG_PERIOD_S)
        out = []
        for level in (*(float(v) for v in np.percentile(array, [90, 99, 99.9])), top):
            later = stretch > level
            out.append(DelayLevel(level_s=level + CLOCK_RESOLUTION_S, beyond_share=float((later & ~long).mean())))
        return out
