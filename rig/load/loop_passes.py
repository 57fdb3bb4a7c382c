"""How long a chunk's read can have waited behind the client's own event loop: its passes.

The loop (gevent's libev hub) works in passes, each begun when it comes back from waiting for the
network. A pass that began after a real wait (nothing was ready when the wait began) read only what
arrived during it, so no earlier than the pass's start, less the wake-up the lag monitor meets too; a
pass that began at once (its wait returned what was already there) reads what arrived since the
previous pass began. A read at `now` can then have waited at most now - `earliest` behind the loop's
own work: an engine's step sends a chunk to every running stream at once and the loop reads them one
after another, and the next requests are built before it waits again, a queue no probe timed on its
own event meets (`python benchmarks/lag_probe.py`; RequestRecord.chunk_waits_us).

Two libev watchers keep `earliest`: a prepare watcher of the lowest priority runs last before each
wait (after gevent's own callbacks, which run greenlets there) and looks, at no wait, whether anything
on the loop's own epoll is ready already; a check watcher of the highest runs first after the wait,
before any socket's watcher. A wait counts as a real one when nothing was ready and it lasted
IDLE_WAIT_S (without an epoll to look at: IDLE_WAIT_UNSEEN_S); any other counts as one that found
something ready (the safe side). Times are wall-clock seconds, as the records'. Used by the
locustfile and by benchmarks/lag_probe.py; gevent is imported when the watchers start.
"""

from __future__ import annotations

import os
import time
from typing import Any

IDLE_WAIT_S = 50e-6
IDLE_WAIT_UNSEEN_S = 0.001


class LoopPasses:
    """The current process's event loop, pass by pass (watch() starts it, once)."""

    def __init__(self) -> None:
        now = time.time()
        self.earliest = now  # the earliest a byte read now can have become ready
        self.start = now  # when the current pass began
        self.waiting_since = now  # when the loop last began to wait
        self.ready: bool | None = True  # something was ready when it began (None: it cannot tell)
        self.look: Any = None  # the loop's own epoll, through a second descriptor
        self.watchers: list[Any] = []  # kept alive

    def waited_us(self, now: float) -> int:
        """The most a read at `now` can have waited behind the loop's own work, in microseconds."""
        return max(0, int((now - self.earliest) * 1e6))

    def watch(self) -> None:
        if self.watchers:
            return
        import gevent
        import gevent.monkey

        loop = gevent.get_hub().loop
        before, after = loop.prepare(ref=False, priority=-2), loop.check(ref=False, priority=2)
        before.start(self._before_wait)
        after.start(self._after_wait)
        self.watchers = [before, after]
        if getattr(loop, "backend", None) == "epoll":  # the same interest list (gevent's patched select has no epoll)
            self.look = gevent.monkey.get_original("select", "epoll").fromfd(os.dup(loop.fileno()))

    def _before_wait(self) -> None:
        self.waiting_since = time.time()
        self.ready = bool(self.look.poll(0, 1)) if self.look is not None else None

    def _after_wait(self) -> None:
        now = time.time()
        waited = now - self.waiting_since
        idle = waited >= IDLE_WAIT_UNSEEN_S if self.ready is None else not self.ready and waited >= IDLE_WAIT_S
        self.earliest = now if idle else self.start
        self.start = now
