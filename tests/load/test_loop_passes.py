"""rig.load.loop_passes: the earliest a byte read now can have arrived, from the event loop's passes.
The watchers' callbacks are driven by hand on a clock the test sets (no timing is asserted); one
real gevent loop checks that they run and look at its epoll."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO

from rig.load import loop_passes
from rig.load.loop_passes import IDLE_WAIT_S, IDLE_WAIT_UNSEEN_S, LoopPasses


class Look:
    def __init__(self, ready: bool) -> None:
        self.ready = ready

    def poll(self, timeout: float, events: int) -> list:
        assert timeout == 0 and events == 1  # a look, never a wait
        return [(5, 1)] if self.ready else []


def one_pass(passes: LoopPasses, monkeypatch, wait_began: float, wait_ended: float) -> None:
    monkeypatch.setattr(loop_passes.time, "time", lambda: wait_began)
    passes._before_wait()
    monkeypatch.setattr(loop_passes.time, "time", lambda: wait_ended)
    passes._after_wait()


@pytest.mark.parametrize(("ready", "waited", "from_this_pass"), [
    (False, 0.010, True),  # nothing ready, a real wait: what it read arrived during it
    (False, IDLE_WAIT_S / 2, False),  # too short to tell a wait from a syscall: the safe side
    (True, 0.010, False),  # something was ready already: it may have arrived during the last pass
    (None, 0.010, True),  # no epoll to look at: a long wait counts
    (None, IDLE_WAIT_UNSEEN_S / 2, False),
])
def test_a_pass_counts_from_its_own_start_only_after_a_real_wait(monkeypatch, ready, waited, from_this_pass):
    passes = LoopPasses()
    passes.look = None if ready is None else Look(False)
    one_pass(passes, monkeypatch, 100.0, 100.010)  # a first, real pass that began at 100.010
    passes.look = None if ready is None else Look(ready)
    one_pass(passes, monkeypatch, 100.020, 100.020 + waited)
    assert passes.start == 100.020 + waited
    assert passes.earliest == (100.020 + waited if from_this_pass else 100.010)
    assert abs(passes.waited_us(100.030 + waited) - 1e6 * (100.030 + waited - passes.earliest)) <= 1  # whole microseconds
    assert passes.waited_us(passes.earliest - 1.0) == 0  # a clock stepped back: never a negative wait


def test_the_watchers_run_on_a_real_loop_and_look_at_its_epoll():
    script = f"""
import sys; sys.path.insert(0, {str(REPO)!r})
import gevent, socket
from gevent import socket as gsocket
from rig.load.loop_passes import LoopPasses
passes = LoopPasses(); passes.watch(); passes.watch()  # twice: one set of watchers
before = passes.earliest
a, b = socket.socketpair()
reader = gevent.spawn(lambda: gsocket.socket(fileno=a.detach()).recv(1))
gevent.sleep(0.01)
b.send(b"x")
reader.join()
print(len(passes.watchers), passes.look is not None, passes.earliest > before)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["2", "True", "True"]
