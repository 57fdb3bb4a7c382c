"""The run's arrival times, shared by a Locust process's users (open-loop arrivals, trace replays)."""

from __future__ import annotations

from collections.abc import Callable

from gevent.event import Event

from rig.load.wire import LoadConfig
from rig.load.workload import gamma_offsets

EPOCH_LEAD_S = 0.5  # the epoch is set this far ahead, so every worker has it before the first arrival
EPOCH_MESSAGE = "rig_epoch"  # master -> workers: the schedule's epoch
DRAINED_MESSAGE = "rig_drained"  # worker -> master: this worker's share is done and answered


class ArrivalSchedule:
    """Every process computes the same schedule and takes its share (arrival i goes to process
    i mod n), so the arrivals of a distributed run are the one schedule the scenario asked for. The
    schedule starts at an epoch the master (or the only process) sets just after every user has
    spawned. Once the share is claimed and answered, `on_drained` ends the run instead of idling
    to -t."""

    def __init__(self, on_drained: Callable[[], None]) -> None:
        self.on_drained = on_drained
        self.offsets: list[float] = []
        self.index = self.step = 0
        self.epoch: float | None = None
        self.started = Event()
        self.exhausted = False
        self.inflight = 0  # arrivals claimed by a user and not yet answered
        self.drained = False

    def load(self, settings: LoadConfig, worker: int) -> None:
        arrivals = settings.arrivals
        if arrivals is not None and arrivals.offsets is not None:  # a trace: its own timestamps
            self.offsets = arrivals.offsets
        elif arrivals is not None:
            self.offsets = gamma_offsets(arrivals.rate, arrivals.burstiness, arrivals.count, arrivals.seed)  # type: ignore[arg-type]
        self.step = max(1, settings.arrival_processes)
        self.index = worker % self.step

    def start(self, epoch: float) -> None:
        self.epoch = epoch
        self.started.set()

    def claim(self) -> tuple[int, float] | None:
        """The next arrival of this process's share, or None once the schedule is done."""
        if self.index >= len(self.offsets):
            self.exhausted = True
            self._check_drained()
            return None
        index = self.index
        self.index += self.step
        self.inflight += 1  # claimed and not yet answered: the run is not drained while a user waits to send it
        return index, self.epoch + self.offsets[index]  # type: ignore[operator]

    def finished_one(self) -> None:
        self.inflight -= 1
        self._check_drained()

    def _check_drained(self) -> None:
        """The schedule is done and nothing is in flight: end the run."""
        if not self.exhausted or self.inflight or self.drained:
            return
        self.drained = True
        self.on_drained()
