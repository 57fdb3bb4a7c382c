"""The timed server's engine mode (`--step S`): one step every S seconds, at which every running
request emits one chunk, so N streams make a burst of N events per step, not a smooth stream. At
most `max_num_seqs` requests run (vLLM's max_num_seqs); the rest wait in arrival order and are
admitted at a step boundary when one finishes. A request's first chunk comes `ttft` after its
admission, rounded up to whole steps (its prefill), then one chunk per step."""

from __future__ import annotations

import asyncio
import collections
import math
from collections.abc import Callable


class StepStream:
    """One request inside the step engine: where its chunks go, and how far it has got."""

    def __init__(self, send_chunk: Callable[[int, bool], None], tokens: int, gone: Callable[[], bool] = lambda: False) -> None:
        self.send_chunk = send_chunk  # (index, last) -> None: writes one chunk
        self.gone = gone  # the client closed its connection: the engine aborts the request, as vLLM does
        self.tokens = tokens
        self.sent = 0
        self.first_step: int | None = None  # the step of its first chunk, set at admission
        self.done = asyncio.Event()


def prefill_steps(ttft: float, step: float) -> int:
    """The engine-like server's prefill: `ttft` rounded up to whole steps, at least one."""
    return max(1, math.ceil(ttft / step - 1e-9))


def offered_events_per_s(streams: int, tokens: int, ttft: float, itl: float, step: float | None = None) -> float:
    """The token events per second `streams` closed-loop users are offered, each sending its next
    request as its last chunk arrives. On deadlines: a request lasts ttft + (tokens - 1) * itl. Like
    an engine: a request arriving just after a step waits for the next one to be admitted, then its
    prefill, then one chunk per step, so a user's cycle is (prefill steps + tokens) steps (exact when
    the client answers within a step; `streams` is the running ones, at most max_num_seqs)."""
    cycle = (prefill_steps(ttft, step) + tokens) * step if step else ttft + (tokens - 1) * itl
    return streams * tokens / cycle


class StepEngine:
    """Steps every `step` seconds from its start (absolute deadlines); at each, admits waiting
    requests up to `max_num_seqs` and lets every running request past its prefill emit one chunk."""

    def __init__(self, step: float, max_num_seqs: int, ttft: float) -> None:
        self.step, self.max_num_seqs = step, max_num_seqs
        self.prefill_steps = prefill_steps(ttft, step)
        self.waiting: collections.deque[StepStream] = collections.deque()
        self.running: list[StepStream] = []
        self.task: asyncio.Task | None = None
        self.steps = 0
        self.late_max = 0.0  # the latest this engine finished writing a step's chunks after the step was due (its own error)

    def submit(self, stream: StepStream) -> None:
        self.waiting.append(stream)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            due = start + self.steps * self.step
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            k = self.steps
            self.steps += 1
            while self.waiting and len(self.running) < self.max_num_seqs:
                stream = self.waiting.popleft()
                if stream.gone():
                    stream.done.set()
                    continue
                stream.first_step = k + self.prefill_steps
                self.running.append(stream)
            still = []
            for stream in self.running:
                if stream.gone():  # never written to a closed socket (asyncio logs every such write at a run's stop)
                    stream.done.set()
                    continue
                if stream.first_step is not None and k >= stream.first_step:
                    stream.sent += 1
                    last = stream.sent >= stream.tokens
                    stream.send_chunk(stream.sent - 1, last)
                    if last:
                        stream.done.set()
                        continue
                still.append(stream)
            self.running = still
            self.late_max = max(self.late_max, loop.time() - due)
