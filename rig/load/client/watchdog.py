"""Read timeouts for every stream of a Locust process, kept by one greenlet."""

from __future__ import annotations

import time
from typing import Any

import gevent


class Stalled(Exception):
    """Raised in a stream's greenlet by the stall watchdog: nothing arrived for its read timeout."""


class StallWatch:
    """One stream's watch: its greenlet, when something last arrived (wall clock, as the records),
    its timeout, and whether the watchdog fired."""

    __slots__ = ("greenlet", "last", "timeout_s", "fired")

    def __init__(self, timeout_s: float) -> None:
        self.greenlet, self.last, self.timeout_s, self.fired = gevent.getcurrent(), time.time(), timeout_s, False


class StallWatchdog:
    """A socket timeout arms and cancels a gevent timer around every wait of every stream (~15% of the
    client's CPU at 3000 streams); here a stream stamps each arrival, and every CHECK_S the watchdog
    raises Stalled in the greenlet of a stream silent for longer than its timeout. It is raised from
    the hub, after checking again that the stream is still watched and still silent, so it lands at
    the stream's own wait (inside the request, its only blocking point) and nowhere else; urllib3
    then closes the connection (an interrupted response never goes back to the pool). A timeout
    fires between timeout_s and timeout_s + CHECK_S."""

    CHECK_S = 0.25

    def __init__(self) -> None:
        self.watched: dict[int, StallWatch] = {}
        self.greenlet: Any = None

    def watch(self, timeout_s: float) -> StallWatch:
        watch = StallWatch(timeout_s)
        self.watched[id(watch)] = watch
        if self.greenlet is None:
            self.greenlet = gevent.spawn(self._run)
        return watch

    def release(self, watch: StallWatch) -> None:
        self.watched.pop(id(watch), None)

    def _run(self) -> None:
        loop = gevent.get_hub().loop
        while True:
            gevent.sleep(self.CHECK_S)
            now = time.time()
            for watch in list(self.watched.values()):
                if not watch.fired and now - watch.last > watch.timeout_s:
                    loop.run_callback(self._expire, watch)

    def _expire(self, watch: StallWatch) -> None:
        if self.watched.get(id(watch)) is watch and not watch.fired and time.time() - watch.last > watch.timeout_s:
            watch.fired = True
            watch.greenlet.throw(Stalled(f"nothing arrived for {watch.timeout_s:g} s"))
