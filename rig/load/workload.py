"""Arrival schedules and output lengths: the random parts of a workload, drawn the same way by rig
(to know what a run was asked to do) and by the Locust user (to do it).

pydantic and rig's import-light modules only: Locust processes, also remote workers, import it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, model_validator

from rig.load.bounds import MAX_OUTPUT_TOKENS, bounded_int, bounded_seconds
from rig.typed import Spec


def gamma_offsets(rate: float, burstiness: float, count: int, seed: int | str) -> list[float]:
    return gamma_schedule(rate, burstiness, count, seed)[0]


def gamma_schedule(rate: float, burstiness: float, count: int, seed: int | str) -> tuple[list[float], float]:
    """`count` arrival times (seconds after the schedule's start) of a renewal process whose gaps are
    Gamma(shape=burstiness, scale=1/(rate*burstiness)), as `vllm bench serve` draws them (burstiness
    1 is a Poisson process; below 1 burstier, above 1 more regular). Like vLLM, the times are scaled
    so that the last one lands at count/rate: the schedule's own rate is exactly the target, and
    for a Poisson process this is the process conditioned on its count (the gaps stay exponential
    in distribution). Which arrivals fall in a measurement window still varies by chance.
    Returns the offsets and the factor they were scaled by: gaps divided by it are the iid Gamma
    draws again, which is what a goodness-of-fit test must look at (the scaling alone would make
    a test against the target distribution pass too often: measured, 0 of 300 true Poisson
    schedules rejected at 5%)."""
    if rate <= 0 or burstiness <= 0 or count < 1:
        raise ValueError("rate, burstiness and count must be positive")
    rng = random.Random(f"arrivals/{seed}")
    scale = 1.0 / (rate * burstiness)
    elapsed = 0.0
    offsets = []
    for _ in range(count):
        elapsed += rng.gammavariate(burstiness, scale)
        offsets.append(elapsed)
    factor = (count / rate) / offsets[-1]
    return [t * factor for t in offsets], factor


def arrivals_in(offsets: Sequence[float], epoch: float, start: float, end: float) -> int:
    """How many scheduled arrivals fall inside [start, end] (absolute times)."""
    import bisect

    return max(0, bisect.bisect_right(offsets, end - epoch) - bisect.bisect_left(offsets, start - epoch))


class FixedLengths(Spec):
    distribution: Literal["fixed"]


class UniformLengths(Spec):
    distribution: Literal["uniform"]
    min: bounded_int(1, MAX_OUTPUT_TOKENS)
    max: bounded_int(1, MAX_OUTPUT_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLengths:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class LognormalLengths(Spec):
    distribution: Literal["lognormal"]
    median: bounded_int(1, MAX_OUTPUT_TOKENS)
    sigma: bounded_seconds(0.0, 4.0, open_low=True)


class TraceLengths(Spec):
    """Each request's own length: a trace row's output_length, a conversation's recorded reply."""

    distribution: Literal["trace"]


OutputLengthSpec = Annotated[FixedLengths | UniformLengths | LognormalLengths | TraceLengths, Field(discriminator="distribution")]


class OutputLengths:
    """Draws each request's output length (max_tokens) from the scenario's distribution, clipped to
    [1, cap]. `spec` is the scenario's `output_lengths`; None means always `cap`."""

    def __init__(self, spec: OutputLengthSpec | None, cap: int) -> None:
        self.spec: OutputLengthSpec = spec or FixedLengths(distribution="fixed")
        self.cap = cap

    @property
    def per_request(self) -> bool:
        """True when lengths come with each request (a trace or a conversation file)."""
        return isinstance(self.spec, TraceLengths)

    def draw(self, rng: random.Random, given: int | None = None) -> int:
        spec = self.spec
        if isinstance(spec, FixedLengths):
            value = self.cap
        elif isinstance(spec, UniformLengths):
            value = rng.randint(spec.min, spec.max)
        elif isinstance(spec, LognormalLengths):
            value = round(rng.lognormvariate(math.log(spec.median), spec.sigma))
        else:
            value = given if given is not None else self.cap
        return max(1, min(self.cap, int(value)))
