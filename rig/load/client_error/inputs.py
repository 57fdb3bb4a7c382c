"""What the bounds read of one Locust process (docs/client-error.md): its requests completed inside
the window, every record of it (the aggregate counts cut streams too), its delays (R1, R2), the
master's where it dispatched the users (R6), and the run's first chunks (R12)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rig.load.client_error.delays import LagProfile
from rig.load.client_error.timeline import NO_FIRST_CHUNKS, FirstChunks
from rig.load.records import RequestRecord
from rig.load.request_metrics import Done
from rig.load.summary import Window

if TYPE_CHECKING:
    from rig.load.client_error.aggregate import AggregateParts


@dataclass(frozen=True)
class FigureInputs:
    """The completed requests one process sent inside the window, and its delay profile."""

    done: list[Done]
    profile: LagProfile
    window: Window
    records: list[RequestRecord]  # every request of the process
    tokens_per_chunk: float  # the run's, where a stream did not say (rig.load.request_metrics)
    tokens_per_chunk_known: bool  # some stream of the run finished with its usage (else a guess of 1)
    dispatcher: LagProfile | None = None  # the Locust master's delays in a distributed run (R6)
    pause_s: float = 0.0  # the scenario's think time between a conversation's turns (R7)
    first_chunks: FirstChunks = field(default_factory=lambda: NO_FIRST_CHUNKS)  # the run's (R12)
    # this process's part of the aggregate (R9-R14), computed once by figure_inputs: its bound and
    # the pooled one (R15) read it
    aggregate: AggregateParts | None = None

    @functools.cached_property
    def shared(self) -> dict[object, object]:
        """Work several figures of this process read (their samples, rig.load.client_error.figures):
        done once."""
        return {}
