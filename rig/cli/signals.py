"""How rig stops: SIGTERM and SIGHUP are handled exactly like Ctrl-C (whatever rig started is
stopped first), and the exit status still says which signal stopped it."""

from __future__ import annotations

import signal
import sys
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
