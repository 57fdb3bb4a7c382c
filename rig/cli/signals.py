"""How rig stops: SIGTERM and SIGHUP are handled exactly like Ctrl-C (whatever rig started is
stopped first), and the exit status still says which signal stopped it.

One Ctrl-C can reach rig twice: the terminal sends it to the whole foreground process group, and a
`timeout --foreground` in that group (benchmarks/gpu-host/step.sh runs rig under one) relays what it
received to rig as well. A second SIGINT means "stop now, skip the orderly shutdown", so a relayed
copy would cut the stop of the engine rig is shutting down. A SIGINT within RELAY_WINDOW_S of the
one rig acted on is that same Ctrl-C and is dropped; a later one is the user pressing again."""

from __future__ import annotations

import signal
import sys
import time
from types import FrameType

from rig.exits import SIGNALLED


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled exactly like Ctrl-C: whatever rig started is stopped first."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


# The termination signal rig received, once: a load run catches the interrupt to write what it
# measured, and its callers report "interrupted"; the exit status still says which signal stopped rig
# (a scheduler's preemption is not a Ctrl-C).
received: list[int] = []


def _terminate(signum: int, frame: FrameType | None) -> None:
    for other in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # the cleanup runs once; SIGKILL still ends rig
        signal.signal(other, signal.SIG_IGN)
    received.append(signum)
    raise Terminated(signum)


RELAY_WINDOW_S = 1.0  # a relay comes within milliseconds; a person presses again after far longer
_interrupted_at: list[float] = []  # when rig last acted on a SIGINT (time.monotonic)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    now = time.monotonic()
    if _interrupted_at and now - _interrupted_at[-1] < RELAY_WINDOW_S:
        return  # the same Ctrl-C, relayed
    _interrupted_at.append(now)
    raise KeyboardInterrupt


def hold_interrupts() -> None:
    """rig is stopping: a further Ctrl-C (users press it again) must not cut its last lines or end it
    by the signal itself (exit -2, not 130)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stopped_by_signal() -> int:
    signum = received[0]
    print(f"rig: stopped by {signal.Signals(signum).name}", file=sys.stderr)
    return SIGNALLED + signum


def handle_termination() -> None:
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # respect nohup
            signal.signal(signum, _terminate)
    _interrupted_at.clear()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not ignored (a background job's)
        signal.signal(signal.SIGINT, _interrupt)
