"""A Ctrl-C (or SIGTERM) that lands while the native driver spawns the server, before the server's
pid is recorded, still stops the server: the signal is held over that stretch and delivered once
the pid is known. The signals are raised from inside the spawn itself, at the exact point, twice
(a terminal's or a process group's SIGINT, then the one `timeout --foreground` relays)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from conftest import free_port

from rig.boot import driver_for, native
from rig.boot.process import HeldSignals, group_alive
from rig.boot.state import current_boot
from rig.cli.signals import Terminated, _terminate
from rig.deploy.recipe import load

SERVER = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture
def interruptible() -> Iterator[None]:
    """The handlers rig runs under: Python's Ctrl-C and rig's SIGTERM (pytest's workers may differ)."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _spawned_then(monkeypatch, where: str, signums: tuple[int, ...]) -> list[subprocess.Popen]:
    """Raise `signums` in this process right after the fork (inside Popen, before it returns) or
    right after Popen returned (before the server's pid is read back and written)."""
    spawned: list[subprocess.Popen] = []
    real_popen, real_identity = subprocess.Popen, native.kernel.identity

    def popen(*args, **kwargs):
        spawned.append(real_popen(*args, **kwargs))
        if where == "inside the spawn":
            for signum in signums:
                signal.raise_signal(signum)
        return spawned[-1]

    def identity(pid):
        if where == "before the pid is written":
            for signum in signums:
                signal.raise_signal(signum)
        return real_identity(pid)

    monkeypatch.setattr(native.subprocess, "Popen", popen)
    monkeypatch.setattr(native.kernel, "identity", identity)
    return spawned


@pytest.mark.parametrize("where", ["inside the spawn", "before the pid is written"])
@pytest.mark.parametrize("signums", [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM,)], ids=["double SIGINT", "SIGTERM"])
def test_a_signal_while_the_server_spawns_stops_the_server(results_dir, monkeypatch, interruptible, where, signums):
    resolved = load("tiny-cpu")
    driver = driver_for(resolved)
    monkeypatch.setattr(driver, "model_path", lambda resolved: "unused")
    monkeypatch.setattr(driver, "argv", lambda resolved, model, port: list(SERVER))
    spawned = _spawned_then(monkeypatch, where, signums)
    with pytest.raises(KeyboardInterrupt) as raised:
        driver.up(resolved, port=free_port(), progress=False)
    assert isinstance(raised.value, Terminated) == (signums[0] == signal.SIGTERM)
    assert len(spawned) == 1 and spawned[0].poll() is not None  # stopped and reaped, not left running
    assert not group_alive(spawned[0].pid)
    assert current_boot("tiny-cpu") is None
    # rig's handler is back, and ran: Ctrl-C's raises and stays; rig's SIGTERM ignores every later signal
    assert signal.getsignal(signal.SIGINT) is (signal.default_int_handler if signums[0] == signal.SIGINT else signal.SIG_IGN)


def test_held_signals_deliver_nothing_when_none_came_and_leave_an_ignored_signal_ignored(interruptible):
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        held = HeldSignals()
        held.hold()
        signal.raise_signal(signal.SIGHUP)  # ignored (nohup), so not held either
        held.release()
        assert held.held == [] and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
