"""One Ctrl-C reaches rig twice when rig runs under `timeout --foreground` (the terminal signals the
whole group, and timeout relays what it got): the copy within RELAY_WINDOW_S of the SIGINT rig acted
on is dropped, so it cannot cut the orderly stop of the engine; a later one still interrupts."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from rig.cli import signals


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    now = [1000.0]
    monkeypatch.setattr(signals.time, "monotonic", lambda: now[0])
    signals._interrupted_at.clear()
    yield now
    signals._interrupted_at.clear()


def test_a_relayed_copy_of_a_ctrl_c_is_dropped_and_a_later_press_interrupts(clock):
    with pytest.raises(KeyboardInterrupt):
        signals._interrupt(signal.SIGINT, None)
    clock[0] += 0.002  # timeout's relay of the same Ctrl-C
    assert signals._interrupt(signal.SIGINT, None) is None
    clock[0] += signals.RELAY_WINDOW_S  # the user presses again: stop now
    with pytest.raises(KeyboardInterrupt):
        signals._interrupt(signal.SIGINT, None)


@pytest.mark.parametrize("before,after", [
    (signal.default_int_handler, signals._interrupt),
    (signal.SIG_IGN, signal.SIG_IGN),  # a background job's ignored SIGINT stays ignored
])
def test_rig_takes_sigint_unless_it_was_ignored(clock, before, after):
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGINT, before)
        signals._interrupted_at.append(1.0)  # a previous command's interrupt is forgotten
        signals.handle_termination()
        assert signal.getsignal(signal.SIGINT) is after and signals._interrupted_at == []
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
